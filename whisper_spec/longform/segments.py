"""A window's tokens -> segments: the spans between Whisper's timestamp tokens, with their words; and
the rules that read a long file's segments against its voice activity."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..models.tokenizer import TIME_PRECISION, Tokenizer
from ..speech.audio import SAMPLE_RATE
from ..speech.vad import clamp_to_speech, speech_within
from .timing import Word

# Whisper often ends a window's text early, before speech that is still in the window: when its last
# segment ends this many seconds or more before the window does, the rest is decoded as a window of
# its own (windows._resume_at), until a window's text reaches its end or adds nothing.
TAIL_SECONDS = 1.0

# A speech chunk's text is held open instead to this many seconds before its speech's end
# (windows.end_floor), and a rest holding no more speech than that is not decoded again. Whisper's
# segment ends are coarse: closer, a segment it closed just short was followed by invented text
# (docs/decisions.md, "Held open to 0.75 s before the speech's end").
END_SLACK_SECONDS = 0.75

# Whisper sometimes skips a stretch of speech and writes what follows it from the stretch's start;
# DTW then stretches the first word after the skip back over it. A word whose time holds more than
# this many seconds of the detector's speech marks such a skip: the stretch is decoded again on its
# own (windows.follow; docs/decisions.md, "Long audio").
SKIP_SECONDS = 2.0

# A segment less than this fraction of whose time the voice activity detector hears as speech
# (unpadded) is not kept: Whisper's text for a quiet stretch, music or noise (docs/decisions.md,
# "No text where nobody speaks").
HEARD_FRACTION = 0.2
# A voiced stretch this short and this far from any other is a sound's onset (a drum after speech) more
# often than a word: it does not make a segment heard (Whisper wrote "Pfff." on one).
BLIP_SECONDS = 0.3
BLIP_ISOLATION_SECONDS = 0.5
# a segment of less time than this (Whisper may give one no length) is judged on this much from its start
JUDGED_SECONDS = 0.1


@dataclass
class Segment:
    start: float  # seconds, on the window's timeline until placed on the file's (pipeline)
    end: float
    text: str
    tokens: list[int]  # text tokens, timestamps excluded
    words: list[Word] = field(default_factory=list)  # with word timestamps: its words, tokens in order
    # the decoding of the window it comes from, as openai-whisper reports it (results.WindowResult); None: not computed
    language: str | None = None
    temperature: float | None = None
    avg_logprob: float | None = None
    compression_ratio: float | None = None
    no_speech_prob: float | None = None


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


def skipped_stretch(segments: list[Segment], voiced: list[tuple[int, int]], offset: int, length: int
                    ) -> tuple[int, int] | None:
    """Where a window's words show that Whisper skipped speech: (the start of the segment of the
    first word holding more than SKIP_SECONDS of the detected speech, the middle of the pause before
    the speech in which the last such word in a row ends), samples in the window of `length` samples
    at `offset` in the file; that stretch is decoded again as a window of its own, and the rest after
    it too. None where no word holds that much, or the stretch is under TAIL_SECONDS."""
    words = [(segment, word) for segment in segments for word in segment.words]
    swallows = [speech_within(voiced, offset + w.start * SAMPLE_RATE, offset + w.end * SAMPLE_RATE)
                > SKIP_SECONDS * SAMPLE_RATE for _, w in words]
    if not any(swallows):
        return None
    first = swallows.index(True)
    last = first + swallows[first:].index(False) - 1 if False in swallows[first:] else len(words) - 1
    start = round(words[first][0].start * SAMPLE_RATE)
    end = offset + round(words[last][1].end * SAMPLE_RATE)
    after = next((i for i, (_, b) in enumerate(voiced) if b > end), 0)
    resumed = (voiced[after - 1][1] + voiced[after][0]) // 2 - offset if after else 0
    if resumed - start < TAIL_SECONDS * SAMPLE_RATE or resumed >= length:
        return None
    return start, resumed


def once_each(segments: list[Segment]) -> list[Segment]:
    """A looping window's segments, each text once: a window whose text still loops after every
    fallback temperature (or with none: DecodingOptions.temperature) repeats a sentence until the
    window ends, a hallucination; the repeats are dropped."""
    seen: set[str] = set()
    return [s for s in segments if not (s.text in seen or seen.add(s.text))]


def keep_to_speech(segments: list[Segment], speech: list[tuple[int, int]], voiced: list[tuple[int, int]]
                   ) -> list[Segment]:
    """Times moved out of pauses, then segments the detector does not hear dropped. speech: its
    padded regions, voiced: the same unpadded (samples).

    Words and segments without words start and end in speech (vad.clamp_to_speech: DTW can stretch
    the first word after a pause back over it); a word that still spans a whole pause is put on one side
    of it (a pause is no part of a word): a segment's first word after it, its last before it, another
    word on the side where more of its time is voiced; segments with words span their words. Then a segment less than HEARD_FRACTION of whose time is voiced is dropped (text
    over music, a pause or noise: "Thank you." over room tone, a sentence repeated after its speech)."""
    for segment in segments:
        spans = [(w.start, w.end) for w in segment.words] or [(segment.start, segment.end)]
        spans = clamp_to_speech(spans, speech)
        if segment.words:
            spans = [_off_pauses(span, i == 0, i == len(spans) - 1, speech, voiced) for i, span in enumerate(spans)]
            for word, (start, end) in zip(segment.words, spans):
                word.start, word.end = start, max(start, end)
        segment.start, segment.end = spans[0][0], max(spans[0][0], spans[-1][1])
    heard_regions = without_blips(voiced)
    judged = [(s.start, max(s.end, s.start + JUDGED_SECONDS)) for s in segments]
    heard = [speech_within(heard_regions, a * SAMPLE_RATE, b * SAMPLE_RATE) / SAMPLE_RATE for a, b in judged]
    return [s for s, seconds, (a, b) in zip(segments, heard, judged) if seconds >= HEARD_FRACTION * (b - a)]


def _off_pauses(span: tuple[float, float], first: bool, last: bool, speech: list[tuple[int, int]],
                voiced: list[tuple[int, int]]) -> tuple[float, float]:
    """A word's span on one side of the whole pauses it spans (keep_to_speech)."""
    start, end = span
    later, earlier = (after_pauses(span, speech), end), (start, before_pauses(span, speech))
    if later == span or first:
        return later
    if last:
        return earlier
    heard = [speech_within(voiced, a * SAMPLE_RATE, b * SAMPLE_RATE) for a, b in (later, earlier)]
    return later if heard[0] >= heard[1] else earlier


