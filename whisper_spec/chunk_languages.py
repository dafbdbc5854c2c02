"""Speech chunks' detected languages -> the language each is decoded in, and a chunk where the
language changes -> parts of one language each (docs/decisions.md, "A language a speech chunk").

Detected on a whole chunk, the language of a chunk that holds two is one of them, often with high
probability (German then English: German at 0.93). So a chunk at a change of language (its language
or a neighbour's differs) is checked piece by piece: its speech between pauses, each piece encoded
alone, where detection is right (all 44 pieces of the language-switching set; 170 of 171 pieces of
one-language recordings, the other below PIECE_SURE)."""

from __future__ import annotations

from .audio import SAMPLE_RATE

# A likeliest language this probable decides: a file's on its first window (faster-whisper's language
# detection threshold; else its first windows together), a chunk's where it is not its file's.
LANGUAGE_SURE = 0.5
# pieces: speech split at pauses of this many seconds, each at least PIECE_SECONDS long (shorter ones
# join the neighbour across the shorter pause); a piece takes its own likeliest language at PIECE_SURE
PIECE_PAUSE_SECONDS = 0.4
PIECE_SECONDS = 3.0
PIECE_SURE = 0.7


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
