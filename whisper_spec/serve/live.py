"""Audio arriving in chunks -> each update, every stream's buffer decoded (at most one window) in one
batch, each row with its confirmed text before the buffer as its prompt and its confirmed text in the
buffer as its forced beginning, drafting from its last hypothesis -> text confirmed where two
hypotheses in a row agree (LocalAgreement-2, as ufal's whisper_streaming), the rest tentative -> the
buffer trimmed at the end of a confirmed segment once it is long.

A hypothesis is the main model's own decoding of the buffer (the drafts are verified): an update's
tokens equal a main-only decoding of the same buffer with the same prompt, prefix and end floor
(LiveUpdate keeps them). The last hypothesis is nearly always right for the audio the two buffers
share, so most of an update's tokens are accepted drafts that cost no drafter
(speculative.hint_proposals). The choices behind the constants: docs/decisions.md, "Live transcription".
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ..decode.decoding import decode_encoded, encode_batch
from ..decode.encoding import pair_features
from ..decode.stats import DecodingStats
from ..longform.segments import Segment, window_segments
from ..longform.transcript import Transcript
from ..models.pair import WhisperPair
from ..models.tokenizer import TIME_PRECISION
from ..options import DecodingOptions, VadOptions
from ..speech.audio import SAMPLE_RATE

WINDOW_SECONDS = 30.0
# a buffer longer than this is trimmed at the end of its last confirmed segment (whisper_streaming's
# buffer_trimming_sec); one that outgrows a window loses its oldest audio
TRIM_SECONDS = 15.0
# the confirmed text before the buffer the decoder reads as its prompt (whisper_streaming: 200 characters)
PROMPT_TOKENS = 40
# a hypothesis's timestamps reach this far before the end of the buffer's speech before its text may end:
# base ends early in a buffer cut mid-sentence and skips the sentence for good (decoding's end floors)
END_SLACK_SECONDS = 1.5
# a buffer without speech this long keeps only its last second
SILENT_SECONDS = 5.0


@dataclass
class LiveStream:
    """One stream's state: its buffer, what of it is confirmed, and its last hypothesis."""

    language: str | None = None  # None: detected at each update until text is confirmed, then kept
    audio: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))  # the buffer
    offset: int = 0  # the stream's samples before the buffer
    confirmed: list[int] = field(default_factory=list)  # text tokens confirmed, the whole stream's
    # the buffer's confirmed hypothesis, timestamps included: the prefix the next update's tokens begin with
    prefix: list[int] = field(default_factory=list)
    pending: list[int] = field(default_factory=list)  # the last hypothesis's text after its prefix: tentative
    hypothesis: list[int] | None = None  # the last update's tokens: the next one's hint
    segments: list[Segment] = field(default_factory=list)  # the confirmed segments trimmed off, on the stream's timeline

    def feed(self, samples: np.ndarray) -> None:
        """More of the stream's 16 kHz samples."""
        self.audio = np.concatenate([self.audio, np.asarray(samples, np.float32)])

    @property
    def seconds(self) -> float:
        """The stream's audio so far."""
        return (self.offset + len(self.audio)) / SAMPLE_RATE

    def prompt(self, eot: int) -> tuple[int, ...]:
        """The confirmed text before the buffer, its last PROMPT_TOKENS tokens."""
        before = self.confirmed[: len(self.confirmed) - sum(t < eot for t in self.prefix)]
        return tuple(before[-PROMPT_TOKENS:])


@dataclass
class LiveUpdate:
    """What an update found for a stream: text tokens newly confirmed, the tentative rest, and what
    was decoded (a main-only decoding of that buffer with that prompt, prefix and end floor gives the
    same tokens)."""

    confirmed: list[int]
    tentative: list[int]
    tokens: list[int]  # the hypothesis, its prefix first, timestamps included; [] where the buffer held no speech
    stats: DecodingStats
    audio: np.ndarray
    prompt: tuple[int, ...]
    prefix: tuple[int, ...]
    end_floor: float
    seconds: float  # the stream's audio so far


def update(pair: WhisperPair, streams: list[LiveStream], options: DecodingOptions = DecodingOptions(),
           hypothesis_drafts: bool = True) -> list[LiveUpdate]:
    """Decode every stream's buffer that holds speech in one batch, each with its text before the
    buffer as its prompt, its confirmed text in it as its prefix, drafting from its last hypothesis;
    confirm what two hypotheses in a row agree on; trim long buffers. options: decoding's (timestamps
    on: segments end where a buffer may be trimmed). hypothesis_drafts=False: the assistant alone
    drafts (what benchmarks/live.py compares against; the tokens are the same)."""
    options, eot = replace(options, timestamps=True), pair.main.special.eot
    for stream in streams:  # at most a window: the oldest audio goes, confirmed or not
        _trim(pair, stream, len(stream.audio) - int(WINDOW_SECONDS * SAMPLE_RATE))
    floors = [_end_floor(pair, stream.audio) for stream in streams]
    updates = [LiveUpdate([], list(s.pending), [], DecodingStats(), s.audio, s.prompt(eot), tuple(s.prefix), 0.0,
                          s.seconds) for s in streams]
    for stream, floor in zip(streams, floors):
        if floor is None and len(stream.audio) > SILENT_SECONDS * SAMPLE_RATE:
            _trim(pair, stream, len(stream.audio) - SAMPLE_RATE)
            stream.pending = []
    speaking = [i for i, floor in enumerate(floors) if floor is not None]
    if not speaking:
        return updates
    batch = [streams[i] for i in speaking]
    mel, assistant_mel = pair_features(pair, [s.audio for s in batch])
    hints = [s.hypothesis if hypothesis_drafts else None for s in batch]
    encoded, stats = encode_batch(pair, mel, options, assistant_mel, hints=hints)
    results, _ = decode_encoded(pair, encoded, options, languages=[s.language for s in batch], stats=stats, hints=hints,
                                end_floors=[floors[i] for i in speaking],
                                prompts=[updates[i].prompt or None for i in speaking],
                                prefixes=[updates[i].prefix for i in speaking])
    for index, stream, result in zip(speaking, batch, results):
        updates[index] = replace(updates[index], stats=result.stats, tokens=list(result.tokens), end_floor=floors[index])
        updates[index].confirmed, updates[index].tentative = _agree(pair, stream, list(result.tokens))
        if stream.confirmed:  # detected on a second or two of audio, a language may be wrong until text agrees
            stream.language = stream.language or result.language
        if len(stream.audio) > TRIM_SECONDS * SAMPLE_RATE:
            _trim_confirmed(pair, stream)
    return updates


