"""Files -> overlapping windows -> batched speculative decoding -> stitched segments.

Audio longer than one window is cut into windows that overlap by `overlap` seconds. Windows of
all files go through the decoder in batches (across windows of one file and across files), and
each file's windows are stitched back into one transcript: consecutive windows are aligned on
the tokens they share in the overlap and cut in the middle of the agreeing stretch, so the words
at a seam appear once. Segment times are on the file's own timeline.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import torch

from .audio import CHUNK_SECONDS, SAMPLE_RATE, AudioError, load_audio, log_mel_spectrogram, pad_or_trim
from .decoding import DecodingOptions, DecodingStats, WindowResult, decode_windows, detect_languages
from .loader import WhisperPair
from .tokenizer import TIME_PRECISION, TextDecoder


@dataclass(frozen=True)
class ChunkingOptions:
    chunk_length: float = CHUNK_SECONDS  # seconds per window, at most 30
    overlap: float = 10.0  # seconds shared by consecutive windows (Whisper often leaves the last few
    # seconds of a window untranscribed, for the next window to take: the overlap must cover them)

    def __post_init__(self):
        if not 0 < self.chunk_length <= CHUNK_SECONDS:
            raise ValueError(f"chunk_length must be in (0, {CHUNK_SECONDS}] seconds")
        if not 0 <= self.overlap <= self.chunk_length / 2:
            raise ValueError("overlap must be between 0 and half the chunk length")


@dataclass
class Segment:
    start: float  # seconds on the file's timeline
    end: float
    text: str
    tokens: list[int]  # text tokens, timestamps excluded


@dataclass
class Transcript:
    path: str
    text: str
    language: str | None
    duration: float  # seconds of audio
    segments: list[Segment]
    stats: DecodingStats = field(default_factory=DecodingStats)

    def as_dict(self) -> dict:
        return {
            "path": self.path,
            "text": self.text,
            "language": self.language,
            "duration": self.duration,
            "segments": [{"start": s.start, "end": s.end, "text": s.text} for s in self.segments],
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


def window_segments(tokens: list[int], text: TextDecoder, start: float, end: float, timestamps: bool) -> list[Segment]:
    """Segments of one window on the file's timeline. With timestamps, each <|t0|> text <|t1|>
    span is a segment; without, the window's whole text is one."""
    ts_begin = text.special.timestamp_begin
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
        if (body := text.decode(seg).strip())
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


def stitch(windows: list[tuple[float, float, list[Segment]]], text: TextDecoder) -> list[Segment]:
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
    return _regroup(merged, text)


def _regroup(tokens: list[_TimedToken], text: TextDecoder) -> list[Segment]:
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
        body = text.decode(kept).strip()
        if body:
            segments.append(Segment(start, max(end, start), body, kept))
        i = j
    return segments


def _features(pair: WhisperPair, batch: list[_Window]) -> tuple[torch.Tensor, torch.Tensor | None]:
    audio = torch.stack([pad_or_trim(torch.from_numpy(w.audio)) for w in batch]).to(pair.device)
    mel = log_mel_spectrogram(audio, pair.main.dims.n_mels)
    assistant_mel = None
    if pair.assistant is not None and pair.assistant.encoder is not None:
        if pair.assistant.dims.n_mels != pair.main.dims.n_mels:
            assistant_mel = log_mel_spectrogram(audio, pair.assistant.dims.n_mels)
    return mel, assistant_mel


def transcribe(
    pair: WhisperPair,
    paths: Iterable[str | Path],
    options: DecodingOptions = DecodingOptions(),
    *,
    batch_size: int = 4,
    chunking: ChunkingOptions = ChunkingOptions(),
    languages: dict[str, str] | None = None,
    use_assistant: bool = True,
    on_window=None,
) -> Iterator[Transcript | Failure]:
    """Transcribe files in order, batching windows across files; yields one result per file.

    A file that cannot be read yields a Failure and the others go on. languages maps a path to
    its language, overriding options.language; a file of several windows with no language gets
    the language detected on its first window. A file of several windows is always decoded with
    timestamps: without them Whisper tends to stop early in a long window, and the stitcher needs
    segment times. on_window(seconds) is called as windows finish.
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
        mel, assistant_mel = _features(pair, batch)
        langs = [languages.get(paths[w.file], options.language) for w in batch]
        out, _ = decode_windows(
            pair, mel, replace(options, timestamps=timestamps), assistant_mel=assistant_mel, languages=langs,
            use_assistant=use_assistant,
        )
        for window, result in zip(batch, out):
            results[window.file][window.index] = result
            if on_window is not None:
                on_window(window.end - window.start)
        for file in {w.file for w in batch}:
            if all(r is not None for r in results[file]):
                done[file] = _assemble(pair, paths[file], files.pop(file), results.pop(file), timestamps)

    def ready() -> Iterator[Transcript | Failure]:
        nonlocal next_to_yield
        while next_to_yield in done:
            yield done.pop(next_to_yield)
            next_to_yield += 1

    for file, path in enumerate(paths):
        try:
            audio = load_audio(path)
            pair.main.special.check_language(languages.get(path, options.language))
        except (AudioError, ValueError) as error:
            done[file] = Failure(path, str(error) if isinstance(error, AudioError) else f"{path}: {error}")
            yield from ready()
            continue
        windows = [_Window(file, i, a / SAMPLE_RATE, audio[a:b])
                   for i, (a, b) in enumerate(plan_windows(len(audio), chunking))]
        if len(windows) > 1 and pair.main.special.multilingual and languages.get(path, options.language) is None:
            # one language for the whole file, as Whisper does: windows decoded apart could disagree
            languages[path] = detect_languages(pair, _features(pair, windows[:1])[0])[0]
        files[file] = windows
        results[file] = [None] * len(windows)
        timestamps = options.timestamps or len(windows) > 1
        pending[timestamps].extend(windows)
        while len(pending[timestamps]) >= batch_size:
            flush(timestamps)
            yield from ready()
    for timestamps in (False, True):
        while pending[timestamps]:
            flush(timestamps)
    yield from ready()


def _assemble(pair: WhisperPair, path: str, windows: list[_Window], results: list[WindowResult],
              timestamps: bool) -> Transcript:
    text = pair.main.text
    pieces = [(w.start, w.end, window_segments(r.tokens, text, w.start, w.end, timestamps))
              for w, r in zip(windows, results)]
    segments = stitch(pieces, text) if len(pieces) > 1 else pieces[0][2]
    full_text = text.decode([t for s in segments for t in s.tokens]).strip()
    languages = Counter(r.language for r in results if r.language)
    stats = DecodingStats()
    for result in results:
        stats.add(result.stats)
    duration = windows[-1].end
    return Transcript(path, full_text, languages.most_common(1)[0][0] if languages else None, duration, segments, stats)
