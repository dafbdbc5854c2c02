"""Benchmark harness: the same utterances through main-only and speculative decoding (and the
tools people would use instead), WER with Whisper's normalizers, and a hard exactness check.

Timing discipline: audio is decoded before any timing; every configuration runs once as warm-up;
within each repeat every configuration runs on a block of utterances (a multiple of every batch
size) before the next block, so drifts in machine speed hit all alike; medians over repeats.
Generation time covers features, encoder and decoder.
"""

from __future__ import annotations

import functools
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path

import jiwer
import numpy as np
import torch
from tqdm import tqdm

from .audio import CHUNK_SECONDS, SAMPLE_RATE, load_audio, log_mel_spectrogram, pad_or_trim
from .batch import collect_jobs
from .decoding import DecodingOptions, DecodingStats, decode_windows
from .loader import WhisperPair, decoder_precision, load_pair

REPORT_VERSION = 1


@dataclass(frozen=True)
class Utterance:
    id: str
    audio: np.ndarray  # 16 kHz mono float32
    text: str | None  # reference transcript; None: no WER
    language: str | None

    @property
    def seconds(self) -> float:
        return len(self.audio) / SAMPLE_RATE


@dataclass(frozen=True)
class BenchOptions:
    batch_sizes: tuple[int, ...] = (1, 4)
    int8: bool = False  # add int8 configurations (main-only and speculative)
    peers: tuple[str, ...] = ("transformers", "faster-whisper")  # those installed run too
    repeats: int = 3
    draft_tokens: int = DecodingOptions.draft_tokens
    draft_confidence: float = DecodingOptions.draft_confidence
    task: str = "transcribe"


@dataclass(frozen=True)
class Config:
    name: str
    engine: str  # whisper-spec, transformers, faster-whisper
    batch_size: int
    speculative: bool = False
    int8: bool = False

    @property
    def baseline(self) -> str:
        """The main-only configuration this one must reproduce token for token."""
        return f"main{' int8' if self.int8 else ''} b{self.batch_size}"


@dataclass
class Run:
    tokens: list[list[int]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    total_seconds: list[float] = field(default_factory=list)  # one per repeat
    encoder_seconds: list[float] = field(default_factory=list)
    decoding_seconds: list[float] = field(default_factory=list)
    stats: DecodingStats | None = None  # counts (identical in every repeat)
    per_utterance: list[DecodingStats] = field(default_factory=list)
    peak_memory_bytes: int | None = None


# ---------------------------------------------------------------------------- data


def _decode_bytes(data: bytes, name: str) -> np.ndarray:
    with tempfile.NamedTemporaryFile(suffix=Path(name).suffix or ".wav") as tmp:
        tmp.write(data)
        tmp.flush()
        return load_audio(tmp.name)


def load_utterances(source: str, *, config: str | None = None, split: str = "test", sets: list[str] | None = None,
                    limit: int | None = None, language: str | None = None) -> list[Utterance]:
    """Utterances from a JSON-lines manifest (path, text, language; filtered by `set`), an audio
    folder or glob (no references), or a Hugging Face dataset id with config and split."""
    path = Path(source)
    if not path.exists() and (source.startswith((".", "/", "~")) or path.suffix):
        raise ValueError(f"{source}: no such file or folder")
    if path.suffix == ".jsonl" and path.is_file():
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        if sets:
            rows = [r for r in rows if r.get("set") in sets]
        rows = rows[:limit] if limit else rows
        return [Utterance(r.get("utt_id") or r["path"], load_audio(path.parent / r["path"]), r.get("text"),
                          language or r.get("language")) for r in rows]
    if path.is_dir() or any(c in source for c in "*?["):
        jobs = collect_jobs(source)[:limit] if limit else collect_jobs(source)
        return [Utterance(job.name, load_audio(job.path), None, language) for job in jobs]
    return _hub_utterances(source, config, split, limit, language)


def _hub_utterances(dataset_id: str, config: str | None, split: str, limit: int | None, language: str | None):
    import datasets

    try:
        data = datasets.load_dataset(dataset_id, config, split=split, streaming=limit is not None)
    except Exception as error:  # noqa: BLE001 - any hub or network failure: one clear line
        raise ValueError(f"{dataset_id}: cannot load the dataset ({str(error).splitlines()[0]})") from None
    data = data.cast_column("audio", datasets.Audio(decode=False))
    language = language or (config if config and len(config) == 2 else None)
    out = []
    for i, row in enumerate(data):
        if limit is not None and i >= limit:
            break
        audio = row["audio"]
        if audio.get("bytes"):
            samples = _decode_bytes(audio["bytes"], audio.get("path") or "audio.wav")
        else:
            samples = load_audio(audio["path"])
        text = next((row[k] for k in ("text", "normalized_text", "sentence", "raw_text", "transcription") if k in row), None)
        out.append(Utterance(str(row.get("id", i)), samples, text, language or row.get("language")))
    return out


# ---------------------------------------------------------------------------- WER


@functools.cache
def _english_normalizer():
    from transformers.models.whisper.english_normalizer import EnglishTextNormalizer

    spelling = json.loads(resources.files("whisper_spec").joinpath("data/english_spelling.json").read_text())
    return EnglishTextNormalizer(spelling)


@functools.cache
def _basic_normalizer():
    from transformers.models.whisper.english_normalizer import BasicTextNormalizer

    return BasicTextNormalizer()


def normalize(text: str, language: str | None) -> str:
    """Whisper's normalizers: the English one (with its spelling table) for English, else the basic one."""
    return (_english_normalizer() if language in (None, "en") else _basic_normalizer())(text)


def word_error_rate(references: list[str | None], hypotheses: list[str], languages: list[str | None]) -> float | None:
    """Corpus WER after normalization; pairs without a reference, or whose reference normalizes
    to nothing, are left out (as in Whisper's evaluations)."""
    refs, hyps = [], []
    for ref, hyp, language in zip(references, hypotheses, languages):
        if ref is None:
            continue
        ref = normalize(ref, language)
        if ref.strip():
            refs.append(ref)
            hyps.append(normalize(hyp, language))
    return jiwer.wer(refs, hyps) if refs else None


# ---------------------------------------------------------------------------- memory


class PeakMemory:
    """Peak CUDA memory allocated, or peak resident set size sampled every 5 ms on CPU."""

    def __init__(self, device: torch.device):
        self.device = device
        self.peak = 0
        self._stop = threading.Event()

    @staticmethod
    def rss() -> int:
        try:
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            import resource

            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self.rss())

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            self.peak = self.rss()
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            self.peak = torch.cuda.max_memory_allocated(self.device)
        else:
            self._stop.set()
            self._thread.join()
            self.peak = max(self.peak, self.rss())


