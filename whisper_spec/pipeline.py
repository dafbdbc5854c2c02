"""Files -> windows (speech chunks, or windows one after another) -> batched speculative decoding -> segments.

A file longer than one window is cut one of two ways (ChunkingOptions.vad). With voice activity
(the default for long audio), its speech is found once (vad.py) and grouped into chunks of at most
one window, cut at pauses: nothing is decoded before, between or after them, the chunks of a file
decode together, and a chunk's text is held open to the end of its speech. Without, windows follow
one another as in openai-whisper: each starts where the text of the one before it stopped, so no
speech falls between two windows. Windows of all files go through the decoder in batches. Windows
judged silent (the no-speech rule) give no text; a window's sampling seed is a hash of its samples,
so a window decoded again at a higher temperature (decoding.decode_encoded) samples alike in any
batch or file, and one whose text loops at every temperature keeps each of its segments once. Word
timestamps are read from the main decoder right after each batch, and kept out of the pauses the
voice activity detector found.
"""

from __future__ import annotations

import time
import zlib
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import torch

from .audio import SAMPLE_RATE, SILENCE_PEAK, AudioError, load_audio, peak
from .chunk_languages import LANGUAGE_SURE, PIECE_SURE, language_parts, own_or_file, speech_pieces
from .decoding import decode_encoded, encode_batch
from .encoding import (Encoded, cross_language_probabilities, encoder_states, most_likely, pair_features,
                       states_language_probabilities)
from .options import BATCH_SIZE, ChunkingOptions, DecodingOptions
from .pair import WhisperPair
from .platform import synchronize
from .results import WindowResult
from .segments import END_SLACK_SECONDS, TAIL_SECONDS, Segment, keep_to_speech, once_each, skipped_stretch, window_segments
from .stats import DecodingStats
from .timing import Word, word_timings
from .vad import VAD_FRAME, padded, plan_chunks, speech_regions, speech_within

# Whisper sometimes closes a segment far later than its words end, skipping speech after them: a
# segment longer than this many seconds plus SPARSE_SECONDS_PER_TOKEN for each of its tokens has its
# window's words timed, and where the words end is where the text ends (docs/decisions.md, "Long audio").
SPARSE_SECONDS = 3.0
SPARSE_SECONDS_PER_TOKEN = 0.5

# Windows one after another start and end in pauses: a window edge inside a word loses the word. A
# window resumed for a cut-off segment starts in a pause up to this many seconds before it, and a
# window ends in a pause within five times this of its end (_pause_before, _window_at).
PAUSE_SNAP_SECONDS = 1.0

# A long file's language is detected on its first window with sound; where that window gives its
# likeliest language less than LANGUAGE_SURE, the first LANGUAGE_WINDOWS windows of its speech decide
# together (_file_language; docs/decisions.md, "One language a file").
LANGUAGE_WINDOWS = 4

# a short file's text is checked against the speech detector where the main model gave <|nospeech|> at
# least this probability, or its tokens an average log-probability under this, or the audio is shorter
# (decisions, "No text where nobody speaks")
DOUBT_NO_SPEECH = 0.2
DOUBT_LOGPROB = -0.8
DOUBT_SECONDS = 1.0


@dataclass
class Transcript:
    path: str
    text: str
    language: str | None
    duration: float  # seconds of audio
    segments: list[Segment]
    stats: DecodingStats = field(default_factory=DecodingStats)
    language_probability: float | None = None  # where the language was detected: its probability (detect_language)

    def as_dict(self) -> dict:
        """Times in seconds to the millisecond (a timestamp token is 20 ms); a segment's window's
        decoding figures where they were computed, and its language where not the transcript's."""
        def segment(s: Segment) -> dict:
            scores = {"temperature": s.temperature, "avg_logprob": s.avg_logprob,
                      "compression_ratio": s.compression_ratio, "no_speech_prob": s.no_speech_prob}
            return ({"start": round(s.start, 3), "end": round(s.end, 3), "text": s.text}
                    | ({"language": s.language} if s.language not in (None, self.language) else {})
                    | {name: round(value, 4) for name, value in scores.items() if value is not None}
                    | ({"words": [w.as_dict() for w in s.words]} if s.words else {}))

        return {
            "path": self.path,
            "text": self.text,
            "language": self.language,
            **({"language_probability": round(self.language_probability, 4)} if self.language_probability is not None else {}),
            "duration": round(self.duration, 3),
            "segments": [segment(s) for s in self.segments],
            "stats": self.stats.as_dict(),
        }


