"""Transcripts -> txt, json, srt, vtt, tsv. Files are written atomically (temp file, then rename)."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from operator import attrgetter
from pathlib import Path
from typing import Callable

from ..longform.segments import Segment
from ..longform.transcript import Transcript
from ..models.tokenizer import TIME_PRECISION
from ..options import SubtitleOptions


def _timestamp(seconds: float, decimal: str) -> str:
    millis = round(max(seconds, 0.0) * 1000)
    hours, millis = divmod(millis, 3_600_000)
    minutes, millis = divmod(millis, 60_000)
    secs, millis = divmod(millis, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{decimal}{millis:03d}"


def segment_line(segment: Segment) -> str:
    """A segment as one line, '[00:01:02.500 --> 00:01:05.000] text', as Whisper prints them while it decodes."""
    return f"[{_timestamp(segment.start, '.')} --> {_timestamp(segment.end, '.')}] {segment.text.strip()}"


def to_txt(transcript: Transcript) -> str:
    return transcript.text + "\n"


def to_json(transcript: Transcript) -> str:
    return json.dumps(transcript.as_dict(), ensure_ascii=False, indent=2) + "\n"


_WORD_TEXT = attrgetter("word")  # a timing.Word's text


def _line(words, text: Callable[[object], str]) -> str:
    """The words' text as a line: each word's text carries its leading space."""
    return "".join(text(w) for w in words).strip()


def _wrap(words: list, text: Callable[[object], str], layout: SubtitleOptions) -> list[list]:
    """Words (each with its leading space) into lines of at most max_line_width characters and
    max_words_per_line words, filled in order; a word longer than the width gets a line of its own."""
    lines: list[list] = []
    for word in words:
        if lines:
            joined = _line((*lines[-1], word), text)
            if ((layout.max_line_width is None or len(joined) <= layout.max_line_width)
                    and (layout.max_words_per_line is None or len(lines[-1]) < layout.max_words_per_line)):
                lines[-1].append(word)
                continue
        lines.append([word])
    return lines


def cues(transcript: Transcript, layout: SubtitleOptions = SubtitleOptions()) -> list[tuple[float, float, str]]:
    """Subtitle cues (start, end, text with a newline between lines): a segment's, its words wrapped
    into lines by the layout; where the layout cuts segments (SubtitleOptions.splits_segments) and
    the segment has word timestamps, runs of max_line_count lines timed by their words; with
    highlight_words, each such cue a cue per word, that word underlined (and the gaps between
    words cues of their own, none underlined). A cue lasts at least one timestamp step: players skip
    a cue of no length."""
    wraps = layout.max_line_width is not None or layout.max_words_per_line is not None
    lines_a_cue = layout.max_line_count or (1 if layout.max_words_per_line is not None else None)
    found = []
    for segment in transcript.segments:
        if layout.needs_word_times and segment.words:
            lines = _wrap(segment.words, _WORD_TEXT, layout)
            step = lines_a_cue or len(lines)
            for i in range(0, len(lines), step):
                group = lines[i : i + step]
                if layout.highlight_words:
                    found += _highlighted(group)
                else:
                    found.append((group[0][0].start, group[-1][-1].end, _lines(group, _WORD_TEXT)))
        elif wraps:  # no word times: the whole segment, its text wrapped
            lines = _wrap([" " + word for word in segment.text.split()], str, layout)
            found.append((segment.start, segment.end, _lines(lines, str)))
        else:
            found.append((segment.start, segment.end, segment.text))
    return [(start, max(end, start + TIME_PRECISION), text) for start, end, text in found]


def _lines(lines: list[list], text: Callable[[object], str]) -> str:
    return "\n".join(_line(line, text) for line in lines)


def _highlighted(lines: list[list]) -> list[tuple[float, float, str]]:
    """A cue of these lines of words per word, while it is spoken, that word underlined; between two
    words apart in time, the lines as they are."""
    words = [word for line in lines for word in line]
    found = []
    for i, spoken in enumerate(words):
        if i and words[i - 1].end < spoken.start:
            found.append((words[i - 1].end, spoken.start, _lines(lines, _WORD_TEXT)))
        underlined = (lambda w: w.word if w is not spoken
                      else w.word[: len(w.word) - len(w.word.lstrip())] + f"<u>{w.word.strip()}</u>")
        found.append((spoken.start, spoken.end, _lines(lines, underlined)))
    return found


def to_srt(transcript: Transcript, layout: SubtitleOptions = SubtitleOptions()) -> str:
    blocks = [f"{i}\n{_timestamp(start, ',')} --> {_timestamp(end, ',')}\n{text}\n"
              for i, (start, end, text) in enumerate(cues(transcript, layout), start=1)]
    return "\n".join(blocks)


def to_vtt(transcript: Transcript, layout: SubtitleOptions = SubtitleOptions()) -> str:
    blocks = [f"{_timestamp(start, '.')} --> {_timestamp(end, '.')}\n{text}\n" for start, end, text in cues(transcript, layout)]
    return "WEBVTT\n\n" + "\n".join(blocks)


def to_tsv(transcript: Transcript) -> str:
    """openai-whisper's table: a header, then each segment's start and end in integer milliseconds and its text."""
    rows = ["start\tend\ttext"] + [f"{round(1000 * s.start)}\t{round(1000 * s.end)}\t{s.text.replace(chr(9), ' ')}"
                                  for s in transcript.segments]
    return "\n".join(rows) + "\n"


RENDERERS = {"txt": to_txt, "json": to_json, "srt": to_srt, "vtt": to_vtt, "tsv": to_tsv}
SUBTITLES = ("srt", "vtt")  # the formats a SubtitleOptions shapes
TIMED = (*SUBTITLES, "tsv")  # the formats of timed segments: timestamps are on for them unless told otherwise


def render(transcript: Transcript, fmt: str, layout: SubtitleOptions = SubtitleOptions()) -> str:
    return RENDERERS[fmt](transcript, layout) if fmt in SUBTITLES else RENDERERS[fmt](transcript)


def write_atomic(path: Path, content: str) -> None:
    """Write content to path through a temporary file beside it, so a reader never sees half of it.
    The temporary name is short (a name of up to the file system's limit must not fail for the
    temporary's length); a failed write names the file it was for."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".whisper-spec-{os.getpid()}-{secrets.token_hex(4)}.tmp")
    try:
        tmp.write_text(content, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as error:  # a full disk, a quota: say which output
        raise OSError(error.errno, error.strerror, str(path)) from error
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
                  layout: SubtitleOptions = SubtitleOptions()) -> list[Path]:
    """One file per format: DIR/<name>.<format>, name defaulting to the audio file's stem."""
    name = name or Path(transcript.path).stem
    written = []
    for fmt in formats:
        path = Path(output_dir) / f"{name}.{fmt}"
        write_atomic(path, render(transcript, fmt, layout))
        written.append(path)
    return written
