"""Transcripts -> txt, json, srt, vtt. Files are written atomically (temp file, then rename)."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from .pipeline import Transcript
from .tokenizer import TIME_PRECISION

FORMATS = ("txt", "json", "srt", "vtt")


def _timestamp(seconds: float, decimal: str) -> str:
    millis = round(max(seconds, 0.0) * 1000)
    hours, millis = divmod(millis, 3_600_000)
    minutes, millis = divmod(millis, 60_000)
    secs, millis = divmod(millis, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{decimal}{millis:03d}"


def to_txt(transcript: Transcript) -> str:
    return transcript.text + "\n"


def to_json(transcript: Transcript) -> str:
    return json.dumps(transcript.as_dict(), ensure_ascii=False, indent=2) + "\n"


def _cues(transcript: Transcript, max_words_per_line: int | None) -> list[tuple[float, float, str]]:
    """Subtitle cues: one per segment, or with max_words_per_line and word timestamps, runs of at
    most that many words of a segment, timed by their words. A cue lasts at least one timestamp
    step: players skip a cue of no length."""
    cues = []
    for segment in transcript.segments:
        if not max_words_per_line or not segment.words:
            cues.append((segment.start, segment.end, segment.text))
            continue
        for i in range(0, len(segment.words), max_words_per_line):
            words = segment.words[i : i + max_words_per_line]
            cues.append((words[0].start, words[-1].end, "".join(w.word for w in words).strip()))
    return [(start, max(end, start + TIME_PRECISION), text) for start, end, text in cues]


def to_srt(transcript: Transcript, max_words_per_line: int | None = None) -> str:
    blocks = [f"{i}\n{_timestamp(start, ',')} --> {_timestamp(end, ',')}\n{text}\n"
              for i, (start, end, text) in enumerate(_cues(transcript, max_words_per_line), start=1)]
    return "\n".join(blocks)


def to_vtt(transcript: Transcript, max_words_per_line: int | None = None) -> str:
    blocks = [f"{_timestamp(start, '.')} --> {_timestamp(end, '.')}\n{text}\n"
              for start, end, text in _cues(transcript, max_words_per_line)]
    return "WEBVTT\n\n" + "\n".join(blocks)


RENDERERS = {"txt": to_txt, "json": to_json, "srt": to_srt, "vtt": to_vtt}


def render(transcript: Transcript, fmt: str, max_words_per_line: int | None = None) -> str:
    """max_words_per_line: subtitle cues of at most that many words (srt, vtt; needs word timestamps)."""
    if fmt in ("srt", "vtt"):
        return RENDERERS[fmt](transcript, max_words_per_line)
    return RENDERERS[fmt](transcript)


def write_atomic(path: Path, content: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(content, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):  # a read-only folder: the write's own error is the one to see
            tmp.unlink(missing_ok=True)


def check_output_dir(path: Path) -> None:
    """Fail before any work where no output could be written, with one line naming the folder."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{path}: not a directory (the output folder)")
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".whisper-spec-write-check.{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise ValueError(f"{path}: cannot write outputs there ({error.strerror or error})") from None


def write_outputs(transcript: Transcript, output_dir: Path, formats: list[str], name: str | None = None,
                  max_words_per_line: int | None = None) -> list[Path]:
    """One file per format: DIR/<name>.<format>, name defaulting to the audio file's stem."""
    name = name or Path(transcript.path).stem
    written = []
    for fmt in formats:
        path = Path(output_dir) / f"{name}.{fmt}"
        write_atomic(path, render(transcript, fmt, max_words_per_line))
        written.append(path)
    return written
