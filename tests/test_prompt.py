"""A prompt (DecodingOptions.prompt, `--initial-prompt`): every window's decoder reads
<|startofprev|> and the prompt's tokens before <|startoftranscript|>. Both modes keep one text at
every batch size and in both rounds, the no-speech probability is read after SOT behind the prompt,
and the prompt is cut and checked as openai-whisper does. The real model against transformers'
`generate(prompt_ids=...)`: tests/test_reference.py."""

from dataclasses import replace

import pytest
import torch
from conftest import RANDOM_SPECIAL, main_alone, perturbed_decoder, random_head, random_model
from test_fixed_shapes import fixed_shapes

from whisper_spec.decode.decoding import decode_windows, previous_tokens
from whisper_spec.decode.encoding import encoder_states
from whisper_spec.models.attention import DecoderCaches
from whisper_spec.models.pair import WhisperPair
from whisper_spec.options import DecodingOptions

CPU = torch.device("cpu")
PROMPT = tuple(range(3, 40, 2))  # text tokens of the small random vocabulary
OPTIONS = {
    "greedy": DecodingOptions(speculation="on", language="en", draft_tokens=3, draft_confidence=0, prompt=PROMPT),
    "timestamps-adaptive": DecodingOptions(speculation="on", language="de", timestamps=True, adaptive_draft=True,
                                           draft_tokens=2, max_draft_tokens=6, draft_confidence=0, prompt=PROMPT),
    "sampling": DecodingOptions(speculation="on", language="fr", draft_tokens=4, draft_confidence=0.3,
                                temperature=(0.8,), seed=3, prompt=PROMPT),
}


def random_pair(special=RANDOM_SPECIAL, head: bool = False) -> WhisperPair:
    """A random main model and a drafter for it: a perturbed copy of its decoder, or a draft head."""
    main = replace(random_model(0, eot_bias=0.25), special=special)
    drafter = random_head(main, 1, noise=0.1) if head else perturbed_decoder(main, 0.1, seed=1)
    return WhisperPair(main, drafter, CPU, torch.float32)


@pytest.mark.parametrize("name", list(OPTIONS))
@pytest.mark.parametrize("batch, drafter", [(1, "decoder"), (2, "decoder"), (4, "decoder"), (1, "head"), (4, "head")])
def test_a_prompt_leaves_both_modes_one_text_in_both_rounds(name, batch, drafter):
    options, pair = OPTIONS[name], random_pair(head=drafter == "head")
    torch.manual_seed(batch)
    mel = torch.randn(batch, 80, 3000)
    seeds = list(range(batch))
    reference, _ = decode_windows(pair, mel, main_alone(options), seeds=seeds)
    for decoding in (pair, fixed_shapes(pair, 2)):
        (alone, _), (drafted, stats) = (decode_windows(decoding, mel, mode, seeds=seeds)
                                        for mode in (main_alone(options), options))
        for results in (alone, drafted):
            assert [r.tokens for r in results] == [r.tokens for r in reference]
        # one path's two modes read the same logits; the two paths' kernels may round apart
        assert [r.avg_logprob for r in drafted] == [r.avg_logprob for r in alone]
        assert [r.avg_logprob is None for r in alone] == [r.avg_logprob is None for r in reference]
        assert scores(alone) == pytest.approx(scores(reference), rel=1e-5)  # (pytest 9.2's approx refuses None)
        assert stats.drafted > 0 and stats.accepted > 0
    unprompted, _ = decode_windows(pair, mel, main_alone(replace(options, prompt=None)), seeds=seeds)
    assert [r.tokens for r in unprompted] != [r.tokens for r in reference]  # the decoder read the prompt


@pytest.mark.parametrize("name", list(OPTIONS))
@pytest.mark.parametrize("drafter", ["decoder", "head"])
@pytest.mark.parametrize("vocabulary", ["multilingual", "english-only"])
def test_rows_with_prompts_and_prefixes_of_their_own_share_a_batch_each_as_if_alone(name, drafter, vocabulary):
    """A live stream's prompt is its text before its buffer, and its prefix the confirmed text in it:
    rows with prompts and prefixes of several lengths (and none) in one batch, the no-speech rule on,
    each row's tokens (its prefix first), no-speech probability and score are those it gets decoded
    alone with them, in both modes, and in fixed shapes (groups of one length)."""
    options = replace(OPTIONS[name], no_speech_threshold=0.6, logprob_threshold=-1.0)
    special = replace(RANDOM_SPECIAL, no_speech=47)
    if vocabulary == "english-only":  # with timestamps SOT ends an unprefixed row's prompt: read in the first round
        special, options = replace(special, lang_to_id={}), replace(options, language=None)
    pair = random_pair(special, head=drafter == "head")
    torch.manual_seed(7)
    mel = torch.randn(4, 80, 3000)
    prompts = [PROMPT, None, PROMPT[:5], PROMPT[3:]]
    stamp = pair.main.special.timestamp_begin + 4
    prefixes = [(), PROMPT[2:5], (stamp, *PROMPT[5:12]), ()]
    seeds = list(range(4))
    alone = [decode_windows(pair, mel[i : i + 1], main_alone(replace(options, prompt=prompt)), seeds=[seeds[i]],
                            prefixes=[prefixes[i]])[0][0] for i, prompt in enumerate(prompts)]
    assert all(list(r.tokens[: len(p)]) == list(p) for r, p in zip(alone, prefixes))
    assert len({tuple(r.tokens) for r in alone}) > 1
    for decoding in (pair, fixed_shapes(pair, 2)):
        for mode in (main_alone(options), options):
            together, _ = decode_windows(decoding, mel, mode, seeds=seeds, prompts=prompts, prefixes=prefixes)
            assert [r.tokens for r in together] == [r.tokens for r in alone], (decoding.platform.row_invariant, mode)
            probabilities = [[r.no_speech_prob for r in results] for results in (together, alone)]
            assert None not in probabilities[1] and probabilities[0] == pytest.approx(probabilities[1], rel=1e-5)
            assert scores(together) == pytest.approx(scores(alone), rel=1e-5)


