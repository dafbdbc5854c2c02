"""A window's tokens -> segments: the spans between Whisper's timestamp tokens, with their words."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from .timing import Word
from .tokenizer import TIME_PRECISION, Tokenizer


@dataclass
class Segment:
    start: float  # seconds, on the window's timeline until placed on the file's (pipeline)
    end: float
    text: str
    tokens: list[int]  # text tokens, timestamps excluded
    words: list[Word] = field(default_factory=list)  # with word timestamps: its words, tokens in order


def window_segments(tokens: list[int], tokenizer: Tokenizer, duration: float, timestamps: bool,
                    words: list[Word] | None = None) -> list[Segment]:
    """Segments of one window of `duration` seconds, on its timeline. With timestamps, each
    <|t0|> text <|t1|> span is a segment; without, the window's whole text is one. words
    (timing.word_timings of the window) go to the segments their tokens are in."""
    ts_begin = tokenizer.special.timestamp_begin
    if not timestamps:
        spans = [(0.0, duration, [t for t in tokens if t < ts_begin])]
    else:
        spans, opened, pending = [], None, []
        for token in tokens:
            if token < ts_begin:
                pending.append(token)
                continue
            time = (token - ts_begin) * TIME_PRECISION
            if opened is not None and pending:
                spans.append((opened, time, pending))
                opened, pending = None, []
            else:
                opened = time
        if pending:  # text after the last timestamp runs to the end of the window
            spans.append((opened if opened is not None else 0.0, duration, pending))
    segments = [Segment(min(s, duration), min(max(e, s), duration), tokenizer.decode(seg).strip(), seg)
                for s, e, seg in spans]
    placed = iter([replace(w) for w in words or []])
    for segment in segments:
        taken = 0
        while taken < len(segment.tokens) and (word := next(placed, None)) is not None:
            segment.words.append(word)
            taken += len(word.tokens)
    return [segment for segment in segments if segment.text]