def after_pauses(span: tuple[float, float], speech: list[tuple[int, int]]) -> float:
    """Where a span's start goes so that no whole pause between the regions lies inside it (seconds)."""
    start, end = span
    return max([b / SAMPLE_RATE for (_, a), (b, _) in zip(speech, speech[1:])
                if start <= a / SAMPLE_RATE and b / SAMPLE_RATE < end], default=start)


def before_pauses(span: tuple[float, float], speech: list[tuple[int, int]]) -> float:
    """Where a span's end goes so that no whole pause between the regions lies inside it (seconds)."""
    start, end = span
    return min([a / SAMPLE_RATE for (_, a), (b, _) in zip(speech, speech[1:])
                if start < a / SAMPLE_RATE and b / SAMPLE_RATE <= end], default=end)


def without_blips(voiced: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The voiced regions less those shorter than BLIP_SECONDS with BLIP_ISOLATION_SECONDS or more of
    quiet on both sides."""
    short, apart = BLIP_SECONDS * SAMPLE_RATE, BLIP_ISOLATION_SECONDS * SAMPLE_RATE
    gaps = [a - b for (_, b), (a, _) in zip(voiced, voiced[1:])]
    before, after = [float("inf"), *gaps], [*gaps, float("inf")]
    return [(a, b) for (a, b), quiet_before, quiet_after in zip(voiced, before, after)
            if b - a >= short or quiet_before < apart or quiet_after < apart]
