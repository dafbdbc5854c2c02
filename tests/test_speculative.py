"""Greedy speculative output is token-identical to main-only output, at every batch size."""

from dataclasses import replace

import pytest
import torch
from conftest import main_alone, mel_of, perturbed_decoder, random_model, speech

from whisper_spec.decode.caches import kept_cache_length, self_attention_caches
from whisper_spec.decode.decoding import decode_encoded, decode_windows, encode_batch
from whisper_spec.decode.encoding import encode, encoder_states
from whisper_spec.decode.stats import DecodingStats, host_timed
from whisper_spec.models.pair import WhisperPair, decoder_subset
from whisper_spec.options import DecodingOptions

CLIPS = [
    "librispeech/test-other/1688-142285-0000.flac",
    "multilingual/de/thorsten_1386ecbb98a8f46dd0b0eb75d68ee0d0.flac",
    "librispeech/test-clean/1089-134686-0001.flac",
    "multilingual/nl/vl04108.flac",
]


def assert_identical(pair, mel, options, **kwargs):
    encoded, _ = encode_batch(pair, mel, options)  # both modes decode one encoding
    main_only, _ = decode_encoded(pair, encoded, main_alone(options), **kwargs)
    speculative, stats = decode_encoded(pair, encoded, options, **kwargs)
    for row, (a, b) in enumerate(zip(main_only, speculative)):
        assert a.tokens == b.tokens, f"row {row}: speculative output differs from main-only output"
        assert a.language == b.language
    assert stats.drafted > 0
    return main_only, speculative, stats


@pytest.fixture(scope="module")
def base_with_layer_subset(base_pair):
    """Real whisper base with an untrained decoder-only assistant: base's decoder layers 0 and 5."""
    return WhisperPair(base_pair.main, decoder_subset(base_pair.main, [0, 5]), base_pair.device, base_pair.dtype)


@pytest.fixture(scope="module")
def clip_mel():
    return mel_of([speech(c) for c in CLIPS])


@pytest.mark.slow
@pytest.mark.parametrize("batch", [1, 2, 3, 4])
def test_base_layer_subset_assistant_is_exact(base_with_layer_subset, clip_mel, batch):
    options = DecodingOptions(speculation="on", draft_tokens=4)
    main_only, _, stats = assert_identical(base_with_layer_subset, clip_mel[:batch], options)
    assert all(len(r.tokens) > 5 for r in main_only)
    assert stats.windows == batch


@pytest.mark.slow
def test_a_window_encodes_alike_alone_and_in_a_batch(base_pair, clip_mel):
    """On CPU the encoder runs window by window: a window's states, and so its transcript, do not
    depend on the batch it is in."""
    states = encoder_states(base_pair.main, clip_mel)
    for i in range(len(clip_mel)):
        assert torch.equal(states[i], encoder_states(base_pair.main, clip_mel[i : i + 1])[0])


@pytest.mark.slow
def test_a_row_decodes_alike_alone_and_beside_rows_that_finish_first(base_with_layer_subset, clip_mel):
    """On CPU finished rows leave the decoders' batch: a row's tokens must not depend on which rows
    run beside it, and the next call on the same encoding must find every row's audio again, in the
    same self-attention caches."""
    pair = base_with_layer_subset
    options = DecodingOptions(speculation="on", draft_tokens=4)
    # each encoding decoded in both modes (a window's encoder states do not depend on its batch: above)
    encoded = encode(pair, clip_mel, None, DecodingStats())
    rows = [encode(pair, clip_mel[i : i + 1], None, DecodingStats()) for i in range(4)]
    for mode in (main_alone(options), options):
        batched, _ = decode_encoded(pair, encoded, mode)
        assert len({len(r.tokens) for r in batched}) == len(batched)  # every row ends at its own step
        alone = [decode_encoded(pair, row, mode)[0][0] for row in rows]
        assert [r.tokens for r in alone] == [r.tokens for r in batched]
    first, _ = decode_encoded(pair, encoded, options)
    n_ctx = kept_cache_length(pair.main.decoder)
    cache = self_attention_caches(pair.main.decoder, 4, n_ctx)[0].k
    second, _ = decode_encoded(pair, encoded, DecodingOptions(speculation="on", draft_tokens=4, timestamps=True))
    third, _ = decode_encoded(pair, encoded, options)
    assert [r.tokens for r in third] == [r.tokens for r in first] == [r.tokens for r in batched]
    assert self_attention_caches(pair.main.decoder, 4, n_ctx)[0].k is cache  # the full cache, not reallocated
    assert [r.language for r in second] == [r.language for r in first]


