"""The window policy: a file -> its first windows (speech chunks, or the window at its start), and a
decoded window -> the segments its file keeps and the windows that go on after it.

A file longer than one window is cut one of two ways (ChunkingOptions.vad). With voice activity
(the default for long audio), its speech is found once (vad.py) and grouped into chunks of at most
one window, cut at pauses: nothing is decoded before, between or after them, and a chunk's text is
held open to the end of its speech (end_floor). Without, windows follow one another as in
openai-whisper: each starts where the text of the one before it stopped, so no speech falls between
two windows. A window whose text stops early, leaves its last segment open or skips speech is
followed by a window over the rest (follow).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ..decode.results import WindowResult
from ..models.tokenizer import Tokenizer
from ..options import ChunkingOptions
from ..speech.audio import SAMPLE_RATE, SILENCE_PEAK, peak
from ..speech.vad import VAD_FRAME, SpeechDetector, padded, plan_chunks, speech_within
from .segments import (
    END_SLACK_SECONDS,
    TAIL_SECONDS,
    Segment,
    keep_to_speech,
    once_each,
    skipped_stretch,
    window_segments,
)
from .timing import Word

# Whisper sometimes closes a segment far later than its words end, skipping speech after them: a
# segment longer than this many seconds plus SPARSE_SECONDS_PER_TOKEN for each of its tokens has its
# window's words timed, and where the words end is where the text ends (docs/decisions.md, "Long audio").
SPARSE_SECONDS = 3.0
SPARSE_SECONDS_PER_TOKEN = 0.5

# Windows one after another start and end in pauses: a window edge inside a word loses the word. A
# window resumed for a cut-off segment starts in a pause up to this many seconds before it, and a
# window ends in a pause within five times this of its end (_pause_before, _window_at).
PAUSE_SNAP_SECONDS = 1.0

# a short file's text is checked against the speech detector where the main model gave <|nospeech|> at
# least this probability, or its tokens an average log-probability under this, or the audio is shorter
# (decisions, "No text where nobody speaks")
DOUBT_NO_SPEECH = 0.2
DOUBT_LOGPROB = -0.8
DOUBT_SECONDS = 1.0


@dataclass(eq=False)  # a window is itself: two can share a start (_skipped)
class Window:
    file: int
    start: int  # where its audio starts in the file (samples)
    audio: np.ndarray  # a stretch of the file's samples
    new_seconds: float  # of the file no earlier window covers (what a progress bar over the file counts)
    result: WindowResult | None = None  # once decoded
    words: list[Word] | None = None  # with word timestamps, or where its text is sparse (_sparse), once decoded
    kept: float | None = None  # seconds of its audio its text is kept for; None: all (_resume_at)
    # where kept stops at the start of a last segment the window's end cut off: the end of the segment before it
    closed_end: float | None = None
    segments: list[Segment] | None = None  # as the file's transcript keeps them, on its timeline, once decoded
    states: torch.Tensor | None = None  # its main encoder states, where a language detection made them
    language: str | None = None  # what it is decoded in, once decided (pipeline.DecodingJob.decide_languages); None: its file's
    likeliest: tuple[str, float] | None = None  # its own likeliest language and its probability, where detected
    checked: bool = False  # of one language: its pieces were detected, or it continues a decoded window


@dataclass
class File:
    path: str
    audio: np.ndarray
    windows: list[Window]
    chunked: bool  # speech chunks rather than windows one after another
    long: bool  # longer than one window: one language for the whole file, and timestamps
    speech: list[tuple[int, int]] | None  # samples the voice activity detector found (padded), where it ran
    voiced: list[tuple[int, int]] = field(default_factory=list)  # the same, unpadded
    chunking: ChunkingOptions = ChunkingOptions()  # the detector's settings, where it runs after decoding (_doubtful)
    detector: SpeechDetector | None = None  # the pair's (WhisperPair.speech_detector), where it runs after decoding
    counted: int = 0  # samples reported to on_window, of a file decoded window after window
    announced: int = 0  # windows whose segments went to on_segments
    language_probability: float | None = None  # where its language was detected once for the whole file
    detects: bool = False  # its chunks are decoded in their own language where sure (chunk_languages)
    detection_seconds: float = 0.0  # its language detections' (the file's, chunks' own), counted as encoder seconds

    @property
    def duration(self) -> float:
        return len(self.audio) / SAMPLE_RATE


def plan_file(index: int, path: str, audio: np.ndarray, chunking: ChunkingOptions, detector: SpeechDetector) -> File:
    """A file's first windows: its speech chunks where chunking.vad says so (by default for audio
    longer than a window), else the window at its start (the next ones follow as it is decoded).
    The voice activity is found for long audio in either mode: it also keeps text and word times
    out of pauses (segments.keep_to_speech)."""
    window = int(chunking.chunk_length * SAMPLE_RATE)
    long = len(audio) > window
    chunked = chunking.vad if chunking.vad is not None else long
    speech, voiced = None, []
    if chunked or long:
        voiced, speech = _speech(audio, chunking, detector)
    if not chunked:
        file = File(path, audio, [], False, long, speech, voiced, chunking, detector)
        start = _speech_from(file, 0)
        # shorter than one frame of the voice-activity model holds no word, yet the model may write one
        # (decisions, "No text from audio shorter than a VAD frame")
        if start < len(audio) and len(audio) >= VAD_FRAME:
            file.windows.append(_window_at(file, index, start, window))
        return file
    chunks = plan_chunks(speech, window)
    # progress: each chunk counts from the end of the chunk before it (the first from 0, the last to the end)
    bounds = [0] + [a for a, _ in chunks[1:]] + [len(audio)]
    windows = [Window(index, a, audio[a:b], (bounds[i + 1] - bounds[i]) / SAMPLE_RATE)
               for i, (a, b) in enumerate(chunks)]
    return File(path, audio, windows, True, long, speech, voiced, chunking, detector)


def _speech(audio: np.ndarray, chunking: ChunkingOptions, detector: SpeechDetector
            ) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The speech the detector finds in a file (samples), and the same padded into the pauses."""
    voiced = detector.regions(audio, chunking.vad_options, chunking.chunk_length)
    return voiced, padded(voiced, chunking.vad_options.speech_pad, len(audio))


