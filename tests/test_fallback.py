"""Temperature fallback: a window whose text loops or that the main model doubts is decoded again at
the next temperature, on the main model's verdict, so speculative and main-only decoding keep the
same texts; sampling draws the same tokens in both modes (sampling.sample_tokens)."""

from dataclasses import replace

import numpy as np
import pytest
import soundfile
import torch
from conftest import main_alone, manifest, mel_of, speech
from whisper_spec.cli.parser import build_parser

from whisper_spec.bench.metrics import longest_repeat, word_error_rate
from whisper_spec.decode.decoding import decode_encoded, encode_batch
from whisper_spec.decode.results import WindowResult, best_attempt, needs_fallback
from whisper_spec.decode.sampling import sample_tokens
from whisper_spec.decode.stats import DecodingStats
from whisper_spec.longform.pipeline import transcribe
from whisper_spec.models.load import load_pair
from whisper_spec.models.pair import WhisperPair, decoder_subset
from whisper_spec.models.sources import default_assistant
from whisper_spec.options import DecodingOptions, temperature_schedule
from whisper_spec.speech.audio import SAMPLE_RATE, load_audio

LONG = ["longform/bill_gates-TED-next-epidemic-excerpt.flac",
        "longform/librispeech-test-other_1688-142285_0000-0009.flac",
        "longform/librispeech-test-other_2414-128291_0000-0009.flac",
        "unlabeled/talk-128s.mp3"]


