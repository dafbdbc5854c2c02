"""Window tokens -> segments on the file's timeline, and overlapping windows stitched into one
list of segments: consecutive windows are aligned on the tokens they share in the overlap and cut
in the middle of the agreeing stretch, so the words at a seam appear once."""

from __future__ import annotations

from dataclasses import dataclass

from .tokenizer import TIME_PRECISION, Tokenizer


@dataclass
class Segment:
    start: float  # seconds on the file's timeline
    end: float
    text: str
    tokens: list[int]  # text tokens, timestamps excluded


def window_segments(tokens: list[int], tokenizer: Tokenizer, start: float, end: float, timestamps: bool) -> list[Segment]:
    """Segments of one window on the file's timeline. With timestamps, each <|t0|> text <|t1|>
    span is a segment; without, the window's whole text is one."""
    ts_begin = tokenizer.special.timestamp_begin
    duration = end - start
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
    return [
        Segment(start + min(s, duration), start + min(max(e, s), duration), body, seg)
        for s, e, seg in spans
        if (body := tokenizer.decode(seg).strip())
    ]


@dataclass
class _TimedToken:
    token: int
    segment: Segment
    position: int  # in segment.tokens

    @property
    def time(self) -> float:
        """Interpolated within the segment: Whisper times segments, not tokens."""
        return _time_at(self.segment, self.position)


def _time_at(segment: Segment, position: int) -> float:
    return segment.start + (segment.end - segment.start) * position / len(segment.tokens)


def _timed(segments: list[Segment]) -> list[_TimedToken]:
    return [_TimedToken(t, segment, j) for segment in segments for j, t in enumerate(segment.tokens)]


MIN_SHARED_RUN = 3  # tokens; shorter runs ("of the") are too often shared by chance


def align_overlap(left: list[int], right: list[int]) -> tuple[int, int] | None:
    """Where to cut two token sequences that overlap (left's end is right's beginning).

    Finds the longest run of consecutive tokens the two share (a common substring, so a word
    heard differently elsewhere in the overlap does not matter) and cuts both in its middle:
    keep left[:i] + right[j:]. None when no run of MIN_SHARED_RUN tokens exists.
    """
    best_length, best_left_end, best_right_end = 0, 0, 0
    previous = [0] * (len(right) + 1)
    for i in range(1, len(left) + 1):
        current = [0] * (len(right) + 1)
        for j in range(1, len(right) + 1):
            if left[i - 1] == right[j - 1]:
                current[j] = previous[j - 1] + 1
                if current[j] > best_length:
                    best_length, best_left_end, best_right_end = current[j], i, j
        previous = current
    if best_length < MIN_SHARED_RUN:
        return None
    half = best_length // 2
    return best_left_end - best_length + half, best_right_end - best_length + half


def stitch(windows: list[tuple[float, float, list[Segment]]], tokenizer: Tokenizer) -> list[Segment]:
    """One file's windows, (start, end, segments) in order, into one list of segments."""
    merged: list[_TimedToken] = _timed(windows[0][2])
    previous = 0  # where the previous window's tokens begin in merged
    for (_, left_end, _), (right_start, _, segments) in zip(windows, windows[1:]):
        right = _timed(segments)
        # words spoken in the overlap lie in segments that reach into it (token times within a
        # segment are only interpolated, so whole segments are searched)
        left_zone = [i for i in range(previous, len(merged)) if merged[i].segment.end >= right_start]
        right_zone = [j for j, t in enumerate(right) if t.segment.start <= left_end]
        cut = None
        if left_zone and right_zone:
            cut = align_overlap([merged[i].token for i in left_zone], [right[j].token for j in right_zone])
        if cut is not None:
            left_cut = left_zone[cut[0]] if cut[0] < len(left_zone) else len(merged)
            right_cut = right_zone[cut[1]] if cut[1] < len(right_zone) else len(right)
        else:
            # no words in common: the left window's text stops before the right one's begins (Whisper
            # leaves a cut-off last sentence for the next window). Keep all of left, and right from
            # its first segment that reaches past the end of left's text.
            left_cut = len(merged)
            left_text_end = merged[-1].segment.end if len(merged) > previous else right_start
            right_cut = next((j for j, t in enumerate(right) if t.segment.end > left_text_end), len(right))
        del merged[left_cut:]
        previous = len(merged)
        merged += right[right_cut:]
    return _regroup(merged, tokenizer)


def _regroup(tokens: list[_TimedToken], tokenizer: Tokenizer) -> list[Segment]:
    """Consecutive tokens of one original segment form a segment again; a segment cut at a seam
    starts or ends at the time of its first kept or first dropped token."""
    segments = []
    i = 0
    while i < len(tokens):
        source = tokens[i].segment
        j = i
        while j < len(tokens) and tokens[j].segment is source:
            j += 1
        kept = [t.token for t in tokens[i:j]]
        start = _time_at(source, tokens[i].position)
        if segments:  # windows time the same words slightly differently: keep segments in order
            start = max(start, segments[-1].end)
        end = _time_at(source, tokens[j - 1].position + 1)
        body = tokenizer.decode(kept).strip()
        if body:
            segments.append(Segment(start, max(end, start), body, kept))
        i = j
    return segments
