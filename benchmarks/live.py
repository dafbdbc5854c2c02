"""Live transcription of real recordings played at real time: what drafting from the last hypothesis
saves, how soon words are confirmed, and what the live transcript loses against the offline one.

Each recording is fed to a LiveStream a step at a time (--step, a second by default) and updated after
each step (whisper_streaming's computation-unaware schedule), in four modes on the same buffers: drafts
from the last hypothesis (the default, speculation "auto": the hypothesis alone, decoding._assistant),
the hypothesis with the assistant drafting past its end in the same pass (speculation "on"), the
assistant alone, and the main model alone. The modes' tokens must be equal update for update (checked).
Per mode: per update the encoder and decoding milliseconds (medians), the main model's forward passes
and the tokens it kept per pass. Confirmed-word latency: on a real-time clock (an update
starts when its step of audio has arrived and the last update is done, and takes what it took), from a
word's end in the audio (the offline transcript's word timestamps, words matched by alignment) to the
end of the update that confirmed it. WER of the final live transcript against the offline one and the
reference. CPU and threads: machine_info.

The peer: whisperlivekit's LocalAgreement processor (ufal's whisper_streaming, kept up in that package) on
faster-whisper with the same CTranslate2 base weights, int8, greedy (its backend asks beam 5: replaced
by 1), the same thread count, in a process of its own, on the same one-second schedule; its words are
timed and matched the same way. Where whisperlivekit is not installed (pip install whisperlivekit
tiktoken; it pulls torchaudio, which --no-deps skips), the report says so.

    python benchmarks/live.py --set longform --output benchmarks/results/live_longform_epyc_cpu.json
    python benchmarks/live.py --dry --output /tmp/live.json   # one recording, its first 12 s
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import multiprocessing
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile
import torch
from _common import long_recordings, parse_args, progress, write_report

from whisper_spec.bench.metrics import machine_info, normalize, word_error_rate
from whisper_spec.longform.pipeline import transcribe
from whisper_spec.models.load import load_pair
from whisper_spec.models.pair import WhisperPair
from whisper_spec.models.sources import ct2_source
from whisper_spec.options import DecodingOptions
from whisper_spec.serve.live import LiveStream, finish, update
from whisper_spec.speech.audio import SAMPLE_RATE, load_audio

STEP_SECONDS = 1.0
# name: (speculation, drafts from the last hypothesis, the assistant takes part)
MODES = {"hypothesis drafts": ("auto", True, True), "hypothesis drafts + assistant": ("on", True, True),
         "assistant only": ("on", False, True), "main-only": ("off", False, False)}


def play(pair, audio: np.ndarray, language: str | None, speculation: str, hypothesis_drafts: bool,
         step_seconds: float = STEP_SECONDS) -> dict:
    """The recording through one stream, an update a step: each update's tokens, costs and the words
    it confirmed with the clock time it was done at."""
    stream, options = LiveStream(language=language), DecodingOptions(speculation=speculation)
    step, clock, updates, confirmed = int(step_seconds * SAMPLE_RATE), 0.0, [], []
    for at in range(0, len(audio), step):
        stream.feed(audio[at : at + step])
        started = time.perf_counter()
        result = update(pair, [stream], options, hypothesis_drafts)[0]
        took = time.perf_counter() - started
        clock = max(clock, min(at + step, len(audio)) / SAMPLE_RATE) + took
        stats = result.stats
        updates.append({"tokens": result.tokens, "seconds": took, "encoder": stats.encoder_seconds,
                        "decoding": stats.decoding_seconds, "forwards": stats.main_forwards,
                        "generated": stats.generated})
        confirmed.append((result.confirmed, clock))
    confirmed.append((finish(pair, stream), clock))
    decode = pair.main.tokenizer.decode
    return {"updates": updates, "confirmed": [(decode(tokens), at) for tokens, at in confirmed],
            "text": decode(stream.confirmed)}


def peer_play(connection, ct2_dir: str, threads: int, recordings: list[tuple[np.ndarray, str | None]],
              step_seconds: float) -> None:
    """In a process of its own: whisperlivekit's LocalAgreement on faster-whisper, each recording a step
    at a time; sends back per recording the updates' seconds and the words each committed, and the text."""
    import logging

    from faster_whisper import WhisperModel
    from whisperlivekit.local_agreement.backends import FasterWhisperASR

    logging.getLogger("faster_whisper").setLevel(logging.WARNING)  # a line an update otherwise
    from whisperlivekit.local_agreement.online_asr import OnlineASRProcessor

    class GreedyFasterWhisper(FasterWhisperASR):
        def load_model(self, model_size=None, cache_dir=None, model_dir=None):
            return WhisperModel(model_dir, device="cpu", compute_type="int8", cpu_threads=threads)

        def transcribe(self, audio, init_prompt=""):
            segments, _ = self.model.transcribe(audio, language=self.original_language, initial_prompt=init_prompt,
                                                beam_size=1, word_timestamps=True, condition_on_previous_text=True)
            return list(segments)

    results = []
    for audio, language in recordings:
        asr = GreedyFasterWhisper(language or "auto", model_dir=ct2_dir)
        asr.tokenizer, asr.confidence_validation, asr.buffer_trimming, asr.buffer_trimming_sec = None, False, "segment", 15
        processor, updates, committed = OnlineASRProcessor(asr), [], []
        step = int(step_seconds * SAMPLE_RATE)
        for at in range(0, len(audio), step):
            processor.insert_audio_chunk(audio[at : at + step])
            started = time.perf_counter()
            tokens, _ = processor.process_iter()
            updates.append(time.perf_counter() - started)
            committed.append("".join(t.text for t in tokens))
        rest = processor.finish()[0]
        committed.append("".join(t.text for t in rest))
        results.append({"seconds": updates, "committed": committed, "text": "".join(committed)})
    connection.send(results)


