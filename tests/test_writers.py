"""Writers: subtitle cues cut and wrapped by SubtitleOptions, and the tsv table."""

import os
import re
from dataclasses import replace

import pytest

from whisper_spec.longform.segments import Segment
from whisper_spec.longform.timing import Word
from whisper_spec.longform.transcript import Transcript
from whisper_spec.options import OUTPUT_FORMATS, SubtitleOptions
from whisper_spec.outputs.writers import RENDERERS, cues, render

SENTENCES = ["When I was a kid, the disaster we worried about most was a nuclear war.",
             "That's why we had a barrel like this down in our basement.",
             "Unbreakable-supercalifragilistic words stay whole."]


def transcript(with_words: bool = True) -> Transcript:
    """Segments of the sentences above, each word 0.3 s long, each segment after a 1 s pause."""
    segments, time = [], 0.5
    for sentence in SENTENCES:
        words = []
        for text in sentence.split():
            words.append(Word(" " + text, time, time + 0.3, 0.9, [1]))
            time += 0.3
        segments.append(Segment(words[0].start, words[-1].end, sentence, [1] * len(words), words if with_words else []))
        time += 1.0
    return Transcript("talk.wav", " ".join(SENTENCES), "en", time, segments)


def test_every_output_format_has_a_writer():
    assert tuple(RENDERERS) == OUTPUT_FORMATS


def test_without_a_layout_a_cue_is_a_segment():
    t = transcript()
    assert cues(t) == [(s.start, s.end, s.text) for s in t.segments]


@pytest.mark.parametrize("width", [10, 20, 42])
@pytest.mark.parametrize("count", [None, 1, 2, 3])
def test_lines_stay_within_the_width_and_cues_within_the_line_count(width, count):
    t = transcript()
    found = cues(t, SubtitleOptions(max_line_width=width, max_line_count=count))
    lines = [line for _, _, text in found for line in text.split("\n")]
    assert all(len(line) <= width or " " not in line for line in lines)  # a longer line is one word
    assert any(len(line) > width for line in lines) == (width < len("Unbreakable-supercalifragilistic"))
    assert " ".join(lines).split() == " ".join(SENTENCES).split()  # every word once, in order
    for segment in t.segments:  # within a segment no line could have taken the next line's first word
        own = [line for start, _, text in found if segment.start <= start < segment.end for line in text.split("\n")]
        assert " ".join(own) == segment.text
        assert all(len(f"{a} {b.split()[0]}") > width for a, b in zip(own, own[1:]))
    if count is None:  # a segment's lines in one cue, timed as the segment
        assert [(start, end) for start, end, _ in found] == [(s.start, s.end) for s in t.segments]
    else:
        assert all(text.count("\n") < count for _, _, text in found)
        words = [w for s in t.segments for w in s.words]
        starts = {w.start for w in words}
        assert all(start in starts for start, _, _ in found)  # cut at words, timed by them
        assert all(a[1] <= b[0] for a, b in zip(found, found[1:]))
        by_segment = [sum(1 for start, _, _ in found if s.start <= start < s.end) for s in t.segments]
        assert len(found) == sum(by_segment)  # no cue spans two segments


def test_words_per_line_keep_a_cue_a_line_unless_a_count_is_given():
    t = transcript()
    one_line = cues(t, SubtitleOptions(max_words_per_line=3))
    assert all("\n" not in text and len(text.split()) <= 3 for _, _, text in one_line)
    assert " ".join(text for _, _, text in one_line) == " ".join(SENTENCES)
    two_lines = cues(t, SubtitleOptions(max_words_per_line=3, max_line_count=2))
    assert len(two_lines) < len(one_line)
    assert [line for _, _, text in two_lines for line in text.split("\n")] == [text for _, _, text in one_line]


