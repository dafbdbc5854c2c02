"""Our decoding loop (main model alone, greedy with no fallback, as `generate` decodes) gives transformers' greedy
`generate` tokens, token for token."""

import numpy as np
import pytest
import torch
from conftest import mel_of, speech
from transformers import WhisperForConditionalGeneration

from whisper_spec.decode.decoding import decode_windows
from whisper_spec.models.load import load_pair
from whisper_spec.models.pair import WhisperPair, decoder_subset
from whisper_spec.options import DecodingOptions
from whisper_spec.speech.audio import log_mel_spectrogram, mel_filters, pad_or_trim

CLIPS = {
    "en": "librispeech/dev-clean/1272-128104-0000.flac",
    "de": "multilingual/de/thorsten_2b0d202fa8b36fa7b01322fa78225358.flac",
    "nl": "multilingual/nl/vl09647.flac",
    "pl": "multilingual/pl/mls_1889_1447_000001.flac",
    "es": "fleurs/fleurs-es-000.ogg",
    "fr": "fleurs/fleurs-fr-000.ogg",
}


def reference_tokens(model, mel, **kwargs):
    out = model.generate(mel, **kwargs)[0].tolist()
    return [t for t in out if t != model.generation_config.eos_token_id]


@pytest.fixture(scope="module")
def hf_base(base_pair):
    return WhisperForConditionalGeneration.from_pretrained(base_pair.main.path, dtype=torch.float32).eval()


@pytest.mark.slow
@pytest.mark.parametrize("timestamps", [False, True])
def test_base_matches_transformers_generate(base_pair, hf_base, timestamps):
    mel = mel_of([speech(p) for p in CLIPS.values()])
    # batch of all languages at once: rows detect their own language
    ours, _ = decode_windows(base_pair, mel, DecodingOptions(timestamps=timestamps, temperature=0.0, speculation="off"))
    detected = hf_base.detect_language(input_features=mel).flatten().tolist()
    special = base_pair.main.special
    language_ids = list(special.lang_to_id.values())
    sot = torch.full((mel.shape[0], 1), special.sot)
    with torch.no_grad():  # the probability of the detected language among all language tokens after SOT
        after_sot = hf_base(input_features=mel, decoder_input_ids=sot).logits[:, -1, language_ids].softmax(dim=-1)
    for row, (language, result) in enumerate(zip(CLIPS, ours)):
        assert result.language == language
        assert special.lang_to_id[result.language] == detected[row]
        expected_probability = float(after_sot[row, language_ids.index(special.lang_to_id[language])])
        assert result.language_probability == pytest.approx(expected_probability, abs=1e-4)
        # transformers 5.23 repeats tokens when it detects the language itself: pass it explicitly
        expected = reference_tokens(hf_base, mel[row : row + 1], language=language, return_timestamps=timestamps)
        assert result.tokens == expected, f"{language}: tokens differ from transformers generate"
        assert len(result.tokens) > 3


@pytest.mark.slow
@pytest.mark.parametrize("timestamps", [False, True])
def test_a_prompt_decodes_as_transformers_generate_with_prompt_ids(base_pair, hf_base, timestamps):
    """DecodingOptions.prompt: <|startofprev|> and the text's tokens (after a space, as openai-whisper
    encodes it) before SOT; the rows detect their language from SOT alone."""
    clips = {"fr": "fleurs/fleurs-fr-006.ogg", "en": CLIPS["en"]}
    mel = mel_of([speech(p) for p in clips.values()])
    prompt = "Juan Martín del Potro, en 2007. Mr. Quilter's gospel."
    ours, _ = decode_windows(base_pair, mel, DecodingOptions(timestamps=timestamps, temperature=0.0, speculation="off",
                                                             prompt=prompt))
    unprompted, _ = decode_windows(base_pair, mel, DecodingOptions(timestamps=timestamps, temperature=0.0,
                                                                   speculation="off"))
    main = base_pair.main
    prompt_ids = torch.tensor([main.special.previous, *main.tokenizer.encode(" " + prompt)])
    for row, (language, result) in enumerate(zip(clips, ours)):
        assert result.language == language
        expected = reference_tokens(hf_base, mel[row : row + 1], language=language, prompt_ids=prompt_ids,
                                    return_timestamps=timestamps)
        assert result.tokens == expected, f"{language}: tokens differ from transformers generate"
    assert [r.tokens for r in ours] != [r.tokens for r in unprompted]