@dataclass
class Failure:
    path: str
    error: str  # one line naming the file and the problem


@dataclass(frozen=True)
class _Kind:
    """What the windows of a batch share: the timestamp mode and the prompt (DecodingOptions)."""

    timestamps: bool
    prompt: str | tuple[int, ...] | None


@dataclass(eq=False)  # a window is itself: two can share a start (_skipped)
class _Window:
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
    language: str | None = None  # what it is decoded in, once decided (_Job.decide_languages); None: its file's
    likeliest: tuple[str, float] | None = None  # its own likeliest language and its probability, where detected
    checked: bool = False  # of one language: its pieces were detected, or it continues a decoded window


@dataclass
class _File:
    path: str
    audio: np.ndarray
    windows: list[_Window]
    chunked: bool  # speech chunks rather than windows one after another
    long: bool  # longer than one window: one language for the whole file, and timestamps
    speech: list[tuple[int, int]] | None  # samples the voice activity detector found (padded), where it ran
    voiced: list[tuple[int, int]] = field(default_factory=list)  # the same, unpadded
    chunking: ChunkingOptions = ChunkingOptions()  # the detector's settings, where it runs after decoding (_doubtful)
    counted: int = 0  # samples reported to on_window, of a file decoded window after window
    announced: int = 0  # windows whose segments went to on_segments
    language_probability: float | None = None  # where its language was detected once for the whole file
    detects: bool = False  # its chunks are decoded in their own language where sure (chunk_languages)
    detection_seconds: float = 0.0  # its language detections' (the file's, chunks' own), counted as encoder seconds

    @property
    def duration(self) -> float:
        return len(self.audio) / SAMPLE_RATE


def transcribe(
    pair: WhisperPair,
    paths: Iterable[str | Path],
    options: DecodingOptions = DecodingOptions(),
    *,
    batch_size: int = BATCH_SIZE,
    chunking: ChunkingOptions = ChunkingOptions(),
    languages: dict[str, str] | None = None,
    prompts: dict[str, str] | None = None,
    on_window=None,
    on_segments=None,
    load=load_audio,
) -> Iterator[Transcript | Failure]:
    """Transcribe files in order, batching windows across files; yields one result per file.

    A file that cannot be read yields a Failure and the others go on. languages maps a path to
    its language, overriding options.language; a file longer than one window with no language gets
    the language detected on its first window. prompts maps a path to the prompt its windows read,
    overriding options.prompt. A file longer than one window is always decoded with timestamps:
    without them Whisper tends to stop early in a long window, and segments need times.
    on_window(seconds) is called as windows finish, with the seconds of the file's audio each one
    adds (a pause counted with the window after it), so they add up to the file's duration.
    on_segments(path, segments) is called with a file's segments as they become final, in order
    (those of a window once every earlier window of the file is decoded): a long file's text as it
    is decoded, the same Segment objects its Transcript holds.
    load(path): the file's 16 kHz samples, raising AudioError (audio decoded elsewhere, as on Ray).
    """
    job = _Job(pair, [str(p) for p in paths], options, batch_size, chunking, dict(languages or {}), dict(prompts or {}),
               on_window, on_segments)
    for index, path in enumerate(job.paths):
        try:
            audio = load(path)
            language = pair.main.special.language_code(job.languages.get(path, options.language))
        except (AudioError, ValueError) as error:
            job.done[index] = Failure(path, str(error) if isinstance(error, AudioError) else f"{path}: {error}")
            yield from job.ready()
            continue
        kind = job.add(index, path, audio, language)
        yield from job.ready()
        # each result is handed on as soon as it is next in order: a later batch's failure loses none
        while len(job.pending.get(kind, ())) >= batch_size:
            job.flush(kind)
            yield from job.ready()
    while job.pending:
        job.flush(next(iter(job.pending)))
    yield from job.ready()


