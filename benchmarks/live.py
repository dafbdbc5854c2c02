"""Live transcription of real recordings played at real time: what drafting from the last hypothesis
saves, how soon words are confirmed, and what the live transcript loses against the offline one.

Each recording is fed to a LiveStream a second at a time and updated after each second (whisper_streaming's
computation-unaware schedule), in three modes on the same buffers: drafts from the last hypothesis (the
default), the assistant alone, and the main model alone. The modes' tokens must be equal update for
update (checked). Per mode: per update the encoder and decoding milliseconds (medians), the main model's
forward passes and the tokens it kept per pass. Confirmed-word latency: on a real-time clock (an update
starts when its second of audio has arrived and the last update is done, and takes what it took), from a
word's end in the audio (the offline transcript's word timestamps, words matched by alignment) to the
end of the update that confirmed it. WER of the final live transcript against the offline one and the
reference. CPU and threads: machine_info.

    python benchmarks/live.py --set longform --output benchmarks/results/live_longform_epyc_cpu.json
    python benchmarks/live.py --dry --output /tmp/live.json   # one recording, its first 20 s
"""

from __future__ import annotations

import argparse
import difflib
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from _common import long_recordings, parse_args, progress, write_report

from whisper_spec.audio import SAMPLE_RATE, load_audio
from whisper_spec.bench.metrics import machine_info, normalize, word_error_rate
from whisper_spec.live import LiveStream, finish, update
from whisper_spec.load import load_pair
from whisper_spec.options import DecodingOptions
from whisper_spec.pipeline import transcribe

STEP_SECONDS = 1.0
MODES = {"hypothesis drafts": ("auto", True), "assistant only": ("on", False), "main-only": ("off", False)}


def play(pair, audio: np.ndarray, language: str | None, speculation: str, hypothesis_drafts: bool) -> dict:
    """The recording through one stream, an update a second: each update's tokens, costs and the words
    it confirmed with the clock time it was done at."""
    stream, options = LiveStream(language=language), DecodingOptions(speculation=speculation)
    step, clock, updates, confirmed = int(STEP_SECONDS * SAMPLE_RATE), 0.0, [], []
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
    return {"updates": updates, "confirmed": confirmed, "text": pair.main.tokenizer.decode(stream.confirmed)}


def latencies(pair, confirmed: list[tuple[list[int], float]], offline_words: list[tuple[str, float]],
              language: str | None) -> list[float]:
    """Per live word matched to an offline word: when it was confirmed less when it ends in the audio."""
    live = [(word, at) for tokens, at in confirmed for word in _words(pair.main.tokenizer.decode(tokens), language)]
    offline = [(word, end) for text, end in offline_words for word in _words(text, language)[:1]]
    matcher = difflib.SequenceMatcher(None, [w for w, _ in live], [w for w, _ in offline], autojunk=False)
    return [live[block.a + i][1] - offline[block.b + i][1] for block in matcher.get_matching_blocks()
            for i in range(block.size)]


def _words(text: str, language: str | None) -> list[str]:
    return normalize(text, language).split()


def summary(runs: list[dict], files: list[dict], offline: list, pair) -> dict:
    """A mode's figures over the recordings."""
    updates = [u for run in runs for u in run["updates"] if u["tokens"]]
    waits = [d for run, f, (transcript, words) in zip(runs, files, offline)
             for d in latencies(pair, run["confirmed"], words, f["language"])]
    forwards, generated = sum(u["forwards"] for u in updates), sum(u["generated"] for u in updates)
    languages = [f["language"] for f in files]
    return {
        "updates": len(updates),
        "encoder_ms_median": round(1000 * statistics.median(u["encoder"] for u in updates), 1),
        "decoding_ms_median": round(1000 * statistics.median(u["decoding"] for u in updates), 1),
        "update_ms_median": round(1000 * statistics.median(u["seconds"] for u in updates), 1),
        "update_ms_p90": round(1000 * np.percentile([u["seconds"] for u in updates], 90), 1),
        "main_forwards_per_update": round(forwards / len(updates), 2),
        "tokens_per_main_forward": round(generated / forwards, 2),
        "confirmed_latency_s_median": round(statistics.median(waits), 2),
        "confirmed_latency_s_p90": round(float(np.percentile(waits, 90)), 2),
        "words_timed": len(waits),
        "wer_vs_offline": round(100 * word_error_rate([t.text for t, _ in offline], [r["text"] for r in runs], languages), 2),
        "wer_live": _wer([f.get("text") for f in files], [r["text"] for r in runs], languages),
        "wer_offline": _wer([f.get("text") for f in files], [t.text for t, _ in offline], languages),
    }


def _wer(references, hypotheses, languages) -> float | None:
    rate = word_error_rate(references, hypotheses, languages)
    return None if rate is None else round(100 * rate, 2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", dest="recordings", choices=("longform", "fleurs"), default="longform")
    parser.add_argument("--limit", type=int, default=None, help="the first N recordings only")
    parser.add_argument("--seconds", type=float, default=None, help="each recording's first seconds only")
    parser.add_argument("--output", type=Path)
    args = parse_args(parser, limit=1, seconds=20.0)
    pair = load_pair("base")
    with tempfile.TemporaryDirectory() as folder:
        files, paths = long_recordings(args.recordings, Path(folder))
        files, paths = files[: args.limit], paths[: args.limit]
        audio = [load_audio(str(p)) for p in paths]
        if args.seconds:
            audio = [a[: int(args.seconds * SAMPLE_RATE)] for a in audio]
            files = [replace_text(f) for f in files]
        offline = []
        for f, samples in zip(files, audio):
            path = Path(folder) / "offline.wav"
            import soundfile
            soundfile.write(path, samples, SAMPLE_RATE)
            transcript = next(transcribe(pair, [path], DecodingOptions(language=f["language"], word_timestamps=True)))
            offline.append((transcript, [(w.word, w.end) for s in transcript.segments for w in s.words]))
    runs = {mode: [] for mode in MODES}
    for f, samples in zip(files, audio):
        for mode, (speculation, hinted) in MODES.items():
            runs[mode].append(play(pair, samples, f["language"], speculation, hinted))
            progress({"file": f["path"] if "path" in f else f["language"], "mode": mode, "text": runs[mode][-1]["text"][:80]})
        tokens = [[u["tokens"] for u in runs[mode][-1]["updates"]] for mode in MODES]
        assert all(t == tokens[0] for t in tokens), f"the modes' tokens differ on {f}"
    report = {"machine": machine_info(pair.device), "set": args.recordings, "recordings": len(files),
              "audio_seconds": round(sum(len(a) for a in audio) / SAMPLE_RATE, 1), "step_seconds": STEP_SECONDS,
              "modes_equal_update_for_update": True,
              "modes": {mode: summary(runs[mode], files, offline, pair) for mode in MODES}}
    main_only, hinted = report["modes"]["main-only"], report["modes"]["hypothesis drafts"]
    report["hypothesis_drafts_vs_main_only"] = {
        "main_forwards_cut": round(main_only["main_forwards_per_update"] / hinted["main_forwards_per_update"], 2),
        "decoding_time_cut": round(main_only["decoding_ms_median"] / hinted["decoding_ms_median"], 2)}
    return write_report(report, args.output)


def replace_text(row: dict) -> dict:
    """A recording cut short has no reference for its cut."""
    return {**row, "text": None}


if __name__ == "__main__":
    raise SystemExit(main())