def test_temperatures_are_openai_whispers_schedule_and_the_flags_set_it():
    from whisper_spec.cli.common import temperatures_from

    assert DecodingOptions().temperature == (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    assert DecodingOptions(temperature=0.5).temperature == (0.5,)
    assert temperature_schedule(0.5, 0.25) == (0.5, 0.75, 1.0)
    assert temperature_schedule(0.0, None) == (0.0,)
    parse = build_parser().parse_args
    assert temperatures_from(parse(["transcribe", "a.wav"])) == DecodingOptions().temperature
    assert temperatures_from(parse(["transcribe", "a.wav", "--temperature", "0,0.5"])) == (0.0, 0.5)
    assert temperatures_from(parse(["transcribe", "a.wav", "--temperature-increment-on-fallback", "none"])) == (0.0,)
    assert temperatures_from(parse(["transcribe", "a.wav", "--temperature", "0.4",
                                "--temperature-increment-on-fallback", "0.3"])) == (0.4, 0.7, 1.0)
    with pytest.raises(SystemExit):
        parse(["transcribe", "a.wav", "--temperature", "0,-1"])
    with pytest.raises(ValueError):
        DecodingOptions(temperature=())


def result(ratio: float, logprob: float | None, no_speech: float | None = 0.01, temperature: float = 0.0):
    return WindowResult([1], "en", False, DecodingStats(windows=1, generated=2), no_speech_prob=no_speech,
                        avg_logprob=logprob, compression_ratio=ratio, temperature=temperature)


def test_the_verdict_and_the_text_kept_are_openai_and_faster_whispers():
    options = DecodingOptions()
    assert not needs_fallback(result(1.5, -0.3), options)
    assert needs_fallback(result(2.5, -0.3), options)  # loops
    assert needs_fallback(result(1.5, -1.2), options)  # doubted
    assert not needs_fallback(result(1.5, -1.2, no_speech=0.9), options)  # silence: the no-speech rule's
    assert needs_fallback(result(2.5, -0.3, no_speech=0.9), options)  # confident, so not silence
    assert not needs_fallback(result(2.5, -1.2), replace(options, compression_ratio_threshold=None,
                                                         logprob_threshold=None))
    # every temperature failed: the most probable text that does not loop, with every attempt's work
    attempts = [result(3.0, -0.2), result(1.8, -1.5, temperature=0.2), result(2.0, -1.1, temperature=0.4),
                result(2.6, -0.5, temperature=0.6)]
    kept = best_attempt(attempts, options)
    assert kept.temperature == 0.4
    assert kept.stats.fallbacks == 3 and kept.stats.windows == 1 and kept.stats.generated == 8
    assert best_attempt([result(3.0, -0.2), result(2.6, -0.1, temperature=0.2)], options).temperature == 0.2
    assert best_attempt([result(1.0, -0.1)], options) is not None


def test_sampled_tokens_follow_the_distribution_and_never_a_forbidden_one():
    logits = torch.tensor([[2.0, float("-inf"), 0.0, 1.0, float("-inf")]])
    n = 20000
    uniforms = (torch.arange(n, dtype=torch.float32) + 0.5) / n  # an even grid over (0, 1)
    tokens = sample_tokens(logits.expand(n, -1), 0.7, uniforms)
    frequencies = torch.bincount(tokens, minlength=5).float() / n
    assert torch.allclose(frequencies, torch.softmax(logits[0] / 0.7, dim=-1), atol=1e-3)
    # the ends of (0, 1) land on allowed tokens
    edges = sample_tokens(logits.expand(2, -1), 0.7, torch.tensor([2**-24, 1 - 2**-24]))
    assert edges.tolist() == [0, 3]


@pytest.fixture(scope="module")
def doubting_pair(base_pair):
    """Real base, an untrained assistant of three of its decoder layers."""
    return WhisperPair(base_pair.main, decoder_subset(base_pair.main, [0, 2, 5]), base_pair.device, base_pair.dtype)


@pytest.mark.slow
def test_windows_that_fail_try_every_temperature_alike_in_both_modes(doubting_pair):
    """With a log-probability threshold of 0 every text is doubted, so every window goes through
    every temperature: the sampled passes keep the same tokens with and without drafts, and each
    window keeps the most probable of its attempts."""
    clips = ["librispeech/test-other/1688-142285-0000.flac", "multilingual/de/thorsten_1386ecbb98a8f46dd0b0eb75d68ee0d0.flac",
             "librispeech/test-clean/1089-134686-0001.flac"]
    mel = mel_of([speech(c) for c in clips])
    options = DecodingOptions(speculation="on", logprob_threshold=0.0, no_speech_threshold=None)
    encoded, _ = encode_batch(doubting_pair, mel, options)  # every pass below decodes this one encoding
    greedy, _ = decode_encoded(doubting_pair, encoded, replace(options, temperature=0.0, speculation="off"))
    main_only, main_stats = decode_encoded(doubting_pair, encoded, main_alone(options), seeds=[1, 2, 3])
    speculative, stats = decode_encoded(doubting_pair, encoded, options, seeds=[1, 2, 3])
    assert [r.tokens for r in speculative] == [r.tokens for r in main_only]
    assert stats.fallbacks == main_stats.fallbacks == 5 * len(clips)
    assert stats.drafted > 0 and all(r.stats.fallbacks == 5 for r in speculative)
    assert all(r.avg_logprob is not None and r.temperature in options.temperature for r in main_only)
    # a sampled pass alone: the same draws in both modes, other texts than greedy's, other ones for other seeds
    hot = replace(options, temperature=1.0)
    sampled, _ = decode_encoded(doubting_pair, encoded, main_alone(hot), seeds=[1, 2, 3])
    assert [r.tokens for r in decode_encoded(doubting_pair, encoded, hot, seeds=[1, 2, 3])[0]] == [r.tokens for r in sampled]
    assert [r.tokens for r in sampled] != [r.tokens for r in greedy]
    reseeded, _ = decode_encoded(doubting_pair, encoded, main_alone(hot), seeds=[7, 8, 9])
    assert [r.tokens for r in reseeded] != [r.tokens for r in sampled]


@pytest.fixture(scope="module")
def default_pair():
    return load_pair("base", default_assistant("base"))


def joined_fleurs(language: str, folder) -> tuple:
    clips = [r for r in manifest() if r["set"] == f"fleurs_{language}"]
    gap = np.zeros(SAMPLE_RATE // 2, dtype=np.float32)
    path = folder / f"fleurs_{language}_joined.wav"
    soundfile.write(path, np.concatenate([a for r in clips for a in (load_audio(speech(r["path"])), gap)]), SAMPLE_RATE)
    return path, " ".join(r["text"] for r in clips)


@pytest.mark.slow
@pytest.mark.parametrize("language", ["fr", "de", "es", "pt", "en"])
def test_no_long_recording_transcript_loops(default_pair, tmp_path, language):
    """Each language's FLEURS clips joined into one recording. Whether greedy base loops on one of
    its windows ("petit petit petit ..." to the window's end) depends on the CPU's float arithmetic
    (it does on an AVX-512 EPYC without AMX, not on an AMX Xeon): whatever the CPU, no transcript
    repeats a word or phrase more than 3 times in a row, both modes give the same text, and the
    WER stays bounded."""
    path, reference = joined_fleurs(language, tmp_path)
    options = DecodingOptions(language=language, speculation="on")
    main_only, speculative = (next(transcribe(default_pair, [path], mode)) for mode in (main_alone(options), options))
    assert [(s.start, s.end, s.text) for s in main_only.segments] == [(s.start, s.end, s.text) for s in speculative.segments]
    assert speculative.stats.drafted > 0
    assert main_only.stats.fallbacks == speculative.stats.fallbacks
    phrase, times = longest_repeat(main_only.text)
    assert times <= 3, f"{phrase!r} {times} times in a row"
    assert word_error_rate([reference], [main_only.text], [language]) < 0.6


@pytest.mark.slow
def test_no_long_form_transcript_loops(default_pair):
    paths = [speech(p) for p in LONG]
    options = DecodingOptions(language="en", speculation="on")
    main_only = list(transcribe(default_pair, paths, main_alone(options)))
    speculative = list(transcribe(default_pair, paths, options))
    for a, b in zip(main_only, speculative):
        assert a.text == b.text and a.text
        phrase, times = longest_repeat(a.text)
        assert times <= 3, f"{a.path}: {phrase!r} {times} times in a row"