def silent(audio: np.ndarray) -> bool:
    return peak(audio) < SILENCE_PEAK


def end_floor(file: File, window: Window) -> float:
    """Seconds into a speech chunk its text runs to before it may end: END_SLACK_SECONDS before the end
    of the last speech the detector found in it. Whisper often ends its text seconds early in a chunk
    full of speech, and the rest would cost a window of its own. Windows one after another (--no-vad,
    for audio the detector misjudges) go on where the text stops instead: 0.0 (docs/decisions.md,
    "Long audio: VAD chunks")."""
    if not file.chunked:
        return 0.0
    end = window.start + len(window.audio)
    last = max((min(b, end) for a, b in file.voiced if a < end and b > window.start), default=window.start)
    return max(0.0, (last - window.start) / SAMPLE_RATE - END_SLACK_SECONDS)


def sparse(tokenizer: Tokenizer, window: Window, result: WindowResult) -> bool:
    """Whether a segment of the window lasts far longer than its tokens could be spoken in (see
    SPARSE_SECONDS): its words are then timed before follow reads it."""
    duration = len(window.audio) / SAMPLE_RATE
    return not result.no_speech and any(
        s.end - s.start > SPARSE_SECONDS + SPARSE_SECONDS_PER_TOKEN * len(s.tokens)
        for s in window_segments(result.tokens, tokenizer, duration, timestamps=True))