class _Job:
    """transcribe's state: windows waiting for a batch (by kind: a batch has one timestamp mode and
    one prompt), files being decoded, and finished results held until every earlier file's has been yielded."""

    def __init__(self, pair: WhisperPair, paths: list[str], options: DecodingOptions, batch_size: int,
                 chunking: ChunkingOptions, languages: dict[str, str], prompts: dict[str, str], on_window, on_segments):
        self.pair, self.paths, self.options, self.batch_size = pair, paths, options, batch_size
        self.chunking, self.languages, self.prompts = chunking, languages, prompts
        self.on_window, self.on_segments = on_window, on_segments
        self.chunk = int(chunking.chunk_length * SAMPLE_RATE)
        self.pending: dict[_Kind, list[_Window]] = {}
        self.files: dict[int, _File] = {}
        self.done: dict[int, Transcript | Failure] = {}
        self.next_to_yield = 0

    def add(self, index: int, path: str, audio: np.ndarray, language: str | None) -> _Kind:
        """Plan a readable file's windows and queue them; returns their kind."""
        pair, options = self.pair, self.options
        file = self.files[index] = _plan(index, path, audio, self.chunking)
        sound = [w for w in file.windows if not _silent(w.audio)]
        if language is not None:
            self.languages[path] = language
        elif file.long and pair.main.special.multilingual and sound:
            # the file's language, where a chunk is not sure of its own: windows decoded apart could disagree
            file.detects = True
            synchronize(pair.device)
            start = time.perf_counter()
            self.languages[path], file.language_probability = _file_language(pair, file, sound[0], self.chunk,
                                                                              options.language_candidates)
            synchronize(pair.device)
            file.detection_seconds = time.perf_counter() - start
        kind = _Kind(options.timestamps or file.long, self.prompts.get(path, options.prompt))
        if not file.windows:  # no speech at all
            if self.on_window is not None:
                self.on_window(file.duration)
            self.done[index] = _assemble(pair, self.files.pop(index))
        for window in list(file.windows):
            self.queue(window, kind)
        return kind

    def queue(self, window: _Window, kind: _Kind) -> None:
        """Queue a window for decoding; a silent one is finished at once, with no text."""
        if _silent(window.audio):
            self.finish(window, WindowResult([], None, False, DecodingStats(windows=1)), kind)
        else:
            self.pending.setdefault(kind, []).append(window)

    def flush(self, kind: _Kind) -> None:
        """Decode the next batch of windows of this kind."""
        pair, options, timestamps = self.pair, self.options, kind.timestamps
        batch = self.pending[kind][: self.batch_size]
        del self.pending[kind][: self.batch_size]
        if not self.pending[kind]:
            del self.pending[kind]
        mel, assistant_mel = pair_features(pair, [w.audio for w in batch])
        encoded, stats = encode_batch(pair, mel, options, assistant_mel, [w.states for w in batch])
        for window in batch:
            window.states = None
        if any(self.files[w.file].detects and w.language is None for w in batch):
            keep = self.decide_languages(batch, encoded, kind)
            if len(keep) < len(batch):  # those cut into parts of one language are queued again
                batch, encoded, stats.windows = [batch[i] for i in keep], encoded.rows(keep), len(keep)
                if not batch:
                    return
        langs = [w.language or self.languages.get(self.paths[w.file], options.language) for w in batch]
        out, _ = decode_encoded(pair, encoded, replace(options, timestamps=timestamps, prompt=kind.prompt), languages=langs,
                                seeds=[zlib.crc32(np.ascontiguousarray(w.audio)) for w in batch], stats=stats,
                                end_floors=[_end_floor(self.files[w.file], w) for w in batch])
        for row, (window, result) in enumerate(zip(batch, out)):  # timed where its own result asks for it
            if options.word_timestamps or (timestamps and _sparse(pair, window, result)):
                window.words = word_timings(pair.main, [(k[row : row + 1], v[row : row + 1]) for k, v in encoded.main],
                                            result.tokens, result.language, options.task, len(window.audio))
        for window, result in zip(batch, out):
            self.finish(window, result, kind)

    def decide_languages(self, batch: list[_Window], encoded: Encoded, kind: _Kind) -> list[int]:
        """The language of each window of the batch whose file detects its chunks' own: its likeliest
        where sure, else its file's (chunk_languages). A speech chunk at a change of language (its own
        language or a neighbour's is another) is checked piece by piece, and where its pieces are in
        more than one language, it is cut into parts of one language, queued in its place. Returns the
        rows to decode now. What decides a window is its own audio and its neighbours': never its batch."""
        rows = [i for i, w in enumerate(batch) if self.files[w.file].detects and w.language is None]
        cross = encoded.main if len(rows) == len(batch) else encoded.rows(rows).main  # rows: copies
        codes, probabilities = cross_language_probabilities(self.pair.main, cross, self.options.language_candidates)
        for i, likeliest, probability in zip(rows, *most_likely(codes, probabilities)):
            batch[i].likeliest = likeliest, probability
        keep = []
        for i, window in enumerate(batch):
            if i in rows:
                file = self.files[window.file]
                window.language = self.chunk_language(file, window)
                if file.chunked and not window.checked and self.at_a_change(file, window):
                    parts = self.cut_by_language(file, window)
                    if len(parts) > 1:
                        at = file.windows.index(window)
                        file.windows[at : at + 1] = parts
                        for part in parts:
                            self.queue(part, kind)
                        continue
            keep.append(i)
        return keep

    def chunk_language(self, file: _File, window: _Window) -> str:
        """What a window is decoded in: decided, else its likeliest where sure (detected on its own
        encoder states, made where missing), else its file's."""
        if window.language is not None:
            return window.language
        if window.likeliest is None:
            (window.likeliest,) = self.detect(file, [window])
        return own_or_file(*window.likeliest, self.languages[file.path])

    def detect(self, file: _File, windows: list[_Window]) -> list[tuple[str, float]]:
        """Each window's likeliest language and its probability, each encoded alone and keeping its
        encoder states (_encoded_language); the seconds count with the file's encoder seconds."""
        synchronize(self.pair.device)
        start = time.perf_counter()
        found = list(zip(*most_likely(*_encoded_language(self.pair, windows, self.options.language_candidates))))
        synchronize(self.pair.device)
        file.detection_seconds += time.perf_counter() - start
        return found

    def at_a_change(self, file: _File, window: _Window) -> bool:
        """Whether a speech chunk's language is not that of a neighbouring chunk with sound (the file's
        before the first): where the language changes. The chunk after it is detected now where it is
        not in this batch, its encoder states kept for its own."""
        sound = [w for w in file.windows if w.language is not None or w.result is None]  # not judged silent
        at = sound.index(window)
        before = self.chunk_language(file, sound[at - 1]) if at > 0 else self.languages[file.path]
        after = [self.chunk_language(file, w) for w in sound[at + 1 : at + 2]]
        return any(language != window.language for language in [before, *after])

    def cut_by_language(self, file: _File, window: _Window) -> list[_Window]:
        """A speech chunk as parts of one language (chunk_languages.language_parts): its pieces each
        encoded and detected alone, a piece in its own likeliest language where PIECE_SURE, else in the
        chunk's. One part: the chunk itself, its language the pieces'. A part that is one piece keeps
        that piece's encoder states."""
        end = window.start + len(window.audio)
        pieces = speech_pieces(file.voiced, window.start, end)
        window.checked = True
        if len(pieces) < 2:
            return [window]
        sliced = [_Window(window.file, a, file.audio[a:b], 0.0) for a, b in pieces]
        languages = [own_or_file(likeliest, probability, window.language, PIECE_SURE)
                     for likeliest, probability in self.detect(file, sliced)]
        parts = language_parts(pieces, languages, window.start, end)
        if len(parts) == 1:
            window.language = parts[0][2]
            return [window]
        states = {(p.start, p.start + len(p.audio)): p.states for p in sliced}
        cut = [_Window(window.file, a, file.audio[a:b], (b - a) / SAMPLE_RATE, language=language, checked=True,
                       states=states.get((a, b))) for a, b, language in parts]
        cut[0].new_seconds = window.new_seconds - sum(p.new_seconds for p in cut[1:])
        return cut

    def finish(self, window: _Window, result: WindowResult, kind: _Kind) -> None:
        """Record a window's result; queue the windows that continue its file, or assemble the file."""
        window.result = result
        timestamps = kind.timestamps
        file = self.files[window.file]
        skipped = _skipped(self.pair, window, file)
        resume = skipped[0] if skipped else _resume_at(self.pair, window, file) if timestamps else None
        if resume is not None:
            window.kept = resume / SAMPLE_RATE
        following = []
        if file.chunked:
            cuts = list(skipped) if skipped else [] if resume is None else [resume]
            following = [_Window(window.file, window.start + a, window.audio[a:b], 0.0, language=result.language,
                                 checked=True) for a, b in zip(cuts, [*cuts[1:], len(window.audio)])]
        else:  # the next window starts where this one's text stopped, and ends before speech it skipped
            if resume is not None and window.closed_end is not None and not skipped:
                resume = _pause_before(file, window, resume)
                window.kept = resume / SAMPLE_RATE
            start = _speech_from(file, window.start + (len(window.audio) if resume is None else resume))
            length = self.chunk
            if skipped and window.start + skipped[1] > start:
                length = window.start + skipped[1] - start
            following = [_window_at(file, window.file, start, length)] if start < len(file.audio) else []
            window.new_seconds, file.counted = (start - file.counted) / SAMPLE_RATE, start
            if following and not file.detects:  # what follows is in the language found here
                following[0].language = result.language
        window.segments = _kept_segments(self.pair, window, file, timestamps, self.options.compression_ratio_threshold,
                                         self.options.word_timestamps)
        if self.on_window is not None:
            self.on_window(window.new_seconds)
        self.announce(file)
        if following:
            at = file.windows.index(window) + 1
            file.windows[at:at] = following
            for next_window in following:
                self.queue(next_window, kind)
        elif all(w.result is not None for w in file.windows):
            self.done[window.file] = _assemble(self.pair, self.files.pop(window.file))

    def announce(self, file: _File) -> None:
        """Hand on_segments the segments of the file's decoded windows that no undecoded one precedes
        (the windows a decoded one leads to are placed right after it, never before)."""
        while file.announced < len(file.windows) and file.windows[file.announced].segments is not None:
            segments = file.windows[file.announced].segments
            file.announced += 1
            if segments and self.on_segments is not None:
                self.on_segments(file.path, segments)

    def ready(self) -> Iterator[Transcript | Failure]:
        """The finished results that are next in order."""
        while self.next_to_yield in self.done:
            yield self.done.pop(self.next_to_yield)
            self.next_to_yield += 1


