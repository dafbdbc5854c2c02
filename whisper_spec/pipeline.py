"""Files -> overlapping windows -> batched speculative decoding -> stitched segments.

Audio longer than one window is cut into windows that overlap by `overlap` seconds. Windows of
all files go through the decoder in batches (across windows of one file and across files), and
each file's windows are stitched back into one transcript: consecutive windows are aligned on
the tokens they share in the overlap and cut in the middle of the agreeing stretch, so the words
at a seam appear once. Segment times are on the file's own timeline. Windows judged silent (the
no-speech rule) give no text; a window's sampling seed is a hash of its samples, so a window decoded
again at a higher temperature (decoding.decode_encoded) samples alike in any batch or file, and one
whose text loops at every temperature keeps each of its segments once; a file
whose last window's text ends early gets its rest decoded again (TAIL_SECONDS); word timestamps
are read from the main decoder right after each batch.
"""

from __future__ import annotations

import zlib
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from .audio import SAMPLE_RATE, AudioError, load_audio
from .decoding import WindowResult, decode_windows
from .encoding import detect_languages, pair_features
from .options import BATCH_SIZE, ChunkingOptions, DecodingOptions
from .pair import WhisperPair
from .stats import DecodingStats
from .stitch import Segment, stitch, window_segments
from .timing import Word, word_timings

# A window whose every sample lies below -80 dBFS is digital silence (padding, a muted input): it
# is not even decoded. Quieter rooms and noise are judged by Whisper's no-speech rule (DecodingOptions).
SILENCE_PEAK = 1e-4

# Whisper often ends a window's text early, leaving a cut-off sentence to the next window; after a
# file's last window there is none, so when its text ends this many seconds or more before the
# audio does, the rest is decoded again as a window of its own (as openai-whisper seeks to the
# last segment's end), until a window's text reaches the end or adds nothing.
TAIL_SECONDS = 1.0


@dataclass
class Transcript:
    path: str
    text: str
    language: str | None
    duration: float  # seconds of audio
    segments: list[Segment]
    stats: DecodingStats = field(default_factory=DecodingStats)

    def as_dict(self) -> dict:
        """Times in seconds to the millisecond (a timestamp token is 20 ms)."""
        return {
            "path": self.path,
            "text": self.text,
            "language": self.language,
            "duration": round(self.duration, 3),
            "segments": [{"start": round(s.start, 3), "end": round(s.end, 3), "text": s.text}
                         | ({"words": [w.as_dict() for w in s.words]} if s.words else {}) for s in self.segments],
            "stats": self.stats.as_dict(),
        }


@dataclass
class Failure:
    path: str
    error: str  # one line naming the file and the problem


@dataclass
class _Window:
    file: int
    index: int
    start: float  # seconds on the file's timeline
    audio: np.ndarray  # a view into the file's samples
    new_seconds: float  # of audio no earlier window covers
    words: list[Word] | None = None  # with word timestamps, once decoded

    @property
    def end(self) -> float:
        return self.start + len(self.audio) / SAMPLE_RATE


def plan_windows(n_samples: int, chunking: ChunkingOptions) -> list[tuple[int, int]]:
    """(start, end) sample ranges of the windows covering n_samples; one window for short audio."""
    chunk = int(chunking.chunk_length * SAMPLE_RATE)
    step = chunk - int(chunking.overlap * SAMPLE_RATE)
    starts = [0]
    while starts[-1] + chunk < n_samples:
        starts.append(starts[-1] + step)
    return [(start, min(start + chunk, max(n_samples, 1))) for start in starts]


