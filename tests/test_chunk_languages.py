"""A speech chunk's language and its cut into parts of one language (chunk_languages), on sample counts."""

from whisper_spec.longform.chunk_languages import PIECE_SECONDS, language_parts, own_or_file, speech_pieces
from whisper_spec.speech.audio import SAMPLE_RATE as S


def test_a_chunk_takes_its_own_language_only_where_sure_of_it():
    assert own_or_file("de", 0.93, "en") == "de"
    assert own_or_file("la", 0.35, "en") == "en"
    assert own_or_file("la", 0.59, "en", sure=0.7) == "en"


def test_pieces_are_split_at_pauses_and_short_ones_join_across_the_shorter_pause():
    # 0-5 s, a 0.2 s pause (too short to split), 5.2-8 s, a 1 s pause, 9-10 s (short), a 0.5 s pause, 10.5-16 s
    voiced = [(0, 5 * S), (int(5.2 * S), 8 * S), (9 * S, 10 * S), (int(10.5 * S), 16 * S)]
    assert speech_pieces(voiced, 0, 16 * S) == [(0, 8 * S), (9 * S, 16 * S)]
    # within a chunk's bounds only, and one piece where all of it is short
    assert speech_pieces(voiced, 9 * S, 11 * S) == [(9 * S, 11 * S)]
    assert all(b - a >= PIECE_SECONDS * S for a, b in speech_pieces(voiced, 0, 16 * S))


def test_a_chunk_is_cut_in_the_middle_of_the_pause_where_the_language_changes():
    pieces = [(1 * S, 5 * S), (6 * S, 10 * S), (12 * S, 20 * S)]
    assert language_parts(pieces, ["de", "de", "en"], 0, 21 * S) == [(0, 11 * S, "de"), (11 * S, 21 * S, "en")]
    assert language_parts(pieces, ["fr", "es", "fr"], 0, 21 * S) == [
        (0, int(5.5 * S), "fr"), (int(5.5 * S), 11 * S, "es"), (11 * S, 21 * S, "fr")]
    assert language_parts(pieces, ["de"] * 3, 0, 21 * S) == [(0, 21 * S, "de")]
