"""Window tokens -> segments on the file's timeline, and overlapping windows stitched into one
list of segments: consecutive windows are aligned on the tokens they share in the overlap and cut
in the middle of the agreeing stretch, so the words at a seam appear once."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from .timing import Word
from .tokenizer import TIME_PRECISION, Tokenizer


@dataclass
class Segment:
    start: float  # seconds on the file's timeline
    end: float
    text: str
    tokens: list[int]  # text tokens, timestamps excluded
    words: list[Word] = field(default_factory=list)  # with word timestamps: its words, tokens in order


def window_segments(tokens: list[int], tokenizer: Tokenizer, start: float, end: float, timestamps: bool,
                    words: list[Word] | None = None) -> list[Segment]:
    """Segments of one window on the file's timeline. With timestamps, each <|t0|> text <|t1|>
    span is a segment; without, the window's whole text is one. words (timing.word_timings of
    the window) go to the segments their tokens are in, onto the file's timeline."""
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
    segments = [Segment(start + min(s, duration), start + min(max(e, s), duration), tokenizer.decode(seg).strip(), seg)
                for s, e, seg in spans]
    placed = iter([replace(w, start=start + w.start, end=start + w.end) for w in words or []])
    for segment in segments:
        taken = 0
        while taken < len(segment.tokens) and (word := next(placed, None)) is not None:
            segment.words.append(word)
            taken += len(word.tokens)
    return [segment for segment in segments if segment.text]


@dataclass
class _TimedToken:
    token: int
    segment: Segment
    position: int  # in segment.tokens
    word: Word | None  # with word timestamps: the word it is part of
    starts_word: bool

    @property
    def time(self) -> float:
        """Interpolated within the segment: Whisper times segments, not tokens."""
        return _time_at(self.segment, self.position)


def _time_at(segment: Segment, position: int) -> float:
    return segment.start + (segment.end - segment.start) * position / len(segment.tokens)


def _timed(segments: list[Segment]) -> list[_TimedToken]:
    timed = []
    for segment in segments:
        words = [(word, i == 0) for word in segment.words for i in range(len(word.tokens))]
        words += [(None, False)] * (len(segment.tokens) - len(words))
        timed += [_TimedToken(t, segment, j, *word) for j, (t, word) in enumerate(zip(segment.tokens, words))]
    return timed


MIN_SHARED_RUN = 3  # tokens; shorter runs ("of the") are too often shared by chance


def align_overlap(left: list[int], right: list[int], cuttable: list[bool] | None = None) -> tuple[int, int] | None:
    """Where to cut two token sequences that overlap (left's end is right's beginning).

    Finds the longest run of consecutive tokens the two share (a common substring, so a word
    heard differently elsewhere in the overlap does not matter) and cuts both in its middle, or
    at the nearest right[j] with cuttable[j] (a word's first token) where there is one:
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
    run = best_right_end - best_length
    offsets = sorted(range(best_length), key=lambda offset: abs(offset - best_length // 2))
    half = next((o for o in offsets if cuttable is None or cuttable[run + o]), best_length // 2)
    return best_left_end - best_length + half, run + half


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
            cut = align_overlap([merged[i].token for i in left_zone], [right[j].token for j in right_zone],
                                [right[j].starts_word for j in right_zone] if right[0].word else None)
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
    starts or ends at the time of its first kept or first dropped token, or with word timestamps,
    where its first and last kept words do (words kept in time order across seams)."""
    segments = []
    last_word_end = 0.0
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
        words = list({id(t.word): t.word for t in tokens[i:j] if t.word is not None}.values())
        for word in words:
            word.start = max(word.start, last_word_end)
            word.end = last_word_end = max(word.end, word.start)
        if words:
            start, end = max(words[0].start, segments[-1].end if segments else 0.0), words[-1].end
        body = tokenizer.decode(kept).strip()
        if body:
            segments.append(Segment(start, max(end, start), body, kept, words))
        i = j
    return segments
