"""Files -> windows -> batched speculative decoding -> transcripts: the batching job.

Each file is planned into windows (windows.py: its speech chunks, or windows one after another),
its language decided (chunk_languages.py), and the windows of all files go through the decoder in
batches of one kind (timestamp mode and prompt). Windows judged silent (the no-speech rule) give no
text; a window's sampling seed is a hash of its samples, so a window decoded again at a higher
temperature (decoding.decode_encoded) samples alike in any batch or file. Word timestamps are read
from the main decoder right after each batch. A decoded window hands its segments to its file and
queues the windows that go on after it (windows.follow); a file whose windows are all decoded is
assembled into its Transcript, yielded in the order the files came.
"""

from __future__ import annotations

import time
import zlib
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from ..decode.decoding import decode_encoded, encode_batch
from ..decode.encoding import pair_features
from ..decode.results import WindowResult
from ..decode.stats import DecodingStats
from ..models.pair import WhisperPair
from ..models.platform import synchronize
from ..options import BATCH_SIZE, ChunkingOptions, DecodingOptions
from ..speech.audio import SAMPLE_RATE, AudioError, load_audio
from .chunk_languages import ChunkLanguages, file_language
from .timing import word_timings
from .transcript import Failure, Transcript
from .windows import File, Window, end_floor, follow, plan_file, silent, sparse

__all__ = ["DecodingJob", "Failure", "Transcript", "transcribe"]


@dataclass(frozen=True)
class _Kind:
    """What the windows of a batch share: the timestamp mode and the prompt (DecodingOptions)."""

    timestamps: bool
    prompt: str | tuple[int, ...] | None


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
    job = DecodingJob(pair, [str(p) for p in paths], options, batch_size, chunking, dict(languages or {}), dict(prompts or {}),
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


class DecodingJob:
    """transcribe's state: windows waiting for a batch (by kind: a batch has one timestamp mode and
    one prompt), files being decoded, and finished results held until every earlier file's has been yielded."""

    def __init__(self, pair: WhisperPair, paths: list[str], options: DecodingOptions, batch_size: int,
                 chunking: ChunkingOptions, languages: dict[str, str], prompts: dict[str, str], on_window, on_segments):
        self.pair, self.paths, self.options, self.batch_size = pair, paths, options, batch_size
        self.chunking, self.languages, self.prompts = chunking, languages, prompts
        self.chunk_languages = ChunkLanguages(pair, options.language_candidates, self.languages)
        self.on_window, self.on_segments = on_window, on_segments
        self.chunk = int(chunking.chunk_length * SAMPLE_RATE)
        self.pending: dict[_Kind, list[Window]] = {}
        self.files: dict[int, File] = {}
        self.done: dict[int, Transcript | Failure] = {}
        self.next_to_yield = 0

    def add(self, index: int, path: str, audio: np.ndarray, language: str | None) -> _Kind:
        """Plan a readable file's windows and queue them; returns their kind."""
        pair, options = self.pair, self.options
        file = self.files[index] = plan_file(index, path, audio, self.chunking, pair.speech_detector)
        sound = [w for w in file.windows if not silent(w.audio)]
        if language is not None:
            self.languages[path] = language
        elif file.long and pair.main.special.multilingual and sound:
            # the file's language, where a chunk is not sure of its own: windows decoded apart could disagree
            file.detects = True
            synchronize(pair.device)
            start = time.perf_counter()
            self.languages[path], file.language_probability = file_language(pair, file, sound[0], self.chunk,
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

    def queue(self, window: Window, kind: _Kind) -> None:
        """Queue a window for decoding; a silent one is finished at once, with no text."""
        if silent(window.audio):
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
            keep, cut = self.chunk_languages.decide(batch, encoded, self.files)
            for part in cut:  # a chunk cut into parts of one language: the parts decode in later batches
                self.queue(part, kind)
            if len(keep) < len(batch):
                batch, encoded, stats.windows = [batch[i] for i in keep], encoded.rows(keep), len(keep)
                if not batch:
                    return
        langs = [w.language or self.languages.get(self.paths[w.file], options.language) for w in batch]
        out, _ = decode_encoded(pair, encoded, replace(options, timestamps=timestamps, prompt=kind.prompt), languages=langs,
                                seeds=[zlib.crc32(np.ascontiguousarray(w.audio)) for w in batch], stats=stats,
                                end_floors=[end_floor(self.files[w.file], w) for w in batch])
        for row, (window, result) in enumerate(zip(batch, out)):  # timed where its own result asks for it
            if options.word_timestamps or (timestamps and sparse(pair.main.tokenizer, window, result)):
                window.words = word_timings(pair.main, [(k[row : row + 1], v[row : row + 1]) for k, v in encoded.main],
                                            result.tokens, result.language, options.task, len(window.audio))
        for window, result in zip(batch, out):
            self.finish(window, result, kind)

    def finish(self, window: Window, result: WindowResult, kind: _Kind) -> None:
        """Record a window's result; queue the windows that continue its file, or assemble the file."""
        window.result = result
        file = self.files[window.file]
        window.segments, following = follow(file, window, self.pair.main.tokenizer, kind.timestamps, self.chunk,
                                             self.options.compression_ratio_threshold, self.options.word_timestamps)
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

    def announce(self, file: File) -> None:
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


def _assemble(pair: WhisperPair, file: File) -> Transcript:
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