def _window_at(file: _File, index: int, start: int, length: int) -> _Window:
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
    return _Window(index, start, file.audio[start:end], (end - start) / SAMPLE_RATE)


def _plan(index: int, path: str, audio: np.ndarray, chunking: ChunkingOptions) -> _File:
    """A file's first windows: its speech chunks where chunking.vad says so (by default for audio
    longer than a window), else the window at its start (the next ones follow as it is decoded).
    The voice activity is found for long audio in either mode: it also keeps text and word times
    out of pauses (segments.keep_to_speech)."""
    window = int(chunking.chunk_length * SAMPLE_RATE)
    long = len(audio) > window
    chunked = chunking.vad if chunking.vad is not None else long
    speech, voiced = None, []
    if chunked or long:
        voiced = speech_regions(audio, chunking.vad_options, chunking.chunk_length)
        speech = padded(voiced, chunking.vad_options.speech_pad, len(audio))
    if not chunked:
        file = _File(path, audio, [], False, long, speech, voiced, chunking)
        start = _speech_from(file, 0)
        # shorter than one frame of the voice-activity model holds no word, yet the model may write one
        # (decisions, "No text from audio shorter than a VAD frame")
        if start < len(audio) and len(audio) >= VAD_FRAME:
            file.windows.append(_window_at(file, index, start, window))
        return file
    chunks = plan_chunks(speech, window)
    # progress: each chunk counts from the end of the chunk before it (the first from 0, the last to the end)
    bounds = [0] + [a for a, _ in chunks[1:]] + [len(audio)]
    windows = [_Window(index, a, audio[a:b], (bounds[i + 1] - bounds[i]) / SAMPLE_RATE)
               for i, (a, b) in enumerate(chunks)]
    return _File(path, audio, windows, True, long, speech, voiced, chunking)