def follow(file: File, window: Window, tokenizer: Tokenizer, timestamps: bool, chunk: int,
           loop_ratio: float | None, keep_words: bool) -> tuple[list[Segment], list[Window]]:
    """A decoded window (its result, and its words where timed) -> the segments its file keeps, on
    the file's timeline, and the windows that go on after it (chunk: a window's samples). Its
    segments are parsed once: where they skip speech (segments.skipped_stretch) or leave the end of
    the audio undecoded (_resume_at), decoding goes on from there; in a speech chunk over the rest of
    the chunk, in windows one after another in the next window (which starts in a pause). Sets
    window.kept (and new_seconds for windows one after another)."""
    result, duration = window.result, len(window.audio) / SAMPLE_RATE
    segments = [] if result.no_speech else window_segments(result.tokens, tokenizer, duration, timestamps, window.words)
    skipped = None
    if window.words and file.voiced:  # speech the text skipped, where its words are timed and the detector ran
        skipped = skipped_stretch(segments, file.voiced, window.start, len(window.audio))
    resume = skipped[0] if skipped else _resume_at(segments, tokenizer, window, file) if timestamps else None
    if resume is not None:
        window.kept = resume / SAMPLE_RATE
    if file.chunked:
        cuts = list(skipped) if skipped else [] if resume is None else [resume]
        following = [Window(window.file, window.start + a, window.audio[a:b], 0.0, language=result.language, checked=True)
                     for a, b in zip(cuts, [*cuts[1:], len(window.audio)])]
    else:  # the next window starts where this one's text stopped, and ends before speech it skipped
        if resume is not None and window.closed_end is not None and not skipped:
            resume = _pause_before(file, window, resume)
            window.kept = resume / SAMPLE_RATE
        start = _speech_from(file, window.start + (len(window.audio) if resume is None else resume))
        length = window.start + skipped[1] - start if skipped and window.start + skipped[1] > start else chunk
        following = [_window_at(file, window.file, start, length)] if start < len(file.audio) else []
        window.new_seconds, file.counted = (start - file.counted) / SAMPLE_RATE, start
        if following and not file.detects:  # what follows is in the language found here
            following[0].language = result.language
    return _kept_segments(segments, window, file, loop_ratio, keep_words), following


def _resume_at(segments: list[Segment], tokenizer: Tokenizer, window: Window, file: File) -> int | None:
    """Where in a window's audio (samples) decoding has to go on, as openai-whisper seeks: at the
    start of a last segment the text leaves open (cut off by the window's end; dropped here, decoded
    whole in the next window; window.closed_end set), or where its text ends (its last segment's, or
    where timed, its last word's end) when that is TAIL_SECONDS or more before the end of the audio.
    Only where sound follows, and where the detector ran, speech: more than END_SLACK_SECONDS of it
    in a speech chunk (what its text may leave, end_floor), TAIL_SECONDS / 2 in windows one after
    another. None: the window's text covers it."""
    result, special = window.result, tokenizer.special
    if result.no_speech or not result.tokens:
        return None
    duration = len(window.audio) / SAMPLE_RATE
    text = [t for t in result.tokens if t != special.eot]
    text_end = window.words[-1].end if window.words else segments[-1].end if segments else 0.0
    if len(segments) > 1 and text and text[-1] < special.timestamp_begin:  # last one open
        resume, window.closed_end = segments[-1].start, segments[-2].end
    elif segments and duration - text_end >= TAIL_SECONDS:
        resume = text_end
    else:
        return None
    offset = round(resume * SAMPLE_RATE)
    if not 0 < offset < len(window.audio) or silent(window.audio[offset:]):
        return None
    rest = (window.start + offset, window.start + len(window.audio))
    if file.speech is not None and speech_within(file.voiced, *rest) <= (
            END_SLACK_SECONDS if file.chunked else TAIL_SECONDS / 2) * SAMPLE_RATE:
        return None
    return offset


