"""What the benchmark scripts share: where the shared data lies, the long recordings, how reports are written."""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import soundfile
from whisper_spec.cli.common import pair_args
from whisper_spec.cli.parser import build_parser

from whisper_spec.models.load import load_pair
from whisper_spec.speech.audio import SAMPLE_RATE, load_audio

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
# WHISPER_SPEC_SPEECH: a copy of the speech folder elsewhere (a GPU machine that ../shared does not reach)
SPEECH = Path(os.environ.get("WHISPER_SPEC_SPEECH", SHARED / "speech"))


def manifest_rows() -> list[dict]:
    return [json.loads(line) for line in (SPEECH / "manifest.jsonl").read_text().splitlines() if line.strip()]


def command_line_pair(*flags: str):
    """The model pair the command line loads with these flags (`whisper-spec batch ... FLAGS`; its
    defaults otherwise): what a user gets."""
    return load_pair(**pair_args(build_parser().parse_args(["batch", "x", "-o", "y", *flags])))


def parse_args(parser, **dry):
    """The script's arguments; with --dry, dry's values replace theirs: a run on the fewest inputs that
    checks the script itself in a minute or so (the test suite runs each maintained script so)."""
    shown = " ".join(f"--{name.replace('_', '-')} {value}" for name, value in dry.items())
    parser.add_argument("--dry", action="store_true", help=f"check the script itself: as {shown}")
    args = parser.parse_args()
    if args.dry:
        vars(args).update(dry)
    return args


def median_ms(call, repeats: int) -> float:
    """Median ms of call() over repeats, after one unmeasured call."""
    call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def save_report(report: dict, output: Path | None) -> None:
    """Write the report as JSON to output when given."""
    if output:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(report, indent=2) + "\n")


def write_report(report: dict, output: Path | None) -> int:
    """Print the report as JSON and write it to output when given."""
    save_report(report, output)
    print(json.dumps(report, indent=2))
    return 0


def progress(entry: dict) -> None:
    print(json.dumps(entry), file=sys.stderr)


def long_recordings(name: str, folder: Path) -> tuple[list[dict], list[Path]]:
    """The long recordings of a benchmark, as manifest-like rows (language, text, duration_s) and
    paths. "longform": the shared long-form files (7 LibriSpeech test-other chapters, a TED excerpt,
    the 128 s mp3), in English. "joined": the 78 LibriSpeech clips joined into 4 recordings with
    pauses, quiet starts and ends (_joined_librispeech). "fleurs": each language's FLEURS clips (de,
    es, fr, pt, en) joined end to end, half a second of silence between them, written to folder, the
    clips' texts joined. "tts": the synthetic long recordings (`unlabeled_tts`, de, en, es, fr, pt, 4-7
    min each), with the texts they read: the main model's long-form WER only, never an assistant's
    acceptance (an assistant may be trained on them; speech/README.md). "voxpopuli": VoxPopuli's English
    test clip with its normalized transcript and the five 120 s cuts of French plenary audio (no
    transcripts)."""
    rows = manifest_rows()
    if name == "longform":
        files = [r | {"language": "en"} for r in rows if r["set"] in ("longform", "unlabeled_longform")]
        return files, [SPEECH / r["path"] for r in files]
    if name == "voxpopuli":
        files = [r for r in rows if r["set"] in ("voxpopuli_en", "voxpopuli_fr_unlabeled")]
        return files, [SPEECH / r["path"] for r in files]
    if name == "tts":
        files = [r | {"text": (SPEECH / r["text_file"]).read_text()} for r in rows if r["set"] == "unlabeled_tts"]
        return files, [SPEECH / r["path"] for r in files]
    if name == "joined":
        return _joined_librispeech([r for r in rows if r["set"] == "librispeech"], folder)
    files, paths = [], []
    for language in ("de", "es", "fr", "pt", "en"):
        clips = [r for r in rows if r["set"] == f"fleurs_{language}"]
        gap = np.zeros(SAMPLE_RATE // 2, dtype=np.float32)
        audio = np.concatenate([part for r in clips for part in (load_audio(str(SPEECH / r["path"])), gap)])
        path = folder / f"fleurs_{language}_joined.wav"
        soundfile.write(path, audio, SAMPLE_RATE)
        files.append({"language": language, "text": " ".join(r["text"] for r in clips),
                      "duration_s": len(audio) / SAMPLE_RATE})
        paths.append(path)
    return files, paths


def last_speech(path: Path) -> float:
    """Seconds to the end of the last 10 ms holding a sample above 0.02 (-34 dBFS)."""
    audio = load_audio(str(path))
    loud = np.flatnonzero(np.abs(audio) > 0.02)
    return float(-(-(loud[-1] + 1) // (SAMPLE_RATE // 100)) / 100) if len(loud) else 0.0


def _joined_librispeech(clips: list[dict], folder: Path, recordings: int = 4, seed: int = 0):
    """The LibriSpeech clips joined in order into a few recordings, as a user's long file: each starts
    with 0-5 s of room tone, its clips are separated by pauses of 0.2-2 s (one in five 4-12 s), and it
    ends with 0-15 s of room tone (steady noise at -60 dBFS). Rows carry utt_ids, so the benchmark
    compares them with the clips transcribed one by one."""
    rng = np.random.default_rng(seed)

    def room_tone(seconds: float) -> np.ndarray:
        noise = rng.standard_normal(int(seconds * SAMPLE_RATE)).astype(np.float32)
        return np.convolve(noise, np.ones(8, np.float32) / 8, mode="same") * 0.003

    files, paths = [], []
    for index, group in enumerate(np.array_split(np.arange(len(clips)), recordings)):
        parts = [room_tone(rng.uniform(0, 5))]
        for i in group:
            parts.append(load_audio(str(SPEECH / clips[i]["path"])))
            long_pause = rng.random() < 0.2
            parts.append(room_tone(rng.uniform(4, 12) if long_pause else rng.uniform(0.2, 2)))
        parts[-1] = room_tone(rng.uniform(0, 15))
        audio = np.concatenate(parts)
        path = folder / f"librispeech_joined_{index}.wav"
        soundfile.write(path, audio, SAMPLE_RATE)
        files.append({"language": "en", "text": " ".join(clips[i]["text"] for i in group),
                      "utt_ids": [clips[i]["utt_id"] for i in group], "duration_s": len(audio) / SAMPLE_RATE})
        paths.append(path)
    return files, paths