# ---------------------------------------------------------------------------- engines


def _batches(n: int, size: int):
    return [range(i, min(i + size, n)) for i in range(0, n, size)]


def _mel(pair: WhisperPair, batch: list[Utterance]) -> torch.Tensor:
    """The main model's log-mel features of a batch of utterances, each padded to one window."""
    audio = torch.stack([pad_or_trim(torch.from_numpy(u.audio)) for u in batch]).to(pair.device)
    return log_mel_spectrogram(audio, pair.main.dims.n_mels)


def _run_ours(pair: WhisperPair, utterances: list[Utterance], config: Config, options: BenchOptions):
    decoding = DecodingOptions(task=options.task, draft_tokens=options.draft_tokens,
                               draft_confidence=options.draft_confidence)
    tokens, texts, stats, per_utterance = [], [], DecodingStats(), []
    for rows in _batches(len(utterances), config.batch_size):
        batch = [utterances[i] for i in rows]
        results, batch_stats = decode_windows(pair, _mel(pair, batch), decoding, languages=[u.language for u in batch],
                                              use_assistant=config.speculative)
        stats.add(batch_stats)
        tokens += [r.tokens for r in results]
        texts += [pair.main.text.decode(r.tokens) for r in results]
        per_utterance += [r.stats for r in results]
    return tokens, texts, stats, per_utterance