def test_without_word_times_a_segment_is_wrapped_but_not_cut():
    t = transcript(with_words=False)
    found = cues(t, SubtitleOptions(max_line_width=20, max_line_count=1))
    assert [(start, end) for start, end, _ in found] == [(s.start, s.end) for s in t.segments]
    assert all(len(line) <= 20 or " " not in line for _, _, text in found for line in text.split("\n"))
    assert [text.replace("\n", " ") for _, _, text in found] == SENTENCES


def test_srt_and_vtt_write_a_cues_lines_and_tsv_the_segments_in_milliseconds():
    t = transcript()
    layout = SubtitleOptions(max_line_width=42, max_line_count=2)
    srt = render(t, "srt", layout)
    assert srt.startswith("1\n00:00:00,500 --> ") and "When I was a kid, the disaster we worried\nabout" in srt
    assert render(t, "vtt", layout).startswith("WEBVTT\n\n00:00:00.500 --> ")
    tsv = render(t, "tsv", layout).splitlines()
    assert tsv[0] == "start\tend\ttext" and len(tsv) == 1 + len(t.segments)
    assert tsv[1] == f"500\t{round(1000 * t.segments[0].end)}\t{SENTENCES[0]}"


@pytest.mark.parametrize("layout", [SubtitleOptions(highlight_words=True),
                                    SubtitleOptions(highlight_words=True, max_line_width=20, max_line_count=2)])
def test_highlighted_words_are_underlined_one_at_a_time_while_spoken(layout):
    t = transcript()
    words = [w for s in t.segments for w in s.words]
    late = t.segments[1].words[3]
    late.start += 0.2  # a pause before it: a cue of its own, nothing underlined
    found = cues(t, layout)
    underlined = [(start, end, text) for start, end, text in found if "<u>" in text]
    assert [(start, end) for start, end, _ in underlined] == [(w.start, w.end) for w in words]
    assert [re.findall(r"<u>(.*?)</u>", text) for _, _, text in underlined] == [[w.word.strip()] for w in words]
    previous = words[words.index(late) - 1]
    assert [(start, end) for start, end, text in found if "<u>" not in text] == [(previous.end, late.start)]
    # markup aside, each cue is a cue of the same layout without highlighting, lines and all
    plain = {text for _, _, text in cues(t, replace(layout, highlight_words=False))}
    assert {text.replace("<u>", "").replace("</u>", "") for _, _, text in found} == plain
    assert all(a[1] <= b[0] for a, b in zip(found, found[1:]))
    assert "a <u>kid,</u>" in render(t, "srt", layout) and "a <u>kid,</u>" in render(t, "vtt", layout)


@pytest.mark.parametrize("field", ["max_words_per_line", "max_line_width", "max_line_count"])
def test_a_layout_refuses_nothing_per_line(field):
    with pytest.raises(ValueError, match=f"{field} must be >= 1"):
        SubtitleOptions(**{field: 0})


def test_an_output_whose_name_is_as_long_as_the_file_system_allows_is_written(tmp_path):
    """A 250-byte name is legal; its temporary file's name must not be longer (it was: Errno 36 after
    decoding, nothing written)."""
    from whisper_spec.outputs.writers import write_atomic

    path = tmp_path / ("é" * 120 + "talk.json")  # 249 bytes in UTF-8
    assert len(path.name.encode()) >= 245
    write_atomic(path, "{}")
    assert path.read_text() == "{}" and [p.name for p in tmp_path.iterdir()] == [path.name]


def test_a_failed_write_names_the_output_it_was_for(tmp_path, monkeypatch):
    """A full disk (ENOSPC, raised here for the temporary file's write, as the OS does) ends with the
    output's name, and no temporary file is left."""
    import errno
    from pathlib import Path

    from whisper_spec.outputs.writers import write_atomic

    def full(self, *args, **kwargs):
        self.touch()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(OSError) as failure:
        write_atomic(tmp_path / "talk.srt", "1")
    assert failure.value.filename == str(tmp_path / "talk.srt") and failure.value.errno == errno.ENOSPC
    assert list(tmp_path.iterdir()) == []
