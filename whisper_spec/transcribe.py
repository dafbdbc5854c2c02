"""Files -> 30 s windows -> batched speculative decoding -> segments on each file's timeline."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import torch

from .audio import N_SAMPLES, SAMPLE_RATE, AudioError, load_audio, log_mel_spectrogram, pad_or_trim
from .decoding import DecodingOptions, DecodingStats, WindowResult, decode_windows
from .loader import WhisperPair
from .tokenizer import TIME_PRECISION, TextDecoder


@dataclass
class Segment:
    start: float  # seconds on the file's timeline
    end: float
    text: str
    tokens: list[int]


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
    offset: float  # seconds
    audio: np.ndarray


def window_segments(
    tokens: list[int], text: TextDecoder, offset: float, duration: float, timestamps: bool
) -> list[Segment]:
    """Segments of one window. With timestamps, each <|t0|> text <|t1|> span is a segment."""
    ts_begin = text.special.timestamp_begin
    if not timestamps:
        body = text.decode(tokens).strip()
        return [Segment(offset, offset + duration, body, tokens)] if body else []
    segments, start, pending = [], None, []
    for token in tokens:
        if token < ts_begin:
            pending.append(token)
            continue
        time = (token - ts_begin) * TIME_PRECISION
        if start is not None and pending:
            segments.append((start, time, pending))
            start, pending = None, []
        else:
            start = time
    if pending:  # text after the last timestamp runs to the end of the window
        segments.append((start if start is not None else 0.0, duration, pending))
    return [
        Segment(offset + s, offset + min(max(e, s), duration), body, seg)
        for s, e, seg in segments
        if (body := text.decode(seg).strip())
    ]


def _windows(audio: np.ndarray, file: int) -> list[_Window]:
    """Consecutive 30 s windows covering the file (at least one, even for very short audio)."""
    starts = range(0, max(len(audio), 1), N_SAMPLES)
    return [_Window(file, i, start / SAMPLE_RATE, audio[start : start + N_SAMPLES]) for i, start in enumerate(starts)]


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
    languages: dict[str, str] | None = None,
    use_assistant: bool = True,
    progress: bool = False,
) -> Iterator[Transcript | Failure]:
    """Transcribe files in order, batching windows across files; yields one result per file.

    A file that cannot be read yields a Failure and the others go on. languages maps a path to
    its language, overriding options.language.
    """
    from tqdm.auto import tqdm

    paths = [str(p) for p in paths]
    languages = languages or {}
    bar = tqdm(total=len(paths), unit="file", disable=not progress or None)
    pending: list[_Window] = []
    results: dict[int, list[WindowResult | None]] = {}
    durations: dict[int, float] = {}
    next_to_yield = 0
    done: dict[int, Transcript | Failure] = {}

    def flush() -> None:
        batch = pending[:batch_size]
        del pending[:batch_size]
        mel, assistant_mel = _features(pair, batch)
        langs = [languages.get(paths[w.file], options.language) for w in batch]
        out, _ = decode_windows(
            pair, mel, options, assistant_mel=assistant_mel, languages=langs, use_assistant=use_assistant
        )
        for window, result in zip(batch, out):
            results[window.file][window.index] = result
        for file in {w.file for w in batch}:
            if all(r is not None for r in results[file]):
                done[file] = _assemble(pair, paths[file], durations[file], results.pop(file), options)

    def ready() -> Iterator[Transcript | Failure]:
        nonlocal next_to_yield
        while next_to_yield in done:
            bar.update(1)
            yield done.pop(next_to_yield)
            next_to_yield += 1

    for file, path in enumerate(paths):
        try:
            audio = load_audio(path)
            language = languages.get(path, options.language)
            pair.main.special.check_language(language)
        except (AudioError, ValueError) as error:
            done[file] = Failure(path, str(error) if isinstance(error, AudioError) else f"{path}: {error}")
            yield from ready()
            continue
        windows = _windows(audio, file)
        durations[file] = len(audio) / SAMPLE_RATE
        results[file] = [None] * len(windows)
        pending.extend(windows)
        while len(pending) >= batch_size:
            flush()
            yield from ready()
    while pending:
        flush()
    yield from ready()
    bar.close()


def _assemble(pair: WhisperPair, path: str, duration: float, windows: list[WindowResult], options) -> Transcript:
    text = pair.main.text
    segments = []
    for index, result in enumerate(windows):
        offset = index * N_SAMPLES / SAMPLE_RATE
        length = min(duration - offset, N_SAMPLES / SAMPLE_RATE)
        segments += window_segments(result.tokens, text, offset, length, options.timestamps)
    languages = Counter(w.language for w in windows if w.language)
    language = languages.most_common(1)[0][0] if languages else None
    full_text = " ".join(text.decode(w.tokens).strip() for w in windows).strip()
    stats = DecodingStats()
    for window in windows:
        stats.add(window.stats)
    return Transcript(path, full_text, language, duration, segments, stats)
