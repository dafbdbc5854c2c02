"""Audio arriving in chunks -> each update, every stream's buffer decoded (at most one window) in one
batch, each row drafting from its stream's last hypothesis -> text confirmed where two hypotheses in a
row agree (LocalAgreement-2, as ufal's whisper_streaming), the rest tentative -> the buffer trimmed
at the end of a confirmed segment once it is long.

A hypothesis is the main model's own decoding of the buffer (the drafts are verified): an update's
tokens equal a main-only decoding of the same buffer. The last hypothesis is nearly always right for
the audio the two buffers share, so most of an update's tokens are accepted drafts that cost no
drafter (speculative.hinted_drafts). No prompt is read: streams share one batch (a prompt per row
would batch apart, pipeline._Kind)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from .audio import SAMPLE_RATE
from .decoding import decode_windows
from .encoding import pair_features
from .options import DecodingOptions
from .pair import WhisperPair
from .stats import DecodingStats
from .tokenizer import TIME_PRECISION

# a buffer longer than this is trimmed at the end of its last confirmed segment (whisper_streaming's
# buffer_trimming_sec); it never holds more than a window
TRIM_SECONDS = 15.0
WINDOW_SECONDS = 30.0


@dataclass
class LiveStream:
    """One stream's state: its buffer, what of it is confirmed, and its last hypothesis."""

    language: str | None = None  # None: detected at the first update, then kept
    audio: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))  # the buffer
    offset: int = 0  # the stream's samples before the buffer
    confirmed: list[int] = field(default_factory=list)  # text tokens confirmed, the whole stream's
    held: int = 0  # of the buffer's hypothesis, the text tokens confirmed
    pending: list[int] = field(default_factory=list)  # the last hypothesis's text after what is confirmed
    hypothesis: list[int] | None = None  # the last update's tokens (timestamps included): the next one's hint

    def feed(self, samples: np.ndarray) -> None:
        """More of the stream's 16 kHz samples."""
        self.audio = np.concatenate([self.audio, np.asarray(samples, np.float32)])

    @property
    def seconds(self) -> float:
        return (self.offset + len(self.audio)) / SAMPLE_RATE


@dataclass
class LiveUpdate:
    """What an update found for a stream: text tokens newly confirmed, and the tentative rest."""

    confirmed: list[int]
    tentative: list[int]
    tokens: list[int]  # the hypothesis decoded (timestamps included)
    stats: DecodingStats


def update(pair: WhisperPair, streams: list[LiveStream], options: DecodingOptions = DecodingOptions()
           ) -> list[LiveUpdate]:
    """Decode every stream's buffer in one batch, each drafting from its last hypothesis; confirm
    what two hypotheses in a row agree on; trim long buffers. options: decoding's (timestamps on:
    segments end where a buffer may be trimmed)."""
    options = replace(options, timestamps=True, prompt=None)
    for stream in streams:  # at most a window: the oldest audio goes, confirmed or not
        excess = len(stream.audio) - int(WINDOW_SECONDS * SAMPLE_RATE)
        if excess > 0:
            _trim(pair, stream, excess)
    mel, assistant_mel = pair_features(pair, [s.audio for s in streams])
    results, _ = decode_windows(pair, mel, options, assistant_mel=assistant_mel, languages=[s.language for s in streams],
                                hints=[s.hypothesis for s in streams])
    updates = []
    for stream, result in zip(streams, results):
        stream.language = stream.language or result.language
        text = _text(pair, result.tokens)
        start = _after_confirmed(text, stream.confirmed, stream.held)
        tail = text[start:]
        agreed = _whole_words(pair, tail, _common_prefix(tail, stream.pending))
        stream.confirmed += tail[:agreed]
        stream.held, stream.pending = start + agreed, tail[agreed:]
        stream.hypothesis = list(result.tokens)
        updates.append(LiveUpdate(tail[:agreed], tail[agreed:], list(result.tokens), result.stats))
        closing = _confirmed_segment_end(pair, stream) if len(stream.audio) > TRIM_SECONDS * SAMPLE_RATE else None
        if closing is not None:
            seconds = (stream.hypothesis[closing] - pair.main.special.timestamp_begin) * TIME_PRECISION
            _trim(pair, stream, round(seconds * SAMPLE_RATE), closing)
    return updates


def _text(pair: WhisperPair, tokens: list[int]) -> list[int]:
    return [t for t in tokens if t < pair.main.special.eot]


def _after_confirmed(text: list[int], confirmed: list[int], held: int, overlap: int = 4) -> int:
    """Where in a hypothesis the confirmed text ends: after the occurrence of the confirmed text's last
    `overlap` tokens nearest to where the last hypothesis had it end (held), as whisper_streaming drops a
    new hypothesis's words that repeat the committed ones; held where they do not occur (a hypothesis
    that words the confirmed text otherwise) or nothing is confirmed in the buffer."""
    if not held:
        return 0
    tail = confirmed[-min(overlap, held):]
    found = [i + len(tail) for i in range(len(text) - len(tail) + 1) if text[i : i + len(tail)] == tail]
    return min(found, key=lambda i: abs(i - held)) if found else min(held, len(text))


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


def _confirmed_segment_end(pair: WhisperPair, stream: LiveStream) -> int | None:
    """Where in the hypothesis the buffer's last segment whose text is all confirmed closes: the index
    of its closing timestamp token; None where no segment is."""
    begin, eot = pair.main.special.timestamp_begin, pair.main.special.eot
    counted, opened, closing = 0, False, None
    for index, token in enumerate(stream.hypothesis or []):
        if token < eot:
            counted += 1
        elif token >= begin:
            if opened and 0 < counted <= stream.held:
                closing = index
            opened = not opened
    return closing


def _trim(pair: WhisperPair, stream: LiveStream, cut: int, after: int | None = None) -> None:
    """The buffer's first `cut` samples leave it. after: the index in the hypothesis of the timestamp
    the cut is at; the hypothesis keeps what follows, its timestamps shifted, so the next update can
    draft from it. None (a buffer that outgrew a window): nothing is left to draft from."""
    begin = pair.main.special.timestamp_begin
    stream.audio, stream.offset = stream.audio[cut:], stream.offset + cut
    if after is None or stream.hypothesis is None:
        stream.hypothesis, stream.held = None, 0
        return
    shift = stream.hypothesis[after] - begin
    dropped = len(_text(pair, stream.hypothesis[: after + 1]))
    stream.hypothesis = [max(t - shift, begin) if t >= begin else t for t in stream.hypothesis[after + 1 :]]
    stream.held = max(0, stream.held - dropped)


def finish(pair: WhisperPair, stream: LiveStream) -> list[int]:
    """At the stream's end: its last hypothesis's text not yet confirmed, now confirmed."""
    rest, stream.pending = stream.pending, []
    stream.confirmed += rest
    stream.held += len(rest)
    return rest