def scores(results) -> list[float]:
    """The average log-probabilities the results have (none where no verdict needed them)."""
    return [r.avg_logprob for r in results if r.avg_logprob is not None]


def sot_no_speech(pair: WhisperPair, mel: torch.Tensor, prompt: list[int]) -> torch.Tensor:
    """P(<|nospeech|>) at <|startoftranscript|> in one plain forward of the whole prompt."""
    decoder, special = pair.main.decoder, pair.main.special
    tokens = torch.tensor([prompt] * len(mel))
    caches = DecoderCaches(decoder.cross_states(encoder_states(pair.main, mel)), decoder.new_caches(len(mel), len(prompt)))
    logits = decoder(tokens, torch.arange(len(prompt)).expand_as(tokens), caches)
    return torch.softmax(logits[:, prompt.index(special.sot)], dim=-1)[:, special.no_speech]


@pytest.mark.parametrize("vocabulary", ["multilingual", "english-only"])
@pytest.mark.parametrize("timestamps", [False, True])
@pytest.mark.parametrize("language", ["de", None])
def test_the_no_speech_probability_is_read_after_sot_behind_the_prompt(vocabulary, timestamps, language):
    """In both rounds, given the language or detecting it (detection reads SOT alone, as openai-whisper's;
    the rule reads SOT behind the prompt), and where SOT ends the prompt (English-only, timestamps)."""
    special = replace(RANDOM_SPECIAL, no_speech=47)
    if vocabulary == "english-only":
        special = replace(special, lang_to_id={})
        language = None
    pair = random_pair(special)
    torch.manual_seed(0)
    mel = torch.randn(3, 80, 3000)
    options = DecodingOptions(speculation="on", language=language, timestamps=timestamps, prompt=PROMPT,
                              no_speech_threshold=0.5, draft_confidence=0)
    results, _ = decode_windows(pair, mel, options)
    prompt = special.prompt(results[0].language, "transcribe", timestamps, previous_tokens(pair.main, PROMPT))
    expected = sot_no_speech(pair, mel, prompt)
    for decoding in (pair, fixed_shapes(pair, 2)):
        (alone, _), (drafted, _) = (decode_windows(decoding, mel, mode) for mode in (main_alone(options), options))
        assert [r.no_speech_prob for r in drafted] == [r.no_speech_prob for r in alone]
        assert [r.no_speech_prob for r in alone] == pytest.approx(expected.tolist(), rel=1e-5)
    unprompted, _ = decode_windows(pair, mel, replace(options, prompt=None))
    assert [r.no_speech_prob for r in unprompted] != pytest.approx(expected.tolist(), rel=1e-3)


def test_a_prompt_is_cut_to_half_the_context_and_checked():
    model = random_model(0)
    half = model.dims.n_text_ctx // 2 - 1
    long = tuple(range(1, 45)) * 2
    assert previous_tokens(model, long) == long[-half:]
    assert previous_tokens(model, None) == ()
    assert DecodingOptions(prompt="  ").prompt is None and DecodingOptions(prompt=[3, 4]).prompt == (3, 4)
    with pytest.raises(ValueError, match="text tokens"):
        previous_tokens(model, (3, RANDOM_SPECIAL.eot))
    with pytest.raises(ValueError, match="token ids, not text"):
        previous_tokens(model, "a text")  # the random model has no vocabulary to encode it with
    with pytest.raises(ValueError, match="no <\\|startofprev\\|>"):
        previous_tokens(replace(model, special=replace(RANDOM_SPECIAL, previous=None)), (3,))
    pair = random_pair()
    with pytest.raises(ValueError, match="no room under max_length 30"):
        decode_windows(pair, torch.randn(1, 80, 3000), DecodingOptions(language="en", prompt=long, max_length=30))
