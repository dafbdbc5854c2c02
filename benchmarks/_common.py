"""What the benchmark scripts share: where the shared data lies, the long recordings, how reports are written."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import soundfile

from whisper_spec.audio import SAMPLE_RATE, load_audio
from whisper_spec.cli.main import pair_args
from whisper_spec.cli.parser import build_parser
from whisper_spec.load import load_pair

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
# WHISPER_SPEC_SPEECH: a copy of the speech folder elsewhere (a GPU machine that ../shared does not reach)
SPEECH = Path(os.environ.get("WHISPER_SPEC_SPEECH", SHARED / "speech"))


def manifest_rows() -> list[dict]:
    return [json.loads(line) for line in (SPEECH / "manifest.jsonl").read_text().splitlines() if line.strip()]


def command_line_pair(*flags: str):
    """The model pair the command line loads with these flags (`whisper-spec batch ... FLAGS`; its
    defaults otherwise): what a user gets."""
    return load_pair(**pair_args(build_parser().parse_args(["batch", "x", "-o", "y", *flags])))


def write_report(report: dict, output: Path | None) -> int:
    """Print the report as JSON and write it to output when given."""
    if output:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


def progress(entry: dict) -> None:
    print(json.dumps(entry), file=sys.stderr)


def long_recordings(name: str, folder: Path) -> tuple[list[dict], list[Path]]:
    """The long recordings of a benchmark, as manifest-like rows (language, text, duration_s) and
    paths. "longform": the shared long-form files (7 LibriSpeech test-other chapters, a TED excerpt,
    the 128 s mp3), in English. "fleurs": each language's FLEURS clips (de, es, fr, pt, en) joined
    end to end, half a second of silence between them, written to folder, the clips' texts joined."""
    rows = manifest_rows()
    if name == "longform":
        files = [r | {"language": "en"} for r in rows if r["set"] in ("longform", "unlabeled_longform")]
        return files, [SPEECH / r["path"] for r in files]
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
