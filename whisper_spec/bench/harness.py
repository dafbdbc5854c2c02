"""Every configuration over every utterance, interleaved per block of utterances, timed."""

from __future__ import annotations

import math
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

from ..decode.decoding import decode_windows
from ..decode.encoding import detect_languages, pair_features
from ..decode.fixed_shapes import CompileError
from ..decode.stats import DecodingStats
from ..models.pair import WhisperPair
from ..models.platform import synchronize
from ..options import CHUNK_SECONDS, BenchOptions, DecodingOptions
from .data import Utterance, batches
from .metrics import PeakMemory
from .peers import load_peers
from .report import build_report


@dataclass(frozen=True)
class Config:
    name: str
    engine: str  # whisper-spec, transformers, faster-whisper, whisper.cpp
    batch_size: int
    speculative: bool = False
    int8: bool = False
    compiled: bool = False  # DecodingOptions.compile
    main_compiled: bool = False  # compiling also compiles the main model's steps (Platform.compiles "rounds")

    @property
    def baseline(self) -> str:
        """The main-only configuration this one must reproduce token for token: a compiled one
        where compiling changes the main model's steps."""
        return f"main{' compiled' if self.main_compiled else ''}{' int8' if self.int8 else ''} b{self.batch_size}"


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
    warm_up_seconds: float = 0.0  # untimed: graph captures, compiles (DecodingOptions.compile), first-use costs


def _run_ours(pair: WhisperPair, utterances: list[Utterance], config: Config, options: BenchOptions):
    # greedy alone, as the peers decode (_GREEDY in faster_whisper_process and whisper_cpp_process): the speed path, like for like
    decoding = DecodingOptions(task=options.task, temperature=0.0, draft_tokens=options.draft_tokens,
                               draft_confidence=options.draft_confidence,
                               speculation=options.speculation if config.speculative else "off",
                               cuda_graphs=options.cuda_graphs, compile=config.compiled, prompt=options.prompt)
    tokens, texts, stats, per_utterance = [], [], DecodingStats(), []
    for rows in batches(len(utterances), config.batch_size):
        batch = [utterances[i] for i in rows]
        mel, assistant_mel = pair_features(pair, [u.audio for u in batch])
        results, batch_stats = decode_windows(pair, mel, decoding, assistant_mel=assistant_mel,
                                              languages=[u.language for u in batch])
        stats.add(batch_stats)
        tokens += [r.tokens for r in results]
        texts += [pair.main.tokenizer.decode(r.tokens) for r in results]
        per_utterance += [r.stats for r in results]
    return tokens, texts, stats, per_utterance


def plan_configs(pair: WhisperPair, options: BenchOptions, peers: dict) -> list[Config]:
    configs = []
    # compiled rounds compile the main model's verification too, so compiled main-only is their baseline
    main_compiled = options.compile and pair.platform.compiles == "rounds"
    drafts = pair.assistant is not None and pair.assistant.drafts_for(options.task)
    for b in options.batch_sizes:
        for int8 in (False, True) if options.int8 else (False,):
            precision = " int8" if int8 else ""
            configs.append(Config(f"main{precision} b{b}", "whisper-spec", b, int8=int8))
            if main_compiled:
                configs.append(Config(f"main compiled{precision} b{b}", "whisper-spec", b, int8=int8, compiled=True,
                                      main_compiled=True))
            if drafts:
                configs.append(Config(f"speculative{precision} b{b}", "whisper-spec", b, speculative=True, int8=int8))
                if options.compile:
                    configs.append(Config(f"speculative compiled{precision} b{b}", "whisper-spec", b, speculative=True,
                                          int8=int8, compiled=True, main_compiled=main_compiled))
    if "transformers" in peers:
        for b in options.batch_sizes:
            configs.append(Config(f"transformers b{b}", "transformers", b))
        if peers["transformers"].assistant is not None:  # assisted generation takes one sequence at a time
            configs.append(Config("transformers assisted b1", "transformers", 1, speculative=True))
    if "faster-whisper" in peers:
        configs.append(Config("faster-whisper b1", "faster-whisper", 1))
        for b in options.batch_sizes:
            configs.append(Config(f"faster-whisper int8 b{b}", "faster-whisper", b, int8=True))
    if "whisper.cpp" in peers:  # one clip a call (whisper_cpp_process)
        configs.append(Config("whisper.cpp b1", "whisper.cpp", 1))
    return configs


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
        peers, left_out = load_peers(pair, model, options.peers, Path(workdir), note)
        if pair.assistant is not None and not pair.assistant.drafts_for(options.task):
            left_out["speculative"] = (f"the assistant drafts for {' and '.join(pair.assistant.draft_tasks)} only: "
                                       f"--task {options.task} decodes with the main model alone")
            note(f"speculative is left out: {left_out['speculative']}")
        try:
            runs, configs, languages = _run_configs(pair, int8_pair, utterances, options, peers, left_out, note,
                                                    progress)
        finally:
            for peer in peers.values():
                peer.close()
    report = build_report(pair, utterances, configs, runs, options, model, data or {}, languages)
    report["left_out"] = left_out
    report["int8_kernel"] = int8_pair.int8_kernel if int8_pair is not None else None
    report["int8_dtype"] = str(int8_pair.dtype).removeprefix("torch.") if int8_pair is not None else None
    report["auto_max_draft_frames_int8"] = int8_pair.platform.auto_max_draft_frames if int8_pair is not None else None
    return report