def test_an_error_mid_decoding_leaves_the_encoding_and_caches_whole(monkeypatch):
    """Rows that finished leave the decoders' batch while decoding; an exception must not leave the
    batch's cross-attention states or the kept self-attention caches shrunk for the next call."""
    import whisper_spec.decode.speculative as speculative

    main = random_model(0, eot_bias=0.25)
    pair = WhisperPair(main, perturbed_decoder(main, 0.05, seed=1), torch.device("cpu"), torch.float32)
    mel = torch.randn(4, 80, 3000)
    options = DecodingOptions(speculation="on", language="en", draft_confidence=0)
    encoded, _ = encode_batch(pair, mel, options)
    expected, _ = decode_encoded(pair, encoded, options)
    verify = speculative.verify

    def failing_once_rows_left(context, state, *args):
        if state.done.any():
            raise RuntimeError("out of memory")
        return verify(context, state, *args)

    monkeypatch.setattr(speculative, "verify", failing_once_rows_left)
    with pytest.raises(RuntimeError):
        decode_encoded(pair, encoded, options)
    monkeypatch.setattr(speculative, "verify", verify)
    assert encoded.main[0][0].shape[0] == encoded.assistant[0][0].shape[0] == 4
    n_ctx = kept_cache_length(main.decoder)
    for decoder in (main.decoder, pair.assistant.decoder):
        assert self_attention_caches(decoder, 4, n_ctx) is self_attention_caches(decoder, 4, n_ctx)
    again, _ = decode_encoded(pair, encoded, options)  # the same encoding, every row's audio still there
    assert [r.tokens for r in again] == [r.tokens for r in expected]


@pytest.mark.slow
def test_base_timestamps_translate_and_adaptive_draft_are_exact(base_with_layer_subset, clip_mel):
    options = DecodingOptions(speculation="on", timestamps=True, adaptive_draft=True, draft_tokens=2)
    main_only, _, _ = assert_identical(base_with_layer_subset, clip_mel, options)
    assert any(t >= base_with_layer_subset.main.special.timestamp_begin for t in main_only[0].tokens)
    assert_identical(base_with_layer_subset, clip_mel[1:3], DecodingOptions(speculation="on", task="translate", language="de"))


@pytest.mark.slow
def test_confidence_stopped_drafts_are_exact_and_better_accepted(base_with_layer_subset, clip_mel):
    _, _, every = assert_identical(base_with_layer_subset, clip_mel, DecodingOptions(speculation="on", draft_tokens=6, draft_confidence=0))
    _, _, confident = assert_identical(base_with_layer_subset, clip_mel, DecodingOptions(speculation="on", draft_tokens=6, draft_confidence=0.5))
    assert confident.drafted < every.drafted
    assert confident.acceptance > every.acceptance