def _speech_from(file: _File, start: int) -> int:
    """Where the next window of a file decoded window after window starts: at start, or where the
    detector next hears speech if start is in a pause (the end of the audio if none follows), so no
    window is spent on a quiet stretch."""
    if file.speech is None:
        return start
    return next((max(start, a) for a, b in file.speech if b > start), len(file.audio))


def _pauses(file: _File) -> list[tuple[int, int]]:
    return [(a[1], b[0]) for a, b in zip(file.voiced, file.voiced[1:])]


def _pause_before(file: _File, window: _Window, resume: int) -> int:
    """Where a window decoded window after window resumes, for a last segment it cut off: in the
    middle of a pause the detector found up to PAUSE_SNAP_SECONDS before that segment's start and after
    the kept text, where there is one: Whisper's segment starts are coarse, and a window that starts
    inside a word loses it."""
    offset = window.start
    at, reach = offset + resume, round(PAUSE_SNAP_SECONDS * SAMPLE_RATE)
    floor = offset + round(window.closed_end * SAMPLE_RATE)  # the kept text's end: no word twice
    middles = [(a + b) // 2 for a, b in _pauses(file) if a <= at and b >= at - reach and (a + b) // 2 >= floor]
    return min(resume, middles[-1] - offset) if middles and middles[-1] > offset else resume


def _end_floor(file: _File, window: _Window) -> float:
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


def _silent(audio: np.ndarray) -> bool:
    return peak(audio) < SILENCE_PEAK


def _window_segments(pair: WhisperPair, window: _Window, timestamps: bool) -> list[Segment]:
    """A window's segments on its own timeline, those it keeps (_resume_at), each ending by the end
    of its last word where its words are timed."""
    duration = len(window.audio) / SAMPLE_RATE
    segments = window_segments(window.result.tokens, pair.main.tokenizer, duration, timestamps, window.words)
    for segment in segments:
        if segment.words:
            segment.end = max(min(segment.end, segment.words[-1].end), segment.start)
    return [s for s in segments if window.kept is None or s.start < window.kept]


def _sparse(pair: WhisperPair, window: _Window, result: WindowResult) -> bool:
    """Whether a segment of the window lasts far longer than its tokens could be spoken in (see SPARSE_SECONDS)."""
    duration = len(window.audio) / SAMPLE_RATE
    return not result.no_speech and any(
        s.end - s.start > SPARSE_SECONDS + SPARSE_SECONDS_PER_TOKEN * len(s.tokens)
        for s in window_segments(result.tokens, pair.main.tokenizer, duration, timestamps=True))


def _resume_at(pair: WhisperPair, window: _Window, file: _File) -> int | None:
    """Where in a window's audio (samples) decoding has to go on, as openai-whisper seeks: at the
    start of a last segment the text leaves open (cut off by the window's end; dropped here, decoded
    whole in the next window), or where its text ends (its last segment's, or where timed, its last
    word's end) when that is TAIL_SECONDS or more before the end of the audio. Only where sound
    follows, and where the detector ran, speech: more than END_SLACK_SECONDS of it in a speech chunk
    (what its text may leave, _end_floor), TAIL_SECONDS / 2 in windows one after another. None: the
    window's text covers it."""
    result = window.result
    if result.no_speech or not result.tokens:
        return None
    duration = len(window.audio) / SAMPLE_RATE
    segments = window_segments(result.tokens, pair.main.tokenizer, duration, timestamps=True)
    text = [t for t in result.tokens if t != pair.main.special.eot]
    text_end = window.words[-1].end if window.words else segments[-1].end if segments else 0.0
    if len(segments) > 1 and text and text[-1] < pair.main.special.timestamp_begin:  # last one open
        resume, window.closed_end = segments[-1].start, segments[-2].end
    elif segments and duration - text_end >= TAIL_SECONDS:
        resume = text_end
    else:
        return None
    offset = round(resume * SAMPLE_RATE)
    if not 0 < offset < len(window.audio) or _silent(window.audio[offset:]):
        return None
    rest = (window.start + offset, window.start + len(window.audio))
    if file.speech is not None and speech_within(file.voiced, *rest) <= (
            END_SLACK_SECONDS if file.chunked else TAIL_SECONDS / 2) * SAMPLE_RATE:
        return None
    return offset


def _skipped(pair: WhisperPair, window: _Window, file: _File) -> tuple[int, int] | None:
    """Speech a window's text skipped (see segments.SKIP_SECONDS), where its words are timed and the detector ran."""
    if window.result.no_speech or not window.words or not file.voiced:
        return None
    segments = window_segments(window.result.tokens, pair.main.tokenizer, len(window.audio) / SAMPLE_RATE, True,
                               window.words)
    return skipped_stretch(segments, file.voiced, window.start, len(window.audio))


@torch.inference_mode()
def _file_language(pair: WhisperPair, file: _File, first: _Window, chunk: int,
                   candidates: tuple[str, ...] | None) -> tuple[str, float]:
    """A long file's one language and its probability: its first window with sound's most likely,
    unless that is less than LANGUAGE_SURE probable; then the most probable on average over that
    window and the speech chunks after it, LANGUAGE_WINDOWS in all (a short or unclear opening does
    not decide alone what language an hour is decoded in). The windows it encodes keep their
    encoder states for their batch (_Window.states): no window is encoded twice."""
    codes, probabilities = _encoded_language(pair, [first], candidates)
    if probabilities.max() < LANGUAGE_SURE:
        after = first.start + len(first.audio)
        more = ([w for w in file.windows if w.start >= after] if file.chunked else
                [_Window(first.file, a, file.audio[a:b], 0.0) for a, b in plan_chunks(file.speech, chunk) if a >= after])
        more = [w for w in more if not _silent(w.audio)][: LANGUAGE_WINDOWS - 1]
        if more:
            probabilities = torch.cat([probabilities, _encoded_language(pair, more, candidates)[1]]).mean(dim=0, keepdim=True)
    (language,), (probability,) = most_likely(codes, probabilities)
    return language, probability


def _encoded_language(pair: WhisperPair, windows: list[_Window], candidates: tuple[str, ...] | None
                      ) -> tuple[list[str], torch.Tensor]:
    """states_language_probabilities of the windows, each keeping its main encoder states."""
    states = encoder_states(pair.main, pair_features(pair, [w.audio for w in windows])[0])
    for window, row in zip(windows, states.split(1)):
        window.states = row
    return states_language_probabilities(pair, states, candidates)


def _kept_segments(pair: WhisperPair, window: _Window, file: _File, timestamps: bool, loop_ratio: float | None,
                   keep_words: bool) -> list[Segment]:
    """A decoded window's segments as its file's transcript keeps them, on the file's timeline."""
    result = window.result
    kept = [] if result.no_speech else _window_segments(pair, window, timestamps)
    if loop_ratio is not None and result.compression_ratio > loop_ratio:
        kept = once_each(kept)
    offset = window.start / SAMPLE_RATE
    for segment in kept:
        segment.start, segment.end = offset + segment.start, offset + segment.end
        segment.language, segment.temperature, segment.avg_logprob = result.language, result.temperature, result.avg_logprob
        segment.compression_ratio, segment.no_speech_prob = result.compression_ratio, result.no_speech_prob
        for word in segment.words:
            word.start, word.end = offset + word.start, offset + word.end
    if kept and file.speech is None and file.chunking.vad is not False and _doubtful(result, window):
        file.voiced = speech_regions(file.audio, file.chunking.vad_options, file.chunking.chunk_length)
        file.speech = padded(file.voiced, file.chunking.vad_options.speech_pad, len(file.audio))
    if file.speech is not None:
        kept = keep_to_speech(kept, file.speech, file.voiced)
    if not keep_words:  # timed only to place the segments (_sparse)
        for segment in kept:
            segment.words = []
    return kept


def _doubtful(result: WindowResult, window: _Window) -> bool:
    """Whether a short file's text is worth checking against the speech detector (which long files
    always run, and --no-vad never): the main model gave <|nospeech|> DOUBT_NO_SPEECH or more, or doubted its text
    (average log-probability under DOUBT_LOGPROB), or the audio is under DOUBT_SECONDS. Decisions, "No
    text where nobody speaks"."""
    return ((result.no_speech_prob is not None and result.no_speech_prob >= DOUBT_NO_SPEECH)
            or (result.avg_logprob is not None and result.avg_logprob < DOUBT_LOGPROB)
            or len(window.audio) < DOUBT_SECONDS * SAMPLE_RATE)


def _assemble(pair: WhisperPair, file: _File) -> Transcript:
    """A file's windows' kept segments, in order, as one transcript."""
    tokenizer = pair.main.tokenizer
    segments = [segment for window in file.windows for segment in window.segments]
    full_text = tokenizer.decode([t for s in segments for t in s.tokens]).strip()
    languages = Counter(w.result.language for w in file.windows if w.result.language)
    language = languages.most_common(1)[0][0] if languages else None
    probability = file.language_probability
    if probability is None:  # detected on a window: the first that found the file's language
        probability = next((w.result.language_probability for w in file.windows
                            if w.result.language == language and w.result.language_probability is not None), None)
    if not segments and probability is not None:  # a language detected where nobody speaks is noise's ("nn")
        language = probability = None
    stats = DecodingStats(audio_seconds=sum(len(w.audio) for w in file.windows) / SAMPLE_RATE,
                          encoder_seconds=file.detection_seconds)
    for window in file.windows:
        stats.add(window.result.stats)
    return Transcript(file.path, full_text, language, file.duration, segments, stats, probability)