class TransformersPeer:
    """transformers' generate on the same main model (and the assistant exported as WhisperForCausalLM)."""

    def __init__(self, pair: WhisperPair, workdir: Path):
        from transformers import WhisperForCausalLM, WhisperForConditionalGeneration

        from .export import save_model

        self.pair = pair
        self.model = WhisperForConditionalGeneration.from_pretrained(pair.main.path, dtype=pair.dtype).to(pair.device)
        self.model.eval()
        self.assistant = None
        if pair.assistant is not None and pair.shares_encoder:
            # the assistant as stored (ours may draft in int8): reloaded float for the export
            stored = load_pair(pair.main.path, pair.assistant.name, dtype=pair.dtype, device=pair.device,
                               assistant_int8=False).assistant
            exported = save_model(stored, workdir / "assistant-hf", decoder_only=True)
            self.assistant = WhisperForCausalLM.from_pretrained(exported, dtype=pair.dtype).to(pair.device).eval()

    @torch.inference_mode()
    def run(self, utterances: list[Utterance], config: Config, options: BenchOptions, languages: list[str]):
        tokens, texts = [], []
        special = self.pair.main.special
        for rows in _batches(len(utterances), config.batch_size):
            mel = _mel(self.pair, [utterances[i] for i in rows]).to(self.pair.dtype)
            kwargs = {}
            if special.multilingual:
                # the language is passed: transformers 5.23 repeats one token forever when it detects it itself
                batch_languages = [languages[i] for i in rows]
                same = len(set(batch_languages)) == 1
                kwargs = {"language": batch_languages[0] if same else batch_languages, "task": options.task}
            if config.speculative:
                kwargs["assistant_model"] = self.assistant
            # as many tokens as our loop allows (448 with the prompt); transformers may otherwise stop at 20
            kwargs["max_new_tokens"] = self.pair.main.dims.n_text_ctx - len(special.prompt("en", options.task, False))
            out = self.model.generate(input_features=mel, **kwargs)
            for row in out.tolist():
                row = [t for t in row if t < special.eot]  # drop the prompt's special tokens and EOT padding
                tokens.append(row)
                texts.append(self.pair.main.text.decode(row))
        return tokens, texts


class FasterWhisperPeer:
    """faster-whisper (CTranslate2) on the same CTranslate2 model the main model was converted from."""

    def __init__(self, ct2_dir: Path, device: torch.device):
        from faster_whisper import WhisperModel

        self.compute_type = "float16" if device.type == "cuda" else "float32"
        self.model = WhisperModel(str(ct2_dir), device=device.type, compute_type=self.compute_type,
                                  cpu_threads=torch.get_num_threads())

    def run(self, utterances, config: Config, options: BenchOptions, languages):
        tokens, texts = [], []
        for i in range(len(utterances)):
            segments, _ = self.model.transcribe(
                utterances[i].audio, language=languages[i], task=options.task, beam_size=1, temperature=0.0,
                without_timestamps=True, condition_on_previous_text=False, vad_filter=False,
            )
            segments = list(segments)
            tokens.append([t for s in segments for t in s.tokens])
            texts.append("".join(s.text for s in segments))
        return tokens, texts


def ct2_source(model: str) -> Path | None:
    """The CTranslate2 directory a main model came from (the embedded ones are assembled once)."""
    from .models import EMBEDDED_MODELS, _is_ct2_dir, _locate, cache_dir

    if model in EMBEDDED_MODELS:
        spec = EMBEDDED_MODELS[model]
        target = cache_dir() / "ct2" / model
        if not (target / "model.bin").is_file():
            source = _locate(spec.ct2_dir).parent
            target.mkdir(parents=True, exist_ok=True)
            for f in source.iterdir():
                if f.is_file() and not f.name.startswith("model.bin"):
                    (target / f.name).write_bytes(f.read_bytes())
            partial = target / "model.bin.partial"
            with open(partial, "wb") as out:
                for part in spec.model_bin_parts:
                    out.write(_locate(part).read_bytes())
            partial.replace(target / "model.bin")
        return target
    path = Path(model)
    return path if path.is_dir() and _is_ct2_dir(path) else None


# ---------------------------------------------------------------------------- the harness


def plan_configs(pair: WhisperPair, options: BenchOptions, peers: dict) -> list[Config]:
    configs = []
    for b in options.batch_sizes:
        configs.append(Config(f"main b{b}", "whisper-spec", b))
        if pair.assistant is not None:
            configs.append(Config(f"speculative b{b}", "whisper-spec", b, speculative=True))
        if options.int8:
            configs.append(Config(f"main int8 b{b}", "whisper-spec", b, int8=True))
            if pair.assistant is not None:
                configs.append(Config(f"speculative int8 b{b}", "whisper-spec", b, speculative=True, int8=True))
    if "transformers" in peers:
        for b in options.batch_sizes:
            configs.append(Config(f"transformers b{b}", "transformers", b))
        if peers["transformers"].assistant is not None:  # assisted generation takes one sequence at a time
            configs.append(Config("transformers assisted b1", "transformers", 1, speculative=True))
    if "faster-whisper" in peers:
        configs.append(Config("faster-whisper b1", "faster-whisper", 1))
    return configs


