"""Long audio: speech chunks (VAD) and windows one after another; no speech dropped, none invented in
pauses and quiet tails, word times out of pauses, and speculative == main-only in both modes."""

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch
from conftest import main_alone, manifest, speech

from whisper_spec.bench.made_audio import Spoken, language_switching, music, podcast, words_outside
from whisper_spec.bench.metrics import normalize, word_error_rate
from whisper_spec.longform.pipeline import transcribe
from whisper_spec.longform.segments import Segment, keep_to_speech, skipped_stretch, without_blips
from whisper_spec.longform.timing import Word
from whisper_spec.longform.transcript import Transcript
from whisper_spec.longform.windows import plan_file
from whisper_spec.models.pair import WhisperPair, decoder_subset
from whisper_spec.models.tokenizer import TIME_PRECISION
from whisper_spec.options import ChunkingOptions, DecodingOptions, SubtitleOptions, VadOptions
from whisper_spec.outputs.writers import render, to_srt
from whisper_spec.speech.audio import SAMPLE_RATE, load_audio
from whisper_spec.speech.vad import VAD_FRAME, SpeechDetector, clamp_to_speech, padded, plan_chunks

LONG = ["longform/bill_gates-TED-next-epidemic-excerpt.flac",
        "longform/librispeech-test-other_1688-142285_0000-0009.flac",
        "unlabeled/talk-128s.mp3"]
MODES = {"vad": ChunkingOptions(vad=True), "sequential": ChunkingOptions(vad=False)}
S = SAMPLE_RATE


def test_chunks_are_fewest_and_cut_at_the_longest_pauses():
    # speech of 10, 7, 8, 5 and 6 s with pauses of 1, 3, 0.5 and 2 s between them
    lengths, pauses = [10, 7, 8, 5, 6], [1, 3, 0.5, 2]
    regions, t = [], 0.0
    for i, length in enumerate(lengths):
        regions.append((int(t * S), int((t + length) * S)))
        t += length + (pauses[i] if i < len(pauses) else 0)
    chunks = plan_chunks(regions, 30 * S)
    assert len(chunks) == 2  # 47 s from the first word to the last: two chunks at least
    assert chunks == [(regions[0][0], regions[1][1]), (regions[2][0], regions[4][1])]  # cut at the 3 s pause
    assert all(b - a <= 30 * S for a, b in chunks)
    assert plan_chunks([], 30 * S) == []
    assert plan_chunks(regions[:1], 30 * S) == [regions[0]]


def test_word_times_move_out_of_pauses():
    speech_ = [(10 * S, 20 * S), (55 * S, 60 * S)]
    words = [(40.0, 56.2), (19.5, 30.0), (12.0, 13.0), (30.0, 31.0)]
    assert clamp_to_speech(words, speech_) == [
        (55.0, 56.2),  # stretched back over a 35 s pause
        (19.5, 20.0),
        (12.0, 13.0),
        (30.0, 31.0),  # all in a pause: nowhere to move it
    ]
    assert padded([(S, 2 * S), (3 * S, 4 * S)], 0.4, 5 * S) == [(int(0.6 * S), int(2.4 * S)), (int(2.6 * S), int(4.4 * S))]
    # a pause shorter than two pads is shared half and half
    assert padded([(S, 2 * S), (3 * S, 4 * S)], 0.6, 5 * S) == [(int(0.4 * S), int(2.5 * S)), (int(2.5 * S), int(4.6 * S))]