def finish(pair: WhisperPair, stream: LiveStream) -> list[int]:
    """At the stream's end: its last hypothesis's text not yet confirmed, now confirmed, and the buffer's
    segments closed. Returns that text."""
    rest, stream.pending = stream.pending, []
    stream.confirmed += rest
    _close(pair, stream, stream.hypothesis or stream.prefix, len(stream.audio))
    stream.prefix, stream.hypothesis = [], None
    return rest


def transcript(pair: WhisperPair, stream: LiveStream, name: str = "live") -> Transcript:
    """A finished stream's confirmed text and segments, for the writers (writers.write_outputs)."""
    text = pair.main.tokenizer.decode(stream.confirmed).strip()
    return Transcript(name, text, stream.language, stream.seconds, list(stream.segments))


def _end_floor(pair: WhisperPair, audio: np.ndarray) -> float | None:
    """Seconds into the buffer its text reaches before it may end: END_SLACK_SECONDS before its
    speech ends; None where it holds no speech."""
    regions = pair.speech_detector.regions(audio, VadOptions(), WINDOW_SECONDS)
    return max(0.0, regions[-1][1] / SAMPLE_RATE - END_SLACK_SECONDS) if regions else None


def _agree(pair: WhisperPair, stream: LiveStream, tokens: list[int]) -> tuple[list[int], list[int]]:
    """The hypothesis's text after its prefix, confirmed where it agrees with the last hypothesis's
    (whole words), the prefix grown by it; the stream's state moved on. Returns (newly confirmed,
    tentative)."""
    eot = pair.main.special.eot
    rest = tokens[len(stream.prefix) :]
    text = [t for t in rest if t < eot]
    agreed = _whole_words(pair, text, _common_prefix(text, stream.pending))
    if agreed:  # the prefix grows to the agreed text's last token, with this hypothesis's timestamps
        ends = [i + 1 for i, t in enumerate(rest) if t < eot]
        stream.prefix += rest[: ends[agreed - 1]]
    stream.confirmed += text[:agreed]
    stream.pending, stream.hypothesis = text[agreed:], tokens
    return text[:agreed], text[agreed:]


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _whole_words(pair: WhisperPair, text: list[int], n: int) -> int:
    """n, or less, so that the tokens before it end a word: the token after them begins one (its text
    starts with a space) or there is none."""
    tokenizer = pair.main.tokenizer
    while 0 < n < len(text) and not tokenizer.decode([text[n]]).startswith(" "):
        n -= 1
    return n


def _trim_confirmed(pair: WhisperPair, stream: LiveStream) -> None:
    """The buffer cut where the last segment of its prefix closes (whisper_streaming trims at a
    segment's end), where one does."""
    begin, eot = pair.main.special.timestamp_begin, pair.main.special.eot
    closes, opened, texts = None, False, 0
    for index, token in enumerate(stream.prefix):
        texts += token < eot
        if token >= begin:
            if opened and texts:
                closes = index
            opened = not opened
    if closes is not None:
        seconds = (stream.prefix[closes] - begin) * TIME_PRECISION
        _trim(pair, stream, round(seconds * SAMPLE_RATE), closes)


def _close(pair: WhisperPair, stream: LiveStream, tokens: list[int], samples: int) -> None:
    """The segments of these tokens of the buffer's first `samples`, onto the stream's."""
    start = stream.offset / SAMPLE_RATE
    for segment in window_segments(tokens, pair.main.tokenizer, samples / SAMPLE_RATE, timestamps=True):
        stream.segments.append(replace(segment, start=segment.start + start, end=segment.end + start,
                                       language=stream.language))


def _trim(pair: WhisperPair, stream: LiveStream, cut: int, after: int | None = None) -> None:
    """The buffer's first `cut` samples (if any) leave it, and the confirmed text of that audio becomes
    the prompt's. after: the index in the prefix of the timestamp the cut is at; the prefix and the
    hint keep what follows, their timestamps shifted. None (a buffer that outgrew a window, or
    silence): all that is confirmed becomes the prompt's, and nothing is left to draft from."""
    if cut <= 0:
        return
    begin = pair.main.special.timestamp_begin
    _close(pair, stream, stream.prefix if after is None else stream.prefix[: after + 1], cut)
    stream.audio, stream.offset = stream.audio[cut:], stream.offset + cut
    if after is None:
        stream.prefix, stream.hypothesis = [], None
        return
    shift = stream.prefix[after] - begin
    stream.prefix, stream.hypothesis = ([max(t - shift, begin) if t >= begin else t for t in tokens[after + 1 :]]
                                        for tokens in (stream.prefix, stream.hypothesis))