def peer(ct2_dir: Path, audio: list[np.ndarray], files: list[dict], step_seconds: float) -> list[dict] | str:
    """The peer's runs of the recordings, or why it cannot run here."""
    if importlib.util.find_spec("whisperlivekit") is None:
        return "whisperlivekit is not installed (pip install whisperlivekit tiktoken)"
    context = multiprocessing.get_context("spawn")
    receiving, sending = context.Pipe(duplex=False)
    process = context.Process(target=peer_play, args=(sending, str(ct2_dir), torch.get_num_threads(),
                                                      [(a, f["language"]) for a, f in zip(audio, files)], step_seconds))
    process.start()
    sending.close()
    try:
        return receiving.recv()
    except EOFError:
        return f"the peer's process ended (exit code {process.join() or process.exitcode})"


def latencies(confirmed: list[tuple[str, float]], offline_words: list[tuple[str, float]],
              language: str | None) -> list[float]:
    """Per live word matched to an offline word: when it was confirmed less when it ends in the audio."""
    live = [(word, at) for text, at in confirmed for word in _words(text, language)]
    offline = [(word, end) for text, end in offline_words for word in _words(text, language)[:1]]
    matcher = difflib.SequenceMatcher(None, [w for w, _ in live], [w for w, _ in offline], autojunk=False)
    return [live[block.a + i][1] - offline[block.b + i][1] for block in matcher.get_matching_blocks()
            for i in range(block.size)]


def _words(text: str, language: str | None) -> list[str]:
    return normalize(text, language).split()


def summary(runs: list[dict], files: list[dict], offline: list) -> dict:
    """A mode's figures over the recordings."""
    updates = [u for run in runs for u in run["updates"] if u["tokens"]]
    forwards, generated = sum(u["forwards"] for u in updates), sum(u["generated"] for u in updates)
    return {
        "updates": len(updates),
        "encoder_ms_median": round(1000 * statistics.median(u["encoder"] for u in updates), 1),
        "decoding_ms_median": round(1000 * statistics.median(u["decoding"] for u in updates), 1),
        "update_ms_median": round(1000 * statistics.median(u["seconds"] for u in updates), 1),
        "update_ms_p90": round(1000 * np.percentile([u["seconds"] for u in updates], 90), 1),
        "main_forwards_per_update": round(forwards / len(updates), 2),
        "tokens_per_main_forward": round(generated / forwards, 2),
        **outcome(runs, files, offline),
    }


def outcome(runs: list[dict], files: list[dict], offline: list) -> dict:
    """Confirmed-word latency and WER of a live system's runs (each: confirmed (text, clock) pairs and text)."""
    waits = [d for run, f, (_, words) in zip(runs, files, offline) for d in latencies(run["confirmed"], words, f["language"])]
    languages = [f["language"] for f in files]
    return {
        "confirmed_latency_s_median": round(statistics.median(waits), 2),
        "confirmed_latency_s_p90": round(float(np.percentile(waits, 90)), 2),
        "words_timed": len(waits),
        "wer_vs_offline": round(100 * word_error_rate([t.text for t, _ in offline], [r["text"] for r in runs], languages), 2),
        "wer_live": _wer([f.get("text") for f in files], [r["text"] for r in runs], languages),
        "wer_offline": _wer([f.get("text") for f in files], [t.text for t, _ in offline], languages),
    }