def _kept_segments(segments: list[Segment], window: Window, file: File, loop_ratio: float | None,
                   keep_words: bool) -> list[Segment]:
    """A decoded window's segments as its file's transcript keeps them, on the file's timeline: those
    before where decoding goes on (window.kept), each ending by the end of its last word where timed,
    each once where the text loops, none in a pause the detector found."""
    result, offset = window.result, window.start / SAMPLE_RATE
    kept = [s for s in segments if window.kept is None or s.start < window.kept]
    if loop_ratio is not None and result.compression_ratio > loop_ratio:
        kept = once_each(kept)
    for segment in kept:
        if segment.words:
            segment.end = max(min(segment.end, segment.words[-1].end), segment.start)
        segment.start, segment.end = offset + segment.start, offset + segment.end
        segment.language, segment.temperature, segment.avg_logprob = result.language, result.temperature, result.avg_logprob
        segment.compression_ratio, segment.no_speech_prob = result.compression_ratio, result.no_speech_prob
        for word in segment.words:
            word.start, word.end = offset + word.start, offset + word.end
    if kept and file.speech is None and file.chunking.vad is not False and _doubtful(result, window):
        file.voiced, file.speech = _speech(file.audio, file.chunking, file.detector)
    if file.speech is not None:
        kept = keep_to_speech(kept, file.speech, file.voiced)
    if not keep_words:  # timed only to place the segments (sparse)
        for segment in kept:
            segment.words = []
    return kept


def _doubtful(result: WindowResult, window: Window) -> bool:
    """Whether a short file's text is worth checking against the speech detector (which long files
    always run, and --no-vad never): the main model gave <|nospeech|> DOUBT_NO_SPEECH or more, or doubted its text
    (average log-probability under DOUBT_LOGPROB), or the audio is under DOUBT_SECONDS. Decisions, "No
    text where nobody speaks"."""
    return ((result.no_speech_prob is not None and result.no_speech_prob >= DOUBT_NO_SPEECH)
            or (result.avg_logprob is not None and result.avg_logprob < DOUBT_LOGPROB)
            or len(window.audio) < DOUBT_SECONDS * SAMPLE_RATE)


def _window_at(file: File, index: int, start: int, length: int) -> Window:
    """A window of a file decoded window after window, from start: at most length samples, ending
    where the detector's last speech in it does (a quiet stretch after it is not decoded), or where
    that is inside speech, in the middle of its last pause within 5 * PAUSE_SNAP_SECONDS of its end."""
    end = min(start + length, len(file.audio))
    if file.speech is not None:
        end = min(end, max((b for a, b in file.speech if a < end), default=end))
    if any(a < end < b for a, b in file.voiced):  # inside speech: end in a pause
        reach = round(5 * PAUSE_SNAP_SECONDS * SAMPLE_RATE)
        middles = [(a + b) // 2 for a, b in _pauses(file) if end - reach <= (a + b) // 2 < end]
        end = middles[-1] if middles and middles[-1] > start else end
    return Window(index, start, file.audio[start:end], (end - start) / SAMPLE_RATE)


def _speech_from(file: File, start: int) -> int:
    """Where the next window of a file decoded window after window starts: at start, or where the
    detector next hears speech if start is in a pause (the end of the audio if none follows), so no
    window is spent on a quiet stretch."""
    if file.speech is None:
        return start
    return next((max(start, a) for a, b in file.speech if b > start), len(file.audio))


def _pauses(file: File) -> list[tuple[int, int]]:
    return [(a[1], b[0]) for a, b in zip(file.voiced, file.voiced[1:])]


def _pause_before(file: File, window: Window, resume: int) -> int:
    """Where a window decoded window after window resumes, for a last segment it cut off: in the
    middle of a pause the detector found up to PAUSE_SNAP_SECONDS before that segment's start and after
    the kept text, where there is one: Whisper's segment starts are coarse, and a window that starts
    inside a word loses it."""
    offset = window.start
    at, reach = offset + resume, round(PAUSE_SNAP_SECONDS * SAMPLE_RATE)
    floor = offset + round(window.closed_end * SAMPLE_RATE)  # the kept text's end: no word twice
    middles = [(a + b) // 2 for a, b in _pauses(file) if a <= at and b >= at - reach and (a + b) // 2 >= floor]
    return min(resume, middles[-1] - offset) if middles and middles[-1] > offset else resume
