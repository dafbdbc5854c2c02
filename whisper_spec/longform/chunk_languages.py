"""A file's windows -> the language each is decoded in: a long file's one language (file_language),
and a speech chunk's own where sure (ChunkLanguages), a chunk where the language changes cut into
parts of one language each (docs/decisions.md, "One language a file", "A language a speech chunk").

Detected on a whole chunk, the language of a chunk that holds two is one of them, often with high
probability (German then English: German at 0.93). So a chunk at a change of language (its language
or a neighbour's differs) is checked piece by piece: its speech between pauses, each piece encoded
alone, where detection is right (all 44 pieces of the language-switching set; 170 of 171 pieces of
one-language recordings, the other below PIECE_SURE)."""

from __future__ import annotations

import time

import torch

from ..decode.encoding import (
    Encoded,
    cross_language_probabilities,
    encoder_states,
    most_likely,
    pair_features,
    states_language_probabilities,
)
from ..models.pair import WhisperPair
from ..models.platform import synchronize
from ..speech.audio import SAMPLE_RATE
from ..speech.vad import plan_chunks
from .windows import File, Window, silent

# A likeliest language this probable decides: a file's on its first window (faster-whisper's language
# detection threshold; else its first windows together), a chunk's where it is not its file's.
LANGUAGE_SURE = 0.5
# pieces: speech split at pauses of this many seconds, each at least PIECE_SECONDS long (shorter ones
# join the neighbour across the shorter pause); a piece takes its own likeliest language at PIECE_SURE
PIECE_PAUSE_SECONDS = 0.4
PIECE_SECONDS = 3.0
PIECE_SURE = 0.7
# A long file's language is detected on its first window with sound; where that window gives its
# likeliest language less than LANGUAGE_SURE, the first LANGUAGE_WINDOWS windows of its speech decide
# together (file_language; docs/decisions.md, "One language a file").
LANGUAGE_WINDOWS = 4


def own_or_file(likeliest: str, probability: float, file_language: str, sure: float = LANGUAGE_SURE) -> str:
    """A chunk's language: its likeliest where that is sure, else its file's."""
    return likeliest if probability >= sure else file_language


def speech_pieces(voiced: list[tuple[int, int]], start: int, end: int) -> list[tuple[int, int]]:
    """The speech of [start, end) (samples) split at pauses of PIECE_PAUSE_SECONDS or more, pieces
    shorter than PIECE_SECONDS joined to their neighbour across the shorter pause."""
    pieces: list[list[int]] = []
    for a, b in ((max(a, start), min(b, end)) for a, b in voiced if b > start and a < end):
        if pieces and a - pieces[-1][1] < PIECE_PAUSE_SECONDS * SAMPLE_RATE:
            pieces[-1][1] = b
        else:
            pieces.append([a, b])
    while len(pieces) > 1:
        short = next((i for i, (a, b) in enumerate(pieces) if b - a < PIECE_SECONDS * SAMPLE_RATE), None)
        if short is None:
            break
        before = pieces[short][0] - pieces[short - 1][1] if short > 0 else None
        after = pieces[short + 1][0] - pieces[short][1] if short + 1 < len(pieces) else None
        other = short - 1 if after is None or (before is not None and before <= after) else short + 1
        first, last = min(short, other), max(short, other)
        pieces[first:last + 1] = [[pieces[first][0], pieces[last][1]]]
    return [(a, b) for a, b in pieces]


def language_parts(pieces: list[tuple[int, int]], languages: list[str], start: int, end: int
                   ) -> list[tuple[int, int, str]]:
    """[start, end) cut into parts of one language: neighbouring pieces of one language together, a
    cut in the middle of the pause between two pieces of different languages."""
    parts = [[start, pieces[0][1], languages[0]]]
    for (a, b), (next_a, _), language in zip(pieces, pieces[1:], languages[1:]):
        if language == parts[-1][2]:
            continue
        cut = (b + next_a) // 2
        parts[-1][1] = cut
        parts.append([cut, end, language])
    parts[-1][1] = end
    return [(a, b, language) for a, b, language in parts]


@torch.inference_mode()
def file_language(pair: WhisperPair, file: File, first: Window, chunk: int,
                  candidates: tuple[str, ...] | None) -> tuple[str, float]:
    """A long file's one language and its probability: its first window with sound's most likely,
    unless that is less than LANGUAGE_SURE probable; then the most probable on average over that
    window and the speech chunks after it, LANGUAGE_WINDOWS in all (a short or unclear opening does
    not decide alone what language an hour is decoded in). The windows it encodes keep their
    encoder states for their batch (Window.states): no window is encoded twice."""
    codes, probabilities = encoded_language(pair, [first], candidates)
    if probabilities.max() < LANGUAGE_SURE:
        after = first.start + len(first.audio)
        more = ([w for w in file.windows if w.start >= after] if file.chunked else
                [Window(first.file, a, file.audio[a:b], 0.0) for a, b in plan_chunks(file.speech, chunk) if a >= after])
        more = [w for w in more if not silent(w.audio)][: LANGUAGE_WINDOWS - 1]
        if more:
            probabilities = torch.cat([probabilities, encoded_language(pair, more, candidates)[1]]).mean(dim=0, keepdim=True)
    (language,), (probability,) = most_likely(codes, probabilities)
    return language, probability