def peer_summary(runs: list[dict], audio: list[np.ndarray], files: list[dict], offline: list, step_seconds: float
                 ) -> dict:
    """The peer's figures: its update times, and latency on the same real-time clock."""
    timed = []
    for run, samples in zip(runs, audio):
        clock, confirmed = 0.0, []
        for index, (took, text) in enumerate(zip(run["seconds"], run["committed"])):
            clock = max(clock, min((index + 1) * step_seconds, len(samples) / SAMPLE_RATE)) + took
            confirmed.append((text, clock))
        confirmed.append((run["committed"][-1], clock))
        timed.append({"confirmed": confirmed, "text": run["text"]})
    seconds = [s for run in runs for s in run["seconds"]]
    return {"name": "whisperlivekit LocalAgreement, faster-whisper int8, greedy", "updates": len(seconds),
            "update_ms_median": round(1000 * statistics.median(seconds), 1),
            "update_ms_p90": round(1000 * float(np.percentile(seconds, 90)), 1), **outcome(timed, files, offline)}


def _wer(references, hypotheses, languages) -> float | None:
    rate = word_error_rate(references, hypotheses, languages)
    return None if rate is None else round(100 * rate, 2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", dest="recordings", choices=("longform", "fleurs"), default="longform")
    parser.add_argument("--limit", type=int, default=None, help="the first N recordings only")
    parser.add_argument("--seconds", type=float, default=None, help="each recording's first seconds only (no WER)")
    parser.add_argument("--peer", action=argparse.BooleanOptionalAction, default=True, help="the streaming peer too")
    parser.add_argument("--step", type=float, default=STEP_SECONDS, help="seconds of audio an update (default 1)")
    parser.add_argument("--output", type=Path)
    args = parse_args(parser, limit=1, seconds=12.0, peer=False)
    pair = load_pair("base")
    with tempfile.TemporaryDirectory() as folder:
        files, paths = long_recordings(args.recordings, Path(folder))
        files, paths = files[: args.limit], paths[: args.limit]
        audio = [load_audio(str(p))[: int(args.seconds * SAMPLE_RATE) if args.seconds else None] for p in paths]
        if args.seconds:  # a recording cut short has no reference for its cut
            files = [{**f, "text": None} for f in files]
        offline = []
        for f, samples in zip(files, audio):
            soundfile.write(Path(folder) / "offline.wav", samples, SAMPLE_RATE)
            transcript = next(transcribe(pair, [Path(folder) / "offline.wav"],
                                         DecodingOptions(language=f["language"], word_timestamps=True)))
            offline.append((transcript, [(w.word, w.end) for s in transcript.segments for w in s.words]))
    runs = {mode: [] for mode in MODES}
    alone = WhisperPair(pair.main, None, pair.device, pair.dtype)  # the same main model, no assistant
    for f, path, samples in zip(files, paths, audio):
        for mode, (speculation, hinted, assisted) in MODES.items():
            decoding = pair if assisted else alone
            runs[mode].append(play(decoding, samples, f["language"], speculation, hinted, args.step))
            progress({"recording": path.name, "mode": mode, "text": runs[mode][-1]["text"][:80]})
        tokens = [[u["tokens"] for u in runs[mode][-1]["updates"]] for mode in MODES]
        assert all(t == tokens[0] for t in tokens), f"the modes' tokens differ on {path.name}"
    report = {"machine": machine_info(pair.device), "set": args.recordings, "recordings": [p.name for p in paths],
              "audio_seconds": round(sum(len(a) for a in audio) / SAMPLE_RATE, 1), "step_seconds": args.step,
              "modes_equal_update_for_update": True,
              "modes": {mode: summary(runs[mode], files, offline) for mode in MODES}}
    main_only = report["modes"]["main-only"]
    for mode in ("hypothesis drafts", "hypothesis drafts + assistant"):
        hinted = report["modes"][mode]
        report[f"{mode} vs main-only"] = {
            "main_forwards_cut": round(main_only["main_forwards_per_update"] / hinted["main_forwards_per_update"], 2),
            "decoding_time_cut": round(main_only["decoding_ms_median"] / hinted["decoding_ms_median"], 2)}
    if args.peer:
        peer_runs = peer(ct2_source("base"), audio, files, args.step)
        report["peer"] = (peer_runs if isinstance(peer_runs, str)
                          else peer_summary(peer_runs, audio, files, offline, args.step))
    return write_report(report, args.output)


if __name__ == "__main__":
    raise SystemExit(main())