def test_a_word_stretched_over_speech_marks_a_skip():
    """FLEURS en joined, --no-vad: a window at 18.66 s gave "The hospital ..." (spoken from 44.26 s)
    from its start, DTW stretching " The" and " hospital" back over 20 s of a quieter speaker."""
    voiced = [(int(a * S), int(b * S)) for a, b in [(20.74, 26.5), (26.98, 31.23), (32.61, 37.54), (38.78, 42.5),
                                                    (44.26, 52.61)]]
    offset = int(18.66 * S)

    def segment(*words):
        return Segment(words[0][1], words[-1][2], "", [], [Word(w, a, b, 1.0, []) for w, a, b in words])

    skipped = skipped_stretch([segment((" The", 0.0, 18.86), (" hospital", 18.86, 26.0), (" has", 26.0, 26.26))],
                              voiced, offset, 30 * S)
    # from the segment's start to the middle of the pause before the speech " hospital" ends in
    assert skipped == (0, (int(42.5 * S) + int(44.26 * S)) // 2 - offset)
    # a word ending in a pause: the speech after it
    assert skipped_stretch([segment((" The", 0.0, 24.1), (" hospital", 24.1, 24.6))], voiced, offset, 30 * S) == skipped
    # words of their own length, or one over a pause: nothing skipped
    assert skipped_stretch([segment((" Then", 1.0, 1.4), (" we", 1.4, 1.9))], voiced, offset, 30 * S) is None
    assert skipped_stretch([segment((" now", 12.0, 14.5))], voiced, offset, 30 * S) is None  # 1.1 s of speech
    assert skipped_stretch([], voiced, offset, 30 * S) is None


def test_vad_settings_are_checked():
    with pytest.raises(ValueError, match="VAD threshold"):
        VadOptions(threshold=1.5)
    with pytest.raises(ValueError, match="VAD speech pad"):
        VadOptions(speech_pad=-1)
    with pytest.raises(ValueError):
        ChunkingOptions(chunk_length=40)


def _utterance(path: str) -> np.ndarray:
    return load_audio(speech(path))


def _room_tone(seconds: float, seed: int) -> np.ndarray:
    """Steady low noise (-60 dBFS), a quiet room's hum, not speech."""
    noise = np.random.default_rng(seed).standard_normal(int(seconds * S)).astype(np.float32)
    return np.convolve(noise, np.ones(8, np.float32) / 8, mode="same") * 0.003


@pytest.fixture(scope="module")
def detector() -> SpeechDetector:
    return SpeechDetector()


def test_voice_activity_finds_speech_and_not_the_pauses(detector):
    words = _utterance("librispeech/test-clean/1221-135766-0002.flac")
    audio = np.concatenate([_room_tone(3, 0), words, np.zeros(60 * S, np.float32), words, _room_tone(20, 1)])
    regions = detector.regions(audio, VadOptions(), 30.0)
    first_end = (3 * S + len(words)) / S
    second = (first_end + 60, first_end + 60 + len(words) / S)
    assert regions and all(b - a <= 30 * S for a, b in regions)
    assert all(b / S <= first_end + 0.5 or a / S >= second[0] - 0.5 for a, b in regions), regions
    assert all(a / S >= 3 - 0.5 and b / S <= second[1] + 0.5 for a, b in regions), regions


def _quieter(audio: np.ndarray, peak: float) -> np.ndarray:
    return audio * (peak / np.abs(audio).max())


def test_voice_activity_hears_a_quiet_speaker_after_a_loud_one(detector):
    """Silero's state, carried from loud speech, misses a quieter speaker (FLEURS en joined lost 5 s
    so); the stretches it heard nothing in are heard again on their own."""
    loud, quiet = (_utterance(p) for p in ("librispeech/test-clean/1089-134686-0001.flac",
                                           "librispeech/test-clean/1221-135766-0001.flac"))
    for peak in (0.005, 0.001):
        audio = np.concatenate([loud, np.zeros(S // 2, np.float32), _quieter(quiet, peak)])
        regions = detector.regions(audio, VadOptions(), 30.0)
        start = len(loud) + S // 2
        heard = sum(max(0, min(b, len(audio)) - max(a, start)) for a, b in regions)
        assert heard >= 0.8 * len(quiet), (peak, regions)


# Joined recordings of shared utterances, as a user's long file: (utterances, leading seconds, pauses
# between them, quiet tail). The first is issue 43's: six clips joined, cut at 5.79 s and 60 s later.
UNLABELED = "unlabeled/librispeech-train-clean-100/"
REPRO = ["librispeech/test-clean/1221-135766-0001.flac", "librispeech/test-clean/1221-135766-0002.flac",
         "librispeech/dev-clean/1272-128104-0000.flac", UNLABELED + "103-1240-0000.flac",
         UNLABELED + "1034-121119-0000.flac", UNLABELED + "1040-133433-0000.flac"]


# Faster than anyone speaks (fast read speech is 15-20), with room for coarse timestamps
MOST_CHARACTERS_A_SECOND = 45


def _characters_a_second(segment: Segment) -> float:
    return len(segment.text.strip()) / max(segment.end - segment.start, TIME_PRECISION)


def _repeated_beyond(said: list[str], read: list[str], n: int) -> list[str]:
    """The n-word phrases the transcript has twice or more, more often than the text read does."""
    def counts(words):
        return Counter(" ".join(words[i : i + n]) for i in range(len(words) - n + 1))
    theirs = counts(read)
    return [phrase for phrase, times in counts(said).items() if times > max(theirs[phrase], 1)]


def _joined(parts: list[np.ndarray], lead: float, pauses: list[float], tail: float) -> tuple[np.ndarray, list[np.ndarray]]:
    pieces = [_room_tone(lead, 2)] if lead else []
    for i, part in enumerate(parts):
        pieces.append(part)
        if i < len(parts) - 1:
            pieces.append(_room_tone(pauses[i % len(pauses)], 3 + i))
    pieces.append(_room_tone(tail, 9))
    return np.concatenate(pieces), parts


def _recordings():
    parts = [_utterance(p) for p in REPRO]
    joined = np.concatenate(parts)[int(5.79 * S): int(65.79 * S)]
    bounds = np.cumsum([0] + [len(p) for p in parts]) - int(5.79 * S)
    repro_parts = [joined[max(a, 0): max(min(b, len(joined)), 0)] for a, b in zip(bounds, bounds[1:])]
    yield "issue 43's 60 s", joined, [p for p in repro_parts if len(p) > S]
    yield "leading silence, short pauses, quiet tail", *_joined(parts, 7.0, [0.3, 1.2, 0.6], 12.0)
    yield "long pauses", *_joined(parts[:4], 0.0, [4.0, 11.0, 2.5], 3.0)
    yield "a quiet speaker after loud ones", *_joined(parts[:2] + [_quieter(parts[2], 0.01)] + parts[3:5], 0.0, [0.5, 1.5], 1.0)


@pytest.fixture(scope="module")
def long_pair(base_pair):
    """base with an untrained assistant of five of its six decoder layers: most drafts accepted, not all."""
    return WhisperPair(base_pair.main, decoder_subset(base_pair.main, [0, 1, 2, 3, 5]), base_pair.device, base_pair.dtype)


JOINED_OPTIONS = DecodingOptions(language="en")


@pytest.fixture(scope="module")
def joined_recordings(long_pair, tmp_path_factory):
    """(name, path, what the main model writes for each utterance in it transcribed alone, joined)."""
    folder = tmp_path_factory.mktemp("joined")
    recordings = []
    for i, (name, audio, parts) in enumerate(_recordings()):
        path = folder / f"joined_{i}.wav"
        soundfile.write(path, audio, S)
        part_paths = []
        for j, part in enumerate(parts):
            part_paths.append(folder / f"joined_{i}_part_{j}.wav")
            soundfile.write(part_paths[-1], part, S)
        alone = " ".join(r.text for r in transcribe(long_pair, part_paths, main_alone(JOINED_OPTIONS), batch_size=4))
        recordings.append((name, path, alone))
    return recordings


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_joined_recordings_keep_every_word(long_pair, joined_recordings, mode):
    options = JOINED_OPTIONS
    for name, path, alone in joined_recordings:
        main_only, speculative = (next(transcribe(long_pair, [path], mode_options, chunking=MODES[mode]))
                                  for mode_options in (main_alone(options), options))
        assert main_only.text == speculative.text
        wer = word_error_rate([alone], [main_only.text], ["en"])
        print(f"{mode}, {name}: WER {wer:.4f} against the utterances alone")
        assert wer <= 0.04, (name, main_only.text, alone)


UNCLEAR_OPENING = "librispeech/test-other/2414-128291-0008.flac"
CLEAR_RECORDINGS = [speech(f"librispeech/test-clean/1089-134686-000{i}.flac") for i in range(3)]


@pytest.fixture(scope="module")
def unclear_opening(tmp_path_factory):
    """A 3 s English clip base hears as another language (Arabic at 0.16 on an AMD EPYC, which made
    the whole file Arabic), 35 s of room tone, then three English utterances."""
    audio, _ = _joined([_utterance(p) for p in [UNCLEAR_OPENING, *CLEAR_RECORDINGS]], 0.0, [35.0, 0.8, 0.8], 0.8)
    path = tmp_path_factory.mktemp("opening") / "opening.wav"
    soundfile.write(path, audio, S)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_a_short_unclear_opening_does_not_decide_the_language_of_the_file(base_pair, unclear_opening, mode):
    """The file is English, its text the English utterances'."""
    result = next(transcribe(base_pair, [unclear_opening], DecodingOptions(), chunking=MODES[mode]))
    assert result.language == "en" and result.language_probability >= 0.5, result.text
    alone = " ".join(r.text for r in transcribe(base_pair, CLEAR_RECORDINGS, DecodingOptions(language="en")))
    assert word_error_rate([alone], [result.text], ["en"]) <= 0.1, result.text  # the opening's few words aside


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_detecting_a_files_language_encodes_no_window_twice(base_pair, unclear_opening, mode):
    """The windows the detection encodes are decoded from those states: the encoder reads as many
    windows as with the language given, and the text is the same. Speech chunks: the opening is
    unclear, so the detection reads the chunk after it too. Windows one after another: a clear
    opening, whose window alone decides (the chunks an unclear one adds are not the windows decoded)."""
    path = unclear_opening if mode == "vad" else speech(LONG[1])
    encoded = []
    hook = base_pair.main.encoder.register_forward_hook(lambda module, args, output: encoded.append(len(output)))
    try:
        runs = {}
        for language in (None, "en"):
            encoded.clear()
            result = next(transcribe(base_pair, [path], DecodingOptions(language=language), chunking=MODES[mode]))
            runs[language] = result, sum(encoded)
    finally:
        hook.remove()
    (detected, detected_windows), (given, given_windows) = runs[None], runs["en"]
    assert detected.language == "en" and detected.text == given.text
    assert detected_windows == given_windows, (detected_windows, given_windows)


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_speech_that_changes_language_between_windows_is_written_in_each_language(base_pair, tmp_path, mode):
    """Three English utterances, a pause, three German ones (FLEURS): each window in its own language
    where it is sure of it, so the German in German, not translated into the file's English; the JSON
    names a segment's language where it is not the transcript's."""
    english = [speech(f"librispeech/test-clean/1089-134686-000{i}.flac") for i in range(3)]
    german = [speech(f"fleurs/fleurs-de-00{i}.ogg") for i in range(3)]
    audio, _ = _joined([_utterance(p) for p in english + german], 0.0, [1.0, 1.0, 8.0, 1.0, 1.0], 1.0)
    path = tmp_path / "en_de.wav"
    soundfile.write(path, audio, S)
    switch = (sum(len(_utterance(p)) for p in english) + 2 * S) / S  # the English ends, the pause begins
    result = next(transcribe(base_pair, [path], DecodingOptions(), chunking=MODES[mode]))
    assert [s.language for s in result.segments] == ["en" if s.start < switch else "de" for s in result.segments]
    alone = " ".join(r.text for r in transcribe(base_pair, german, DecodingOptions(language="de")))
    said = " ".join(s.text for s in result.segments if s.language == "de")
    assert word_error_rate([alone], [said], ["de"]) <= 0.1, said
    languages = [s.get("language", result.language) for s in result.as_dict()["segments"]]  # named where not the file's
    assert languages == [s.language for s in result.segments] and "de" in languages and "en" in languages


@pytest.fixture(scope="module")
def switching_recording(tmp_path_factory) -> tuple[Path, list[Spoken], list[str]]:
    """German, English, French, Spanish (a FLEURS clip each, 55 s), a second of room tone between
    them: every speech chunk holds two languages. Also the clips' paths."""
    rows = [next(r for r in manifest() if r["set"] == f"fleurs_{language}") for language in ("de", "en", "fr", "es")]
    clips = [str(speech(r["path"])) for r in rows]
    audio, spoken = language_switching([(load_audio(c), r["text"], r["language"]) for c, r in zip(clips, rows)])
    path = tmp_path_factory.mktemp("switching") / "de_en_fr_es.wav"
    soundfile.write(path, audio, S)
    return path, spoken, clips


@pytest.mark.slow
def test_speech_that_changes_language_within_a_chunk_is_cut_and_written_in_each_language(base_pair, switching_recording):
    """Each part in its own language (the chunk cut where its pieces change language) with about the
    WER of its clip transcribed alone; the same output alone at batch 1 and beside another file at
    batch 4 (what decides a chunk's language is its audio and its neighbours', not its batch)."""
    path, spoken, clips = switching_recording
    short = str(speech("librispeech/test-clean/1089-134686-0000.flac"))
    alone = next(transcribe(base_pair, [path], DecodingOptions(), batch_size=1))
    beside = list(transcribe(base_pair, [short, path], DecodingOptions(), batch_size=4))[1]
    assert json.dumps(alone.as_dict()["segments"]) == json.dumps(beside.as_dict()["segments"])
    parts = [[s for s in alone.segments if u.start - 0.5 <= (s.start + s.end) / 2 < u.end + 0.5] for u in spoken]
    assert all(part and {s.language for s in part} == {u.language} for part, u in zip(parts, spoken)), \
        [[(s.start, s.end, s.language) for s in part] for part in parts]
    languages = [u.language for u in spoken]
    joined = word_error_rate([u.text for u in spoken], [" ".join(s.text for s in part) for part in parts], languages)
    one_by_one = word_error_rate([u.text for u in spoken], [r.text for r in transcribe(base_pair, clips)], languages)
    assert joined <= one_by_one + 0.05, (joined, one_by_one)


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_no_text_in_a_long_pause_or_a_quiet_tail_and_no_word_inside_them(base_pair, tmp_path, mode):
    words = _utterance("librispeech/test-clean/1221-135766-0002.flac")
    audio = np.concatenate([words, _room_tone(60, 4), words, _room_tone(20, 5)])
    path = tmp_path / "pause.wav"
    soundfile.write(path, audio, S)
    first_end, second_start = len(words) / S, len(words) / S + 60
    last_speech = second_start + len(words) / S
    result = next(transcribe(base_pair, [path], DecodingOptions(language="en", word_timestamps=True),
                             chunking=MODES[mode]))
    assert result.text.lower().count("apprehension") == 2, result.text
    for segment in result.segments:
        assert segment.end <= first_end + 0.5 or segment.start >= second_start - 0.5, (segment.start, segment.end)
        assert segment.end <= last_speech + 0.5
        for word in segment.words:
            assert not first_end + 0.5 < word.start < second_start - 0.5, word
            assert word.end <= last_speech + 0.5
            assert word.end > word.start or word.end == word.start  # ordered
    cues = to_srt(result, SubtitleOptions(max_words_per_line=1)).split("\n\n")
    assert len(cues) == sum(len(s.words) for s in result.segments)
    for cue in cues:  # none of no length
        start, end = cue.splitlines()[1].split(" --> ")
        assert end > start, cue


LONG_OPTIONS = DecodingOptions(speculation="on", timestamps=True, draft_tokens=4)


@pytest.fixture(scope="module")
def long_main_only(long_pair):
    """A cutting mode's main-only transcripts of LONG at batch 1, made once for both batch sizes (a
    file's transcript does not depend on the rest of its batch: test_a_files_outputs_do_not_depend...)."""
    made = {}

    def of(mode: str) -> list:
        if mode not in made:
            made[mode] = list(transcribe(long_pair, [speech(p) for p in LONG], main_alone(LONG_OPTIONS), batch_size=1,
                                         chunking=MODES[mode]))
        return made[mode]
    return of


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("batch_size", [1, 4])
def test_speculative_long_form_equals_main_only(long_pair, long_main_only, batch_size, mode):
    paths = [speech(p) for p in LONG]
    options = LONG_OPTIONS
    main_only = long_main_only(mode)
    events = []  # in the order they happen: windows finished, segments handed on, transcripts yielded
    speculative = []
    for result in transcribe(long_pair, paths, options, batch_size=batch_size, chunking=MODES[mode],
                             on_window=lambda seconds: events.append(("window", None, None)),
                             on_segments=lambda path, segments: events.append(("segments", path, segments))):
        events.append(("transcript", result.path, None))
        speculative.append(result)
    for result in speculative:  # each file's segments handed on as they are final: the transcript's own, in order
        mine = [i for i, (kind, path, _) in enumerate(events) if path == result.path]
        assert [s for i in mine[:-1] for s in events[i][2]] == result.segments
        assert all(x is y for x, y in zip((s for i in mine[:-1] for s in events[i][2]), result.segments))
        assert events[mine[-1]][0] == "transcript"
        assert any(kind == "window" for kind, _, _ in events[mine[0]:mine[-1]])  # before its last window finished
    for a, b in zip(main_only, speculative):
        assert a.text == b.text and a.text
        # segments with their times and their windows' figures (avg_logprob among them): the same JSON
        assert a.as_dict()["segments"] == b.as_dict()["segments"]
        assert a.language == b.language == "en" and a.language_probability == b.language_probability > 0.5
        assert all(s.avg_logprob is not None and s.no_speech_prob is not None for s in b.segments)
        assert b.stats.windows >= 3 and 0 < b.stats.acceptance < 1
        assert b.segments[-1].end <= b.duration + 1e-6
        assert all(x.start <= x.end <= y.start + 1e-6 for x, y in zip(b.segments, b.segments[1:]))
        # a segment (a subtitle cue) starts with a word, never inside one ("Mr. H" | "ale" at a seam)
        assert all(long_pair.main.tokenizer.decode(s.tokens[:1]).startswith(" ") for s in b.segments)
    assert speculative[2].duration == pytest.approx(128.486, abs=0.01)


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_the_end_of_a_recording_is_transcribed(base_pair, mode):
    """Whisper ends this chapter's text early in the window that holds its end (the last sentence
    left for a next window). Windows one after another decode the rest again; a speech chunk's text
    is held open to the end of its speech (windows.end_floor), so no chunk needs a window more."""
    path = speech("longform/librispeech-test-other_2414-128291_0000-0009.flac")
    audio, rate = soundfile.read(path, dtype="float32")
    loud = np.flatnonzero(np.abs(audio) > 0.02)
    last_speech = (loud[-1] + 1) / rate
    result = next(transcribe(base_pair, [path], DecodingOptions(language="en"), chunking=MODES[mode]))
    assert abs(result.segments[-1].end - last_speech) <= 2.0
    assert result.text.lower().rstrip(".").endswith("behold this kind")  # the reference: "BEHOLD THESE KINE"
    if mode == "vad":
        assert result.stats.windows == len(plan_file(0, str(path), audio, MODES[mode], base_pair.speech_detector).windows)


@pytest.mark.slow
def test_a_chunk_held_open_to_its_speech_end_gets_no_invented_text(base_pair):
    """Two 5-minute synthetic readings (unlabeled_tts: their texts are known) whose chunks Whisper
    closes a little short of where their speech ends. Held open too close to that end, it had to go
    on and wrote a sentence it had already written ("... was a slow decline of streetcar systems."
    again, 13 words in 0.5 s) or repeated the words before ("les préoccupations étiques,"). No
    segment may be faster than speech, nor any phrase of the transcript repeat more often than the
    text read has it."""
    tts = "unlabeled/tts_multilingual"
    readings = {"en-jesscia": "en", "fr-manon": "fr"}
    paths = [speech(f"{tts}/{name}.ogg") for name in readings]
    languages = {str(path): language for path, language in zip(paths, readings.values())}
    results = transcribe(base_pair, paths, DecodingOptions(), batch_size=4, languages=languages)
    for (name, language), result in zip(readings.items(), results):
        fastest = max(result.segments, key=_characters_a_second)
        print(f"{name}: fastest segment {_characters_a_second(fastest):.0f} characters a second: {fastest}")
        assert _characters_a_second(fastest) <= MOST_CHARACTERS_A_SECOND, (name, fastest)
        said = normalize(result.text, language).split()
        read = normalize(speech(f"{tts}/texts/{language}-sample.txt").read_text(), language).split()
        assert not _repeated_beyond(said, read, 4), (name, _repeated_beyond(said, read, 4))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.jit.load, inside the package's loader
def test_batched_voice_activity_equals_the_package_model_frame_by_frame(detector):
    import silero_vad

    threads = torch.get_num_threads()
    audio = np.concatenate([_room_tone(1, 6), _utterance("librispeech/test-clean/1221-135766-0002.flac")])
    model = silero_vad.load_silero_vad()
    torch.set_num_threads(threads)  # the package's import sets one thread
    frames = torch.from_numpy(np.pad(audio, (0, -len(audio) % VAD_FRAME))).split(VAD_FRAME)
    packaged = np.array([model(frame, SAMPLE_RATE).item() for frame in frames])
    ours = np.array(detector.probabilities(audio))
    assert ours.shape == packaged.shape and packaged.max() > 0.9 and packaged.min() < 0.1
    np.testing.assert_allclose(ours, packaged, atol=1e-4)


def test_text_over_a_quiet_stretch_is_dropped_and_words_leave_pauses():
    speech_ = [(0, 10 * S), (20 * S, 30 * S), (40 * S, 41 * S)]  # padded
    voiced = [(S // 2, 9 * S), (21 * S, 29 * S), (int(40.4 * S), int(40.5 * S))]  # the last a blip in music
    said = Segment(5.0, 12.0, "said", [1], [Word(" said", 5.0, 12.0, 0.9, [1])])
    late = Segment(12.0, 19.5, "Thank you.", [2])  # over the pause
    after = Segment(14.0, 24.0, "after", [3], [Word(" after", 14.0, 24.0, 0.9, [3])])  # 40% speech
    # its first word stretched from the speech before a pause over the pause (DTW)
    spanning = Segment(8.0, 23.0, "the dose", [4, 5], [Word(" the", 8.0, 21.5, 0.9, [4]), Word(" dose", 21.5, 23.0, 0.9, [5])])
    untimed = Segment(15.0, 25.0, "no words", [6])  # Whisper's timestamps only: it starts in the pause
    blip = Segment(40.0, 41.0, "F.", [7])  # a tenth of its second voiced, and that a lone blip
    kept = keep_to_speech([said, late, after, spanning, untimed, blip], speech_, voiced)
    assert [s.text for s in kept] == ["said", "after", "the dose", "no words"]
    assert [(s.start, s.end) for s in kept] == [(5.0, 10.0), (20.0, 24.0), (20.0, 23.0), (20.0, 25.0)]
    assert (kept[2].words[0].start, kept[2].words[0].end) == (20.0, 21.5)
    # a word inside a segment spanning a pause goes where more of its time is voiced
    across = Segment(7.0, 25.0, "seek answered he", [9, 10, 11], [
        Word(" seek", 7.0, 8.5, 0.9, [9]), Word(" answered", 8.5, 22.0, 0.9, [10]), Word(" he", 22.0, 25.0, 0.9, [11])])
    (kept_across,) = keep_to_speech([across], speech_, voiced)
    assert [(w.start, w.end) for w in kept_across.words] == [(7.0, 8.5), (20.0, 22.0), (22.0, 25.0)]
    # a lone voiced blip under half its segment does not make it heard; a blip beside speech does
    onset = [(S, 9 * S), (int(9.8 * S), int(10.05 * S))]
    assert without_blips(onset) == [onset[0]]
    assert without_blips([(S, 9 * S), (int(9.3 * S), int(9.5 * S))]) == [(S, 9 * S), (int(9.3 * S), int(9.5 * S))]
    assert keep_to_speech([Segment(9.6, 10.1, "Pfff.", [8])], [(0, int(10.5 * S))], onset) == []


def test_a_subtitle_cue_always_has_a_length():
    word = Word(" Hi.", 3.0, 3.0, 0.9, [1])
    transcript = Transcript("x.wav", "Hi.", "en", 5.0, [Segment(3.0, 3.0, "Hi.", [1], [word])])
    for layout in (SubtitleOptions(), SubtitleOptions(max_words_per_line=1), SubtitleOptions(max_line_width=42)):
        assert "00:00:03,000 --> 00:00:03,020" in to_srt(transcript, layout)


@pytest.fixture(scope="module")
def podcast_recording(tmp_path_factory) -> tuple[Path, list[Spoken]]:
    """A podcast-style recording (made_audio.podcast) and where its speech lies: 5 LibriSpeech clips
    with a music intro, music, a pause, noise and a short pause between them and a music outro, ~90 s."""
    rows = [r for r in manifest() if r["set"] == "librispeech"][30:35]
    audio, spoken = podcast([(load_audio(str(speech(r["path"]))), r["text"], "en") for r in rows], seed=7)
    path = tmp_path_factory.mktemp("podcast") / "podcast.wav"
    soundfile.write(path, audio, SAMPLE_RATE)
    return path, spoken


@pytest.fixture(scope="module")
def podcast_file(podcast_recording) -> Path:
    return podcast_recording[0]


@pytest.mark.slow
def test_no_text_over_music_pauses_or_noise_and_cues_on_their_speech(long_pair, podcast_recording, tmp_path):
    """Both modes: no word outside the utterances (0.5 s either side), no sentence written twice, every
    cue within 0.5 s of the speech it covers, the speech all there (WER against the clips' references
    under 25%: base on test-other); 20 s of music alone and 0.3 s of it give no text."""
    path, spoken = podcast_recording
    music_only, sub_second = tmp_path / "music.wav", tmp_path / "short.wav"
    soundfile.write(music_only, music(20.0, seed=11), SAMPLE_RATE)
    soundfile.write(sub_second, music(0.3, seed=12), SAMPLE_RATE)
    options = DecodingOptions(speculation="on", word_timestamps=True)
    results = {}
    for mode in (main_alone(options), options):
        transcript, music_text, short_text = transcribe(long_pair, [str(path), str(music_only), str(sub_second)], mode,
                                                        batch_size=4)
        assert music_text.text == "" and short_text.text == ""
        words = [(w.start, w.end) for s in transcript.segments for w in s.words]
        assert words_outside(words, spoken) == 0, [s.text for s in transcript.segments]
        texts = [normalize(s.text, "en") for s in transcript.segments if len(s.text.split()) >= 3]
        assert len(texts) == len(set(texts)), texts
        for segment in transcript.segments:  # within 0.5 s of the utterances it covers
            covered = [u for u in spoken if u.start < segment.end and segment.start < u.end]
            assert covered and covered[0].start - 0.5 <= segment.start and segment.end <= covered[-1].end + 0.5, (
                f"cue off its speech: {segment.start:.2f}-{segment.end:.2f} {segment.text!r}")
        references = " ".join(u.text for u in spoken)
        assert word_error_rate([references], [transcript.text], ["en"]) < 0.25
        results[mode.speculation] = transcript.as_dict()["segments"]
    assert results["off"] == results["on"]


@pytest.mark.slow
@pytest.mark.parametrize("words", [False, True])
def test_a_files_outputs_do_not_depend_on_the_rest_of_its_job(base_pair, podcast_file, words):
    """The same long file alone, beside a short file, beside three (before and after it), at batch 1
    and 4: byte-identical srt and JSON segments, times and words included. Its windows share batches
    with the others' in every case but the first (a window was timed word by word with its batch
    whenever any window of the batch needed it, and its cues moved by up to 3 s)."""
    short = [str(speech(p)) for p in ("librispeech/dev-clean/1272-128104-0000.flac",
                                      "librispeech/test-clean/1089-134686-0000.flac", "fleurs/fleurs-de-001.ogg")]
    long = str(podcast_file)
    options = DecodingOptions(word_timestamps=words)
    outputs = set()
    for before, after, batch_size in (([], [], 1), ([], [], 4), ([], short[:1], 4), (short, [], 4), (short[1:2], short[2:], 2)):
        results = list(transcribe(base_pair, [*before, long, *after], options, batch_size=batch_size))
        transcript = results[len(before)]
        assert transcript.path == long and transcript.text
        outputs.add((render(transcript, "srt"), json.dumps(transcript.as_dict()["segments"])))
    assert len(outputs) == 1