def encoded_language(pair: WhisperPair, windows: list[Window], candidates: tuple[str, ...] | None
                     ) -> tuple[list[str], torch.Tensor]:
    """states_language_probabilities of the windows, each keeping its main encoder states."""
    states = encoder_states(pair.main, pair_features(pair, [w.audio for w in windows])[0])
    for window, row in zip(windows, states.split(1)):
        window.states = row
    return states_language_probabilities(pair, states, candidates)


class ChunkLanguages:
    """The language of each speech chunk of files that detect their chunks' own (File.detects): its
    likeliest where sure, else its file's (languages: each file's, by path). What decides a window
    is its own audio and its neighbours': never its batch."""

    def __init__(self, pair: WhisperPair, candidates: tuple[str, ...] | None, languages: dict[str, str]):
        self.pair, self.candidates, self.languages = pair, candidates, languages

    def decide(self, batch: list[Window], encoded: Encoded, files: dict[int, File]) -> tuple[list[int], list[Window]]:
        """Each undecided window's language, read from the batch's encoder states. A speech chunk at
        a change of language (its own language or a neighbour's is another) is checked piece by
        piece, and where its pieces are in more than one language, it is cut into parts of one
        language, in its place in its file's windows. Returns the rows to decode now and the parts
        to queue."""
        rows = [i for i, w in enumerate(batch) if files[w.file].detects and w.language is None]
        cross = encoded.main if len(rows) == len(batch) else encoded.rows(rows).main  # rows: copies
        codes, probabilities = cross_language_probabilities(self.pair.main, cross, self.candidates)
        for i, likeliest, probability in zip(rows, *most_likely(codes, probabilities)):
            batch[i].likeliest = likeliest, probability
        keep, cut = [], []
        for i, window in enumerate(batch):
            if i in rows:
                file = files[window.file]
                window.language = self.chunk_language(file, window)
                if file.chunked and not window.checked and self.at_a_change(file, window):
                    parts = self.cut_by_language(file, window)
                    if len(parts) > 1:
                        at = file.windows.index(window)
                        file.windows[at : at + 1] = parts
                        cut += parts
                        continue
            keep.append(i)
        return keep, cut

    def chunk_language(self, file: File, window: Window) -> str:
        """What a window is decoded in: decided, else its likeliest where sure (detected on its own
        encoder states, made where missing), else its file's."""
        if window.language is not None:
            return window.language
        if window.likeliest is None:
            (window.likeliest,) = self.detect(file, [window])
        return own_or_file(*window.likeliest, self.languages[file.path])

    def detect(self, file: File, windows: list[Window]) -> list[tuple[str, float]]:
        """Each window's likeliest language and its probability, each encoded alone and keeping its
        encoder states (encoded_language); the seconds count with the file's encoder seconds."""
        synchronize(self.pair.device)
        start = time.perf_counter()
        found = list(zip(*most_likely(*encoded_language(self.pair, windows, self.candidates))))
        synchronize(self.pair.device)
        file.detection_seconds += time.perf_counter() - start
        return found

    def at_a_change(self, file: File, window: Window) -> bool:
        """Whether a speech chunk's language is not that of a neighbouring chunk with sound (the file's
        before the first): where the language changes. The chunk after it is detected now where it is
        not in this batch, its encoder states kept for its own."""
        sound = [w for w in file.windows if w.language is not None or w.result is None]  # not judged silent
        at = sound.index(window)
        before = self.chunk_language(file, sound[at - 1]) if at > 0 else self.languages[file.path]
        after = [self.chunk_language(file, w) for w in sound[at + 1 : at + 2]]
        return any(language != window.language for language in [before, *after])

    def cut_by_language(self, file: File, window: Window) -> list[Window]:
        """A speech chunk as parts of one language (language_parts): its pieces each encoded and
        detected alone, a piece in its own likeliest language where PIECE_SURE, else in the chunk's.
        One part: the chunk itself, its language the pieces'. A part that is one piece keeps that
        piece's encoder states."""
        end = window.start + len(window.audio)
        pieces = speech_pieces(file.voiced, window.start, end)
        window.checked = True
        if len(pieces) < 2:
            return [window]
        sliced = [Window(window.file, a, file.audio[a:b], 0.0) for a, b in pieces]
        languages = [own_or_file(likeliest, probability, window.language, PIECE_SURE)
                     for likeliest, probability in self.detect(file, sliced)]
        parts = language_parts(pieces, languages, window.start, end)
        if len(parts) == 1:
            window.language = parts[0][2]
            return [window]
        states = {(p.start, p.start + len(p.audio)): p.states for p in sliced}
        cut = [Window(window.file, a, file.audio[a:b], (b - a) / SAMPLE_RATE, language=language, checked=True,
                      states=states.get((a, b))) for a, b, language in parts]
        cut[0].new_seconds = window.new_seconds - sum(p.new_seconds for p in cut[1:])
        return cut