def _load_peers(pair: WhisperPair, model: str, wanted: tuple[str, ...], workdir: Path, note) -> dict:
    peers = {}
    if "transformers" in wanted:
        peers["transformers"] = TransformersPeer(pair, workdir)
    if "faster-whisper" in wanted:
        try:
            import faster_whisper  # noqa: F401
        except ImportError:
            note("faster-whisper is not installed: its row is left out (pip install faster-whisper)")
        else:
            source = ct2_source(model)
            if source is None:
                note(f"{model} did not come from a CTranslate2 model: no faster-whisper row")
            else:
                peers["faster-whisper"] = FasterWhisperPeer(source, pair.device)
    return peers


def machine_info(device: torch.device) -> dict:
    import transformers

    info = {
        "platform": platform.platform(), "processor": platform.machine(), "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(), "device": str(device), "python": sys.version.split()[0],
        "torch": torch.__version__, "transformers": transformers.__version__,
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    try:
        import ctranslate2
        import faster_whisper

        info["faster_whisper"], info["ctranslate2"] = faster_whisper.__version__, ctranslate2.__version__
    except ImportError:
        pass
    return info


def run_bench(pair: WhisperPair, utterances: list[Utterance], options: BenchOptions = BenchOptions(), *,
              model: str = "base", int8_pair: WhisperPair | None = None, data: dict | None = None,
              progress: bool = True) -> dict:
    """Every configuration over every utterance, interleaved per block of utterances, `repeats`
    times; the report as a dict."""
    note = (lambda m: tqdm.write(f"bench: {m}", file=sys.stderr)) if progress else (lambda m: None)
    long = [u.id for u in utterances if u.seconds > CHUNK_SECONDS]
    if long:
        raise ValueError(f"{len(long)} utterances are longer than {CHUNK_SECONDS} s (first: {long[0]}); "
                         "the harness times single windows — use whisper-spec batch for long files")
    if options.int8 and int8_pair is None:
        raise ValueError("int8 configurations need int8_pair")
    with tempfile.TemporaryDirectory() as workdir:
        peers = _load_peers(pair, model, options.peers, Path(workdir), note)
        configs = plan_configs(pair, options, peers)
        runs = {c.name: Run() for c in configs}
        languages = _languages_of(pair, utterances)  # given, or the main model's detection; peers get them too

        def execute(config: Config, rows: range):
            subset = [utterances[i] for i in rows]
            if config.engine == "whisper-spec":
                return _run_ours(int8_pair if config.int8 else pair, subset, config, options)
            tokens, texts = peers[config.engine].run(subset, config, options, [languages[i] for i in rows])
            return tokens, texts, None, []

        # every configuration runs on one block of utterances before the next block, so slow
        # drifts of the machine's speed hit all configurations alike
        block = math.lcm(*(c.batch_size for c in configs))
        blocks = [range(i, min(i + block, len(utterances))) for i in range(0, len(utterances), block)]
        bar = tqdm(total=len(configs) * (options.repeats * len(blocks) + 1), desc="bench", unit="run",
                   disable=not progress)
        for config in configs:  # warm-up: one batch each
            execute(config, range(min(config.batch_size, len(utterances))))
            bar.update()
        for _ in range(options.repeats):
            parts = {c.name: Run(stats=DecodingStats() if c.engine == "whisper-spec" else None) for c in configs}
            seconds = {c.name: [0.0, 0.0, 0.0] for c in configs}  # total, encoder, decoding
            for rows in blocks:
                for config in configs:
                    sync(pair.device)
                    with PeakMemory(pair.device) as memory:
                        start = time.perf_counter()
                        tokens, texts, stats, per_utterance = execute(config, rows)
                        sync(pair.device)
                        elapsed = time.perf_counter() - start
                    bar.update()
                    part = parts[config.name]
                    part.tokens += tokens
                    part.texts += texts
                    part.per_utterance += per_utterance
                    seconds[config.name][0] += elapsed
                    if stats is not None:
                        part.stats.add(stats)
                        seconds[config.name][1] += stats.encoder_seconds
                        seconds[config.name][2] += stats.decoding_seconds
                    part.peak_memory_bytes = max(part.peak_memory_bytes or 0, memory.peak)
            for config in configs:
                run, part = runs[config.name], parts[config.name]
                run.tokens, run.texts, run.stats, run.per_utterance = part.tokens, part.texts, part.stats, part.per_utterance
                total, encoder, decoding = seconds[config.name]
                run.total_seconds.append(total)
                if part.stats is not None:
                    run.encoder_seconds.append(encoder)
                    run.decoding_seconds.append(decoding)
                run.peak_memory_bytes = max(run.peak_memory_bytes or 0, part.peak_memory_bytes)
        bar.close()
    report = build_report(pair, utterances, configs, runs, options, model, data or {}, languages)
    report["int8_kernel"] = int8_pair.int8_kernel if int8_pair is not None else None
    return report


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _languages_of(pair: WhisperPair, utterances: list[Utterance]) -> list[str]:
    """Given languages, else the main model's detection (per utterance, in batches of 8)."""
    from .decoding import detect_languages

    out = [u.language for u in utterances]
    missing = [i for i, language in enumerate(out) if language is None]
    if pair.main.special.multilingual:
        for rows in _batches(len(missing), 8):
            idx = [missing[i] for i in rows]
            for i, language in zip(idx, detect_languages(pair, _mel(pair, [utterances[i] for i in idx]))):
                out[i] = language
    return [language or "en" for language in out]


def build_report(pair, utterances, configs, runs, options, model, data, languages) -> dict:
    references = [u.text for u in utterances]
    results = []
    for config in configs:
        run = runs[config.name]
        baseline = runs.get(config.baseline)
        float_main = runs.get(f"main b{config.batch_size}")
        total = statistics.median(run.total_seconds)
        wer = word_error_rate(references, run.texts, languages)
        differing = [] if baseline is None else [
            u.id for u, a, b in zip(utterances, run.tokens, baseline.tokens) if a != b
        ]
        stats = run.stats
        entry = {
            "name": config.name, "engine": config.engine, "batch_size": config.batch_size,
            "speculative": config.speculative, "int8": config.int8,
            "wer": wer,
            "identical_to": config.baseline if baseline is not None else None,
            "identical_fraction": None if baseline is None else 1 - len(differing) / len(utterances),
            "differing_utterances": differing,
            "total_seconds": total,
            "total_seconds_all": run.total_seconds,
            "encoder_seconds": statistics.median(run.encoder_seconds) if stats else None,
            "decoding_seconds": statistics.median(run.decoding_seconds) if stats else None,
            "speedup": statistics.median(float_main.total_seconds) / total if float_main else None,
            "decoding_speedup": None,
            "acceptance": stats.acceptance if stats else None,
            "tokens_per_main_forward": stats.tokens_per_main_forward if stats else None,
            "generated_tokens": stats.generated if stats else sum(len(t) + 1 for t in run.tokens),
            "tokens_per_second": None,
            "acceptance_by_language": _acceptance_by_language(run.per_utterance, languages),
            "drafted_by_position": stats.drafted_by_position if stats else [],
            "accepted_by_position": stats.accepted_by_position if stats else [],
            "peak_memory_bytes": run.peak_memory_bytes,
            "peak_memory_kind": "cuda_max_allocated" if pair.device.type == "cuda" else "process_rss",
        }
        seconds = entry["decoding_seconds"] or total
        entry["tokens_per_second"] = entry["generated_tokens"] / seconds if seconds else None
        if stats and float_main is not None and float_main.decoding_seconds:
            entry["decoding_speedup"] = statistics.median(float_main.decoding_seconds) / entry["decoding_seconds"]
        results.append(entry)
    failures = check_exactness(results)
    return {
        "report_version": REPORT_VERSION,
        "machine": machine_info(pair.device),
        "model": model,
        "assistant": pair.assistant.name if pair.assistant is not None else None,
        "assistant_precision": decoder_precision(pair.assistant) if pair.assistant is not None else None,
        "dtype": str(pair.dtype).removeprefix("torch."),
        "int8_kernel": None,
        "options": asdict(options),
        "data": {"source": None, **data, "utterances": len(utterances), "audio_seconds": sum(u.seconds for u in utterances),
                 "languages": sorted({language for language in languages})},
        "configs": results,
        "check": {"passed": not failures, "failures": failures},
    }


def _acceptance_by_language(per_utterance: list[DecodingStats], languages: list[str]) -> dict[str, float]:
    counts: dict[str, list[int]] = {}
    for row, language in zip(per_utterance, languages):
        drafted_accepted = counts.setdefault(language, [0, 0])
        drafted_accepted[0] += row.drafted
        drafted_accepted[1] += row.accepted
    return {language: accepted / drafted for language, (drafted, accepted) in sorted(counts.items()) if drafted}


def check_exactness(results: list[dict]) -> list[str]:
    """Greedy speculative runs must equal their main-only run: every utterance's tokens, and WER."""
    by_name = {r["name"]: r for r in results}
    failures = []
    for r in results:
        if r["engine"] != "whisper-spec" or not r["speculative"]:
            continue
        main = by_name.get(r["identical_to"])
        if main is None:
            continue
        if r["differing_utterances"]:
            failures.append(f"{r['name']}: tokens differ from {main['name']} in {len(r['differing_utterances'])} "
                            f"utterances: {', '.join(r['differing_utterances'][:10])}")
        if r["wer"] != main["wer"]:
            failures.append(f"{r['name']}: WER {r['wer']} differs from {main['name']} WER {main['wer']}")
    return failures


# ---------------------------------------------------------------------------- outputs


def markdown_table(report: dict) -> str:
    """A table shaped like the Hugging Face blog's: time, WER and speedup per configuration."""
    lines = [
        f"{report['model']} + {report['assistant'] or 'no assistant'}, {report['data']['utterances']} utterances "
        f"({report['data']['audio_seconds']:.0f} s), {report['machine']['device']}, {report['dtype']}",
        "",
        "| configuration | time (s) | WER (%) | speedup | acceptance | tokens / main forward | identical |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]

    def fmt(value, pattern):
        return "—" if value is None else pattern.format(value)

    for r in report["configs"]:
        lines.append(
            f"| {r['name']} | {r['total_seconds']:.1f} | {fmt(r['wer'] and 100 * r['wer'], '{:.2f}')} | "
            f"{fmt(r['speedup'], '{:.2f}x')} | {fmt(r['acceptance'], '{:.3f}')} | "
            f"{fmt(r['tokens_per_main_forward'], '{:.2f}')} | {fmt(r['identical_fraction'], '{:.0%}')} |"
        )
    lines.append("")
    lines.append("check: " + ("passed (speculative output identical to main-only output)" if report["check"]["passed"]
                              else "FAILED: " + "; ".join(report["check"]["failures"])))
    return "\n".join(lines) + "\n"


def plot_report(report: dict, output_dir: Path) -> list[Path]:
    """time_by_config.png (seconds per configuration, grouped by batch size) and
    acceptance_by_position.png (acceptance of the i-th drafted token)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    output_dir.mkdir(parents=True, exist_ok=True)
    configs = report["configs"]
    fig, ax = plt.subplots(figsize=(max(6, len(configs) * 0.8), 4))
    colors = {"whisper-spec": "tab:blue", "transformers": "tab:orange", "faster-whisper": "tab:green"}
    bars = ax.bar(range(len(configs)), [c["total_seconds"] for c in configs],
                  color=[colors[c["engine"]] if not c["speculative"] else "tab:purple" for c in configs])
    for bar, c in zip(bars, configs):
        if c["speedup"]:
            ax.annotate(f"{c['speedup']:.2f}x", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(configs)), [c["name"] for c in configs], rotation=30, ha="right")
    ax.set_ylabel("seconds (features + encoder + decoder)")
    ax.set_title(f"{report['model']}: time by configuration ({report['data']['utterances']} utterances)")
    fig.tight_layout()
    time_plot = output_dir / "time_by_config.png"
    fig.savefig(time_plot, dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    for c in configs:
        drafted, accepted = c["drafted_by_position"], c["accepted_by_position"]
        if any(drafted):
            rates = [a / d if d else float("nan") for a, d in zip(accepted, drafted)]
            ax.plot(range(1, len(rates) + 1), rates, marker="o", label=c["name"])
    ax.set_xlabel("draft position")
    ax.set_ylabel("accepted / drafted")
    ax.set_ylim(0, 1.02)
    ax.set_title("acceptance by draft position")
    if ax.lines:
        ax.legend(fontsize=8)
    fig.tight_layout()
    acceptance_plot = output_dir / "acceptance_by_position.png"
    fig.savefig(acceptance_plot, dpi=120)
    plt.close(fig)
    return [time_plot, acceptance_plot]


def write_outputs(report: dict, output_dir: Path) -> list[Path]:
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (output_dir / "report.md").write_text(markdown_table(report))
    return [output_dir / "report.json", output_dir / "report.md", *plot_report(report, output_dir)]