def _run_configs(pair: WhisperPair, int8_pair: WhisperPair | None, utterances: list[Utterance],
                 options: BenchOptions, peers: dict, left_out: dict, note, progress: bool
                 ) -> tuple[dict[str, Run], list[Config], list[str]]:
    """The warm-up and the timed repeats of every configuration: the runs, the configurations and
    the utterances' languages. A peer whose warm-up fails is left out (its reason added to left_out),
    and so is a compiled configuration of ours that torch.compile cannot compile."""
    configs = plan_configs(pair, options, peers)
    languages = _languages_of(pair, utterances)  # given, or the main model's detection; peers get them too
    audio = sum(u.seconds for u in utterances)
    note(f"{len(configs)} configurations ({', '.join(c.name for c in configs)}), each warmed up, then timed "
         f"{options.repeats} times over {len(utterances)} utterances ({audio:.0f} s of audio): "
         f"{len(configs) * (options.repeats + 1)} passes over the audio")
    bars = progress and sys.stderr.isatty()  # in a log, a line a pass instead of a bar's carriage returns

    def execute(config: Config, rows: range):
        subset = [utterances[i] for i in rows]
        if config.engine == "whisper-spec":
            return _run_ours(int8_pair if config.int8 else pair, subset, config, options)
        tokens, texts = peers[config.engine].run(subset, config.batch_size, speculative=config.speculative,
                                                 int8=config.int8, task=options.task,
                                                 languages=[languages[i] for i in rows], prompt=options.prompt)
        return tokens, texts, None, []

    blocks = batches(len(utterances), math.lcm(*(c.batch_size for c in configs)))
    warm_up_seconds = _warm_up(configs, blocks, len(utterances), execute, peers, left_out, note, bars, pair.device)
    configs = [c for c in configs if c.engine not in left_out and c.name not in left_out]
    runs = {c.name: Run(warm_up_seconds=warm_up_seconds[c.name]) for c in configs}
    if not bars:
        note(f"warmed up ({sum(warm_up_seconds.values()):.0f} s)")
    _timed_repeats(configs, blocks, execute, runs, options.repeats, pair.device, note, bars)
    for config in configs:
        # a peer in a process of its own: that process's peak, not this one's
        if config.engine in peers and peers[config.engine].peak_memory_bytes:
            runs[config.name].peak_memory_bytes = peers[config.engine].peak_memory_bytes
    return runs, configs, languages


def _warm_up(configs: list[Config], blocks: list[range], n_utterances: int, execute, peers: dict, left_out: dict,
             note, bars: bool, device: torch.device) -> dict[str, float]:
    """Each configuration run once on every batch shape the timed blocks have (a full one and the last
    block's remainder: a new shape captures CUDA graphs or compiles, which no timed run should pay);
    its seconds by name. A peer, or a compiled configuration of ours, that fails is left out (left_out)."""
    bar = tqdm(total=len(configs), desc="warm-up", unit="run", disable=not bars)
    warm_up_seconds = {}
    for config in configs:
        bar.update()
        if config.baseline in left_out:  # planned after its baseline; it could not be checked
            left_out[config.name] = f"its baseline, {config.baseline}, is left out"
            continue
        shapes = [range(min(config.batch_size, n_utterances))]
        shapes += [blocks[-1]] if len(blocks[-1]) % config.batch_size else []
        start = time.perf_counter()
        try:
            for rows in shapes:
                execute(config, rows)
        except RuntimeError as error:
            # a peer, or a compiled configuration of ours (the eager ones still run and are checked)
            if config.engine not in peers and not isinstance(error, CompileError):
                raise
            left = config.engine if config.engine in peers else config.name
            left_out[left] = str(error)
            note(f"{left} is left out: {error}")
        synchronize(device)
        warm_up_seconds[config.name] = time.perf_counter() - start
    bar.close()
    return warm_up_seconds


def _timed_repeats(configs: list[Config], blocks: list[range], execute, runs: dict[str, Run], repeats: int,
                   device: torch.device, note, bars: bool) -> None:
    """The timed passes over the audio, each configuration's results and seconds recorded in its run."""
    bar = tqdm(total=len(configs) * repeats * len(blocks), desc="bench", unit="run", disable=not bars)
    for repeat in range(repeats):
        parts, seconds = _time_repeat(configs, blocks, execute, device, bar)
        if not bars:
            note(f"timed pass {repeat + 1} of {repeats} ({sum(s[0] for s in seconds.values()):.0f} s)")
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


def _time_repeat(configs: list[Config], blocks: list[range], execute, device: torch.device, bar
                 ) -> tuple[dict[str, Run], dict[str, list[float]]]:
    """One timed pass: every configuration runs on one block of utterances before the next block,
    so slow drifts of the machine's speed hit all configurations alike, and in an order shuffled block
    by block (seeded by the block), so that what one configuration leaves behind (caches, allocator
    state) does not always fall on the same next one. Per configuration: what it
    produced, and its total, encoder and decoding seconds."""
    parts = {c.name: Run(stats=DecodingStats() if c.engine == "whisper-spec" else None) for c in configs}
    seconds = {c.name: [0.0, 0.0, 0.0] for c in configs}
    for i, rows in enumerate(blocks):
        for config in random.Random(i).sample(configs, len(configs)):
            synchronize(device)
            with PeakMemory(device) as memory:
                start = time.perf_counter()
                tokens, texts, stats, per_utterance = execute(config, rows)
                synchronize(device)
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
    return parts, seconds


def _languages_of(pair: WhisperPair, utterances: list[Utterance]) -> list[str]:
    """Given languages, else the main model's detection (per utterance, in batches of 8)."""
    out = [u.language for u in utterances]
    missing = [i for i, language in enumerate(out) if language is None]
    if pair.main.special.multilingual:
        for rows in batches(len(missing), 8):
            idx = [missing[i] for i in rows]
            for i, language in zip(idx, detect_languages(pair, pair_features(pair, [utterances[i].audio for i in idx])[0])[0]):
                out[i] = language
    return [language or "en" for language in out]
