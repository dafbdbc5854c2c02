"""Chunked long-form: windows, stitching, exactness of speculative long-form, and WER at the seams."""

import json

import jiwer
import numpy as np
import pytest
import soundfile
from conftest import SPEECH, manifest, speech

from whisper_spec.audio import SAMPLE_RATE
from whisper_spec.options import ChunkingOptions, DecodingOptions
from whisper_spec.pair import WhisperPair, decoder_subset
from whisper_spec.pipeline import plan_windows, transcribe
from whisper_spec.stitch import Segment, align_overlap, stitch

LONG = ["longform/bill_gates-TED-next-epidemic-excerpt.flac",
        "longform/librispeech-test-other_1688-142285_0000-0009.flac",
        "unlabeled/talk-128s.mp3"]


class Text:
    """A stand-in text decoder for stitching tests: token ids are words."""
    special = type("S", (), {"timestamp_begin": 1000, "eot": 999})()

    @staticmethod
    def decode(ids):
        return " ".join(f"w{i}" for i in ids)


def test_windows_cover_the_audio_with_the_asked_overlap():
    chunking = ChunkingOptions(chunk_length=30, overlap=5)
    assert plan_windows(10 * SAMPLE_RATE, chunking) == [(0, 10 * SAMPLE_RATE)]
    windows = plan_windows(70 * SAMPLE_RATE, chunking)
    assert [(a / SAMPLE_RATE, b / SAMPLE_RATE) for a, b in windows] == [(0, 30), (25, 55), (50, 70)]
    with pytest.raises(ValueError):
        ChunkingOptions(chunk_length=40)


def test_align_overlap_cuts_in_the_middle_of_the_shared_words():
    left = [1, 2, 3, 4, 5, 6, 7, 8]
    right = [5, 6, 7, 8, 9, 10]
    i, j = align_overlap(left, right)
    assert left[:i] + right[j:] == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    # a word heard differently in one window does not stop the alignment
    left, right = [1, 2, 3, 4, 5, 66, 7, 8, 9, 10], [5, 6, 6, 7, 8, 9, 10, 11]
    i, j = align_overlap(left, right)
    assert left[:i] + right[j:] == [1, 2, 3, 4, 5, 66, 7, 8, 9, 10, 11]
    assert align_overlap([1, 2, 3, 4], [3, 4, 9]) is None  # two shared tokens may be chance
    assert align_overlap([1, 2, 3], [7, 8, 9]) is None


def test_stitch_keeps_each_word_once_and_times_in_order():
    first = [Segment(0, 12, "", [1, 2, 3, 4]), Segment(12, 30, "", [5, 6, 7, 8, 9])]
    second = [Segment(25, 40, "", [7, 8, 9, 10, 11]), Segment(40, 55, "", [12, 13])]
    segments = stitch([(0, 30, first), (25, 55, second)], Text)
    assert [t for s in segments for t in s.tokens] == list(range(1, 14))
    assert all(a.end <= b.start for a, b in zip(segments, segments[1:]))
    assert segments[0].start == 0 and segments[-1].end == 55
    # nothing shared: all of left, then right from its first segment that ends after left's text
    first = [Segment(0, 12, "", [1, 2, 3]), Segment(12, 27, "", [4, 5])]
    second = [Segment(25, 26.5, "", [9]), Segment(26.5, 40, "", [6, 7])]
    segments = stitch([(0, 30, first), (25, 55, second)], Text)
    assert [t for s in segments for t in s.tokens] == [1, 2, 3, 4, 5, 6, 7]


@pytest.fixture(scope="module")
def long_pair(base_pair):
    """base with an untrained assistant of five of its six decoder layers: most drafts accepted, not all."""
    return WhisperPair(base_pair.main, decoder_subset(base_pair.main, [0, 1, 2, 3, 5]), base_pair.device, base_pair.dtype)


@pytest.mark.parametrize("batch_size", [1, 4])
def test_speculative_long_form_equals_main_only(long_pair, batch_size):
    paths = [speech(p) for p in LONG]
    options = DecodingOptions(speculation="on", timestamps=True, draft_tokens=4)
    main_only = list(transcribe(long_pair, paths, options, batch_size=batch_size, use_assistant=False))
    speculative = list(transcribe(long_pair, paths, options, batch_size=batch_size))
    for a, b in zip(main_only, speculative):
        assert a.text == b.text and a.text
        assert [(s.start, s.end, s.text) for s in a.segments] == [(s.start, s.end, s.text) for s in b.segments]
        assert b.stats.windows >= 3 and 0 < b.stats.acceptance < 1
        assert b.segments[-1].end <= b.duration + 1e-6
        assert all(x.end <= y.start + 1e-6 for x, y in zip(b.segments, b.segments[1:]))
    assert speculative[2].duration == pytest.approx(128.486, abs=0.01)


def test_the_end_of_a_recording_is_transcribed(long_pair):
    """This chapter's last window ends its text ~5 s before the audio (the last sentence left for a
    next window that does not exist): the rest is decoded again, in both modes alike."""
    path = speech("longform/librispeech-test-other_2414-128291_0000-0009.flac")
    audio, rate = soundfile.read(path, dtype="float32")
    loud = np.flatnonzero(np.abs(audio) > 0.02)
    last_speech = (loud[-1] + 1) / rate
    options = DecodingOptions(language="en", speculation="on")
    main_only, speculative = (next(transcribe(long_pair, [path], options, batch_size=4, use_assistant=use))
                              for use in (False, True))
    assert [(s.start, s.end, s.text) for s in main_only.segments] == [(s.start, s.end, s.text) for s in speculative.segments]
    assert main_only.stats.windows == 4  # three planned windows and the tail
    assert abs(main_only.segments[-1].end - last_speech) <= 2.0
    assert main_only.text.lower().rstrip(".").endswith("behold this kind")  # the reference: "BEHOLD THESE KINE"


def test_stitched_wer_stays_close_to_separate_utterances(base_pair):
    from transformers.models.whisper.english_normalizer import EnglishTextNormalizer

    spelling = json.loads((SPEECH.parent / "whisper-english-spelling.json").read_text())
    normalize = EnglishTextNormalizer(spelling)
    rows = manifest()
    utterances = {r["utt_id"]: r for r in rows if r["set"] == "librispeech"}
    chapters = [r for r in rows if r["set"] == "longform" and r.get("utt_ids")]
    assert len(chapters) == 7
    options = DecodingOptions(speculation="on", language="en")
    stitched = {r.path: r.text for r in transcribe(base_pair, [SPEECH / c["path"] for c in chapters], options)}
    parts = [SPEECH / utterances[u]["path"] for c in chapters for u in c["utt_ids"]]
    separate = {r.path: r.text for r in transcribe(base_pair, parts, options)}

    references = [normalize(c["text"]) for c in chapters]
    stitched_wer = jiwer.wer(references, [normalize(stitched[str(SPEECH / c["path"])]) for c in chapters])
    separate_wer = jiwer.wer(references, [
        normalize(" ".join(separate[str(SPEECH / utterances[u]["path"])] for u in c["utt_ids"])) for c in chapters
    ])
    print(f"stitched WER {stitched_wer:.4f}, separate utterances WER {separate_wer:.4f}")
    # bound: one point absolute. About 20 seams over ~1,900 words: a word lost or doubled at every
    # seam would cost about one point, so this holds only if seams are mostly clean.
    assert stitched_wer <= separate_wer + 0.01