def transcribe(
    pair: WhisperPair,
    paths: Iterable[str | Path],
    options: DecodingOptions = DecodingOptions(),
    *,
    batch_size: int = BATCH_SIZE,
    chunking: ChunkingOptions = ChunkingOptions(),
    languages: dict[str, str] | None = None,
    use_assistant: bool = True,
    on_window=None,
    load=load_audio,
) -> Iterator[Transcript | Failure]:
    """Transcribe files in order, batching windows across files; yields one result per file.

    A file that cannot be read yields a Failure and the others go on. languages maps a path to
    its language, overriding options.language; a file of several windows with no language gets
    the language detected on its first window. A file of several windows is always decoded with
    timestamps: without them Whisper tends to stop early in a long window, and the stitcher needs
    segment times. on_window(seconds) is called as windows finish, with the seconds of the file's
    audio each one adds (overlaps counted once), so they add up to the file's duration.
    load(path): the file's 16 kHz samples, raising AudioError (audio decoded elsewhere, as on Ray).
    (One generator of ~80 lines: it keeps result order, batching across files and per-file
    assembly in one place, its steps as inner functions.)
    """
    paths = [str(p) for p in paths]
    languages = dict(languages or {})
    pending: dict[bool, list[_Window]] = {False: [], True: []}  # by timestamp mode: a batch has one
    results: dict[int, list[WindowResult | None]] = {}
    files: dict[int, list[_Window]] = {}
    done: dict[int, Transcript | Failure] = {}
    next_to_yield = 0

    def flush(timestamps: bool) -> None:
        batch = pending[timestamps][:batch_size]
        del pending[timestamps][:batch_size]
        mel, assistant_mel = pair_features(pair, [w.audio for w in batch])
        langs = [languages.get(paths[w.file], options.language) for w in batch]
        out, _ = decode_windows(
            pair, mel, replace(options, timestamps=timestamps), assistant_mel=assistant_mel, languages=langs,
            seeds=[zlib.crc32(np.ascontiguousarray(w.audio)) for w in batch], use_assistant=use_assistant,
        )
        if options.word_timestamps:
            # right after decoding: the main decoder's cross-attention still holds this batch's audio
            timed = word_timings(pair.main, [r.tokens for r in out], [r.language for r in out], options.task,
                                 [len(w.audio) for w in batch])
            for window, words in zip(batch, timed):
                window.words = words
        for window, result in zip(batch, out):
            finish(window, result, timestamps)

    def finish(window: _Window, result: WindowResult, timestamps: bool) -> None:
        results[window.file][window.index] = result
        if on_window is not None:
            on_window(window.new_seconds)
        last = files[window.file][-1]
        if timestamps and window is last and (tail := _tail(pair, window, result)) is not None:
            files[window.file].append(tail)
            languages.setdefault(paths[window.file], result.language)  # the tail is in the file's language
            results[window.file].append(None)
            pending[timestamps].append(tail)
        elif all(r is not None for r in results[window.file]):
            done[window.file] = _assemble(pair, paths[window.file], files.pop(window.file),
                                          results.pop(window.file), timestamps, options.compression_ratio_threshold)

    def ready() -> Iterator[Transcript | Failure]:
        nonlocal next_to_yield
        while next_to_yield in done:
            yield done.pop(next_to_yield)
            next_to_yield += 1

    for file, path in enumerate(paths):
        try:
            audio = load(path)
            language = pair.main.special.language_code(languages.get(path, options.language))
        except (AudioError, ValueError) as error:
            done[file] = Failure(path, str(error) if isinstance(error, AudioError) else f"{path}: {error}")
            yield from ready()
            continue
        windows = _file_windows(file, audio, chunking)
        silent = [_silent(w.audio) for w in windows]
        sound = [w for w, quiet in zip(windows, silent) if not quiet]
        if language is not None:
            languages[path] = language
        elif len(windows) > 1 and pair.main.special.multilingual and sound:
            # one language for the whole file, as Whisper does: windows decoded apart could disagree
            languages[path] = detect_languages(pair, pair_features(pair, [sound[0].audio])[0])[0]
        files[file] = windows
        results[file] = [None] * len(windows)
        timestamps = options.timestamps or len(windows) > 1
        for window, quiet in zip(windows, silent):
            if quiet:
                finish(window, WindowResult([], None, False, DecodingStats(windows=1)), timestamps)
            else:
                pending[timestamps].append(window)
        yield from ready()
        while len(pending[timestamps]) >= batch_size:
            flush(timestamps)
            yield from ready()
    for timestamps in (False, True):
        while pending[timestamps]:
            flush(timestamps)
    yield from ready()


def _file_windows(file: int, audio: np.ndarray, chunking: ChunkingOptions) -> list[_Window]:
    """A file's windows; each knows the seconds of audio no earlier window covers (what a progress
    bar over the file counts)."""
    ranges = plan_windows(len(audio), chunking)
    starts = [a for a, _ in ranges[1:]] + [len(audio)]
    return [_Window(file, i, a / SAMPLE_RATE, audio[a:b], (min(b, next_start) - a) / SAMPLE_RATE)
            for i, ((a, b), next_start) in enumerate(zip(ranges, starts))]


def _silent(audio: np.ndarray) -> bool:
    return float(np.abs(audio).max(initial=0.0)) < SILENCE_PEAK


def _tail(pair: WhisperPair, window: _Window, result: WindowResult) -> _Window | None:
    """The audio after the end of a file's last window's text, as a window to decode, where its
    text ended TAIL_SECONDS or more before the audio (see TAIL_SECONDS); None otherwise."""
    if result.no_speech:
        return None
    segments = window_segments(result.tokens, pair.main.tokenizer, window.start, window.end, timestamps=True)
    if not segments or segments[-1].end <= window.start or window.end - segments[-1].end < TAIL_SECONDS:
        return None
    offset = round((segments[-1].end - window.start) * SAMPLE_RATE)
    if _silent(window.audio[offset:]):
        return None
    return _Window(window.file, window.index + 1, window.start + offset / SAMPLE_RATE, window.audio[offset:], 0.0)


def _once_each(segments: list[Segment]) -> list[Segment]:
    """A looping window's segments, each text once: a window whose text still loops after every
    fallback temperature (or with none: DecodingOptions.temperature) repeats a sentence until the
    window ends, a hallucination; the repeats are dropped."""
    seen: set[str] = set()
    return [s for s in segments if not (s.text in seen or seen.add(s.text))]


def _assemble(pair: WhisperPair, path: str, windows: list[_Window], results: list[WindowResult],
              timestamps: bool, loop_ratio: float | None) -> Transcript:
    tokenizer = pair.main.tokenizer
    pieces = []
    for w, r in zip(windows, results):
        segments = [] if r.no_speech else window_segments(r.tokens, tokenizer, w.start, w.end, timestamps, w.words)
        if loop_ratio is not None and r.compression_ratio > loop_ratio:
            segments = _once_each(segments)
        pieces.append((w.start, w.end, segments))
    segments = stitch(pieces, tokenizer)
    full_text = tokenizer.decode([t for s in segments for t in s.tokens]).strip()
    languages = Counter(r.language for r in results if r.language)
    stats = DecodingStats()
    for result in results:
        stats.add(result.stats)
    duration = windows[-1].end
    return Transcript(path, full_text, languages.most_common(1)[0][0] if languages else None, duration, segments, stats)