@pytest.mark.slow
def test_no_speech_probability_and_average_logprob_are_whispers(base_pair, hf_base):
    """The no-speech rule's two inputs, against transformers' logits: P(<|nocaptions|>) after SOT
    alone, and the mean log-probability of the tokens and the end of text (suppressed tokens
    excluded from the normaliser, as the decoding rules do), over tokens + 1."""
    noise = torch.from_numpy(np.random.default_rng(0).standard_normal(16000 * 5).astype(np.float32) * 0.03)
    mel = torch.cat([log_mel_spectrogram(pad_or_trim(noise)[None], 80), mel_of([speech(CLIPS["en"])])])
    special = base_pair.main.special
    ours, _ = decode_windows(base_pair, mel, DecodingOptions(language="en", no_speech_threshold=0.0, temperature=0.0, speculation="off"))
    assert ours[0].no_speech and not ours[1].no_speech  # the noise is judged silent, the speech is not
    # the same verdict and inputs, bit for bit, when an assistant drafts (five of the six layers)
    drafting = WhisperPair(base_pair.main, decoder_subset(base_pair.main, [0, 1, 2, 3, 5]), base_pair.device,
                           base_pair.dtype)
    speculative, stats = decode_windows(drafting, mel, DecodingOptions(language="en", no_speech_threshold=0.0,
                                                                       speculation="on", temperature=0.0))
    assert stats.accepted > 0
    assert [(r.tokens, r.no_speech, r.no_speech_prob, r.avg_logprob) for r in speculative] == \
        [(r.tokens, r.no_speech, r.no_speech_prob, r.avg_logprob) for r in ours]
    # read from the first main call's logits at SOT, not from a main call of its own
    forwards = [decode_windows(base_pair, mel, DecodingOptions(language="en", no_speech_threshold=threshold, temperature=0.0, speculation="off"))[1].main_forwards for threshold in (0.0, None)]
    assert forwards[0] == forwards[1]
    for row, result in enumerate(ours):
        prompt = special.prompt("en", "transcribe", timestamps=False)
        sequence = torch.tensor([prompt + result.tokens + [special.eot]])
        with torch.no_grad():
            logits = hf_base(input_features=mel[row : row + 1], decoder_input_ids=sequence).logits[0].double()
        assert result.no_speech_prob == pytest.approx(float(logits[0].softmax(-1)[special.no_speech]), abs=1e-4)
        scored = logits[len(prompt) - 1 : -1]
        scored[:, list(special.suppress)] = float("-inf")
        scored[0, list(special.begin_suppress)] = float("-inf")
        logprobs = scored.log_softmax(-1).gather(1, sequence[0, len(prompt):, None])[:, 0]
        assert result.avg_logprob == pytest.approx(float(logprobs.sum()) / (len(result.tokens) + 1), abs=1e-3)


@pytest.mark.slow
def test_base_translate_matches_transformers(base_pair, hf_base):
    mel = mel_of([speech(CLIPS["de"])])
    ours, _ = decode_windows(base_pair, mel, DecodingOptions(task="translate", language="de", temperature=0.0, speculation="off"))
    assert ours[0].tokens == reference_tokens(hf_base, mel, language="de", task="translate")


@pytest.mark.slow
def test_tiny_en_matches_transformers():
    pair = load_pair("tiny.en", int8=False, encoder_precision="float32")
    hf = WhisperForConditionalGeneration.from_pretrained(pair.main.path, dtype=torch.float32).eval()
    mel = mel_of([speech("librispeech/test-other/1688-142285-0001.flac"), speech(CLIPS["en"])])
    ours, _ = decode_windows(pair, mel, DecodingOptions(temperature=0.0, speculation="off"))
    for row, result in enumerate(ours):
        assert result.language == "en"
        assert result.tokens == reference_tokens(hf, mel[row : row + 1])
    text = pair.main.tokenizer.decode(ours[1].tokens)
    assert "Quilter" in text and "apostle" in text


@pytest.mark.parametrize("n_mels", [80, 128])
def test_mel_filterbank_is_librosas(n_mels):
    import librosa

    expected = librosa.filters.mel(sr=16000, n_fft=400, n_mels=n_mels)
    assert np.array_equal(mel_filters(n_mels), expected)