@pytest.mark.parametrize("batch", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("noise", [0.05, 0.5])
def test_random_models_rows_accept_and_finish_differently(batch, noise):
    main = random_model(0, eot_bias=0.25)
    pair = WhisperPair(main, perturbed_decoder(main, noise, seed=1), torch.device("cpu"), torch.float32)
    torch.manual_seed(batch)
    mel = torch.randn(batch, 80, 3000)
    # a random assistant is never confident: these draft all k (confidence 0), the last stops early
    for options in (DecodingOptions(speculation="on", language="en", timestamps=True, draft_tokens=3, draft_confidence=0),
                    DecodingOptions(speculation="on", language="fr", draft_tokens=5, adaptive_draft=True, max_draft_tokens=8,
                                    draft_confidence=0),
                    DecodingOptions(speculation="on", language="nl", draft_tokens=1, draft_confidence=0),
                    DecodingOptions(speculation="on", language="de", draft_tokens=6, draft_confidence=0.3)):
        main_only, speculative, stats = assert_identical(pair, mel, options)
    if batch >= 4:
        # the setup really exercises per-row state: rows end at different steps and accept differently
        main_only, speculative, _ = assert_identical(pair, mel, DecodingOptions(speculation="on", language="en", timestamps=True,
                                                                                 draft_confidence=0))
        assert len({len(r.tokens) for r in main_only}) > 1
        assert len({r.stats.accepted for r in speculative}) > 1


def test_random_model_with_own_encoder_assistant_and_per_row_languages():
    main, other = random_model(0, eot_bias=0.25), random_model(5, eot_bias=0.25)
    pair = WhisperPair(main, other, torch.device("cpu"), torch.float32)
    torch.manual_seed(0)
    mel = torch.randn(4, 80, 3000)
    main_only, _, _ = assert_identical(pair, mel, DecodingOptions(speculation="on", timestamps=True), languages=["en", "de", None, "nl"])
    assert [r.language for r in main_only][:2] == ["en", "de"] and main_only[3].language == "nl"


@pytest.mark.parametrize("row_invariant", [True, False], ids=["row-invariant", "fixed-shapes"])
def test_a_rounds_drafts_and_verification_are_timed_within_its_decoding(row_invariant):
    main = random_model(0, eot_bias=0.25)
    pair = WhisperPair(main, perturbed_decoder(main, 0.05, seed=1), torch.device("cpu"), torch.float32)
    pair.platform = replace(pair.platform, row_invariant=row_invariant)
    mel = torch.randn(2, 80, 3000)
    results, stats = decode_windows(pair, mel, DecodingOptions(speculation="on", language="en", draft_confidence=0))
    assert stats.drafted > 0 and 0 < stats.draft_seconds and 0 < stats.verify_seconds
    assert stats.draft_seconds + stats.verify_seconds < stats.decoding_seconds
    assert sum(r.stats.draft_seconds for r in results) == pytest.approx(stats.draft_seconds)
    _, main_only = decode_windows(pair, mel, main_alone(DecodingOptions(speculation="on", language="en")))
    assert main_only.draft_seconds < main_only.verify_seconds / 10  # main-only: a round is its verification
    cuda = DecodingStats()
    assert host_timed(cuda, torch.device("cuda")) is None and host_timed(cuda, torch.device("cpu")) is cuda


def test_max_length_stops_rows_exactly():
    main = random_model(0)
    pair = WhisperPair(main, perturbed_decoder(main, 0.05, seed=1), torch.device("cpu"), torch.float32)
    mel = torch.randn(3, 80, 3000)
    main_only, speculative, _ = assert_identical(pair, mel, DecodingOptions(speculation="on", language="en", max_length=20, draft_tokens=6))
    assert all(r.hit_max_length and len(r.tokens) == 20 - 4 for r in main_only)


def test_auto_speculation_drafts_for_batches_within_the_measured_frames(monkeypatch):
    """speculation="auto" drafts in every round of a batch whose rows times the assistant's frames
    stay within the platform's limit (platform.AUTO_MAX_DRAFT_FRAMES for the device kind and decoder
    precision; two full windows here), and in none of a larger one; every mode gives the main
    model's tokens."""


    import whisper_spec.decode.decoding as decoding
    import whisper_spec.models.platform as platform

    limit = {(platform.device_kind(torch.device("cpu")), "float"): 2 * 1500}
    monkeypatch.setattr(platform, "AUTO_MAX_DRAFT_FRAMES", limit)
    main = random_model(0, eot_bias=0.25)
    pair = WhisperPair(main, perturbed_decoder(main, 0.05, seed=1), torch.device("cpu"), torch.float32)
    assert pair.platform.auto_max_draft_frames == 2 * 1500
    torch.manual_seed(8)
    mel = torch.randn(4, 80, 3000)
    options = DecodingOptions(language="en", timestamps=True, draft_confidence=0)
    for batch, auto_drafts in ((4, False), (2, True), (1, True)):
        alone, _ = decode_windows(pair, mel[:batch], main_alone(options))
        runs = {mode: decode_windows(pair, mel[:batch], replace(options, speculation=mode)) for mode in ("on", "auto", "off")}
        for results, _ in runs.values():
            assert [r.tokens for r in results] == [r.tokens for r in alone]
        drafted = {mode: stats.drafted for mode, (_, stats) in runs.items()}
        assert drafted["off"] == 0 < drafted["on"]
        assert drafted["auto"] == (drafted["on"] if auto_drafts else 0)
    # the rule counts the frames the assistant reads: a third of the window each, four rows draft
    with torch.inference_mode():
        cross = pair.assistant.decoder.cross_states(main.encoder(mel), n_frames=500)
    assert decoding.auto_drafts(pair.platform, cross, 4) and not decoding.auto_drafts(pair.platform, cross, 7)


def test_an_assistant_stays_out_of_a_task_it_was_not_trained_for():
    """draft_tasks (a distilled assistant's card): for another task the main model decodes alone, the
    assistant neither encoded nor run, whatever speculation asks; for its own task it drafts."""
    main = random_model(0, eot_bias=0.25)
    assistant = replace(perturbed_decoder(main, 0.05, seed=1), draft_tasks=("transcribe",))
    pair = WhisperPair(main, assistant, torch.device("cpu"), torch.float32)
    torch.manual_seed(3)
    mel = torch.randn(2, 80, 3000)
    for task in ("transcribe", "translate"):
        options = DecodingOptions(speculation="on", language="de", task=task, draft_confidence=0)
        alone, _ = decode_windows(pair, mel, main_alone(options))
        for speculation in ("on", "auto"):
            results, stats = decode_windows(pair, mel, replace(options, speculation=speculation))
            assert [r.tokens for r in results] == [r.tokens for r in alone]
            assert (stats.drafted > 0) == (stats.assistant_forwards > 0) == (task == "transcribe")
        encoded, _ = encode_batch(pair, mel, options)
        assert (encoded.assistant is not None) == (task == "transcribe")


@pytest.mark.slow
@pytest.mark.parametrize("options", [
    DecodingOptions(speculation="on", draft_tokens=4),
    DecodingOptions(speculation="on", timestamps=True, adaptive_draft=True, draft_tokens=2, max_draft_tokens=6),
], ids=["plain", "timestamps-adaptive"])
def test_fixed_shape_decoding_gives_the_row_invariant_tokens(base_with_layer_subset, clip_mel, options, monkeypatch):
    """The decoding GPUs get (every main call one width: prompt prefilled alone, windows right-padded,
    every row kept, rules on every position), run on CPU where the kernels are row-invariant: both
    modes must give the tokens of CPU decoding, at every batch size, although every call computes
    positions past each row's end."""
    pair = base_with_layer_subset
    reference = {b: decode_windows(pair, clip_mel[:b], main_alone(options))[0] for b in (1, 4)}
    # as the probes answer for kernels that no padding makes row-invariant
    monkeypatch.setattr(pair, "platform", replace(pair.platform, row_invariant=False))
    widths = []
    features = type(pair.main.decoder).features

    def recording(decoder, tokens, positions, caches, span=None, cross_scores=None, taps=None):
        if decoder is pair.main.decoder:
            widths.append(tokens.shape)
        return features(decoder, tokens, positions, caches, span, cross_scores, taps)

    monkeypatch.setattr(type(pair.main.decoder), "features", recording)
    for batch in (1, 4):
        main_only, speculative, stats = assert_identical(pair, clip_mel[:batch], options)
        assert [r.tokens for r in main_only] == [r.tokens for r in reference[batch]]
        # besides the language step and the prompt's prefill, one shape for every main call of both modes
        width = (options.max_draft_tokens if options.adaptive_draft else options.draft_tokens) + 1
        prefill = len(pair.main.special.prompt("en", options.task, options.timestamps)) - 1
        assert set(widths) == {(batch, 1), (batch, prefill), (batch, width)}
        assert widths.count((batch, width)) > 10
        widths.clear()
