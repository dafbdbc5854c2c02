"""Sampling follows the main model's distribution, and speculative sampling keeps the very tokens
main-only sampling draws from the same seeds (sampling.sample_tokens); temperature fallback."""

from dataclasses import replace

import pytest
import torch
from conftest import RANDOM_DIMS, perturbed_decoder, random_model

from whisper_spec.decode.decoding import decode_windows
from whisper_spec.decode.rules import LogitRules
from whisper_spec.models.attention import DecoderCaches
from whisper_spec.models.model import DraftVocabProjection, Linear
from whisper_spec.models.pair import WhisperPair
from whisper_spec.options import DecodingOptions

TEMPERATURE = 1.5
ROWS, REPEATS = 1000, 8  # 8000 samples of the first two tokens


def exact_joint(model, mel, prompt):
    """p(x1, x2) of the main model under the same rules: {(x1, x2 or None): probability}."""
    vocab = model.dims.n_vocab
    decoder = model.decoder
    rules = LogitRules(model.special, vocab, False, torch.device("cpu"))
    caches = DecoderCaches(decoder.cross_states(model.encoder(mel).expand(vocab, -1, -1)), decoder.new_caches(vocab, 16))
    tokens = torch.tensor(prompt).repeat(vocab, 1)
    tokens = torch.cat([tokens, torch.arange(vocab)[:, None]], dim=1)
    positions = torch.arange(tokens.shape[1]).repeat(vocab, 1)
    logits = decoder(tokens, positions, caches)
    padded = torch.cat([tokens, torch.zeros(vocab, 4, dtype=torch.long)], dim=1)
    anywhere = torch.full((vocab,), model.special.timestamp_begin)  # no end floor (and no timestamps here)
    begins = torch.full((vocab,), len(prompt))
    first = torch.softmax(rules(logits[:1, -2], padded[:1], torch.tensor([len(prompt)]), anywhere[:1], begins[:1]) / TEMPERATURE,
                          -1)[0]
    second = torch.softmax(rules(logits[:, -1], padded, torch.full((vocab,), len(prompt) + 1), anywhere, begins) / TEMPERATURE, -1)
    joint = {}
    for x1 in range(vocab):
        if first[x1] == 0:
            continue
        if x1 == model.special.eot:
            joint[(x1, None)] = float(first[x1])
            continue
        for x2 in torch.nonzero(second[x1]).flatten().tolist():
            joint[(x1, x2)] = float(first[x1] * second[x1, x2])
    return joint


def sample_pairs(pair, mel, speculation, seed):
    """{(x1, x2 or None): count} of ROWS x REPEATS samples, each row a window seed of its own, and
    the samples in order."""
    counts, samples = {}, []
    for repeat in range(REPEATS):
        options = DecodingOptions(speculation=speculation, language="en", temperature=TEMPERATURE, max_length=6,
                                  draft_tokens=3, draft_confidence=0, seed=seed + repeat)
        results, stats = decode_windows(pair, mel.expand(ROWS, -1, -1), options, seeds=list(range(ROWS)))
        for r in results:
            key = (r.tokens[0], r.tokens[1]) if len(r.tokens) >= 2 else (r.tokens[0] if r.tokens else 50, None)
            counts[key] = counts.get(key, 0) + 1
            samples.append(r.tokens)
    return counts, samples


def chi_square_p_value(counts, expected_probs, n):
    """Pearson's test over cells expected at least 5 times, the rest pooled into one cell."""
    stat, df, pooled_obs, pooled_exp = 0.0, 0, 0, 0.0
    for key in set(expected_probs) | set(counts):
        expected = expected_probs.get(key, 0.0) * n
        observed = counts.get(key, 0)
        if expected >= 5:
            stat += (observed - expected) ** 2 / expected
            df += 1
        else:
            pooled_obs += observed
            pooled_exp += expected
    if pooled_exp > 0:
        stat += (pooled_obs - pooled_exp) ** 2 / max(pooled_exp, 1e-9)
        df += 1
    df -= 1
    return float(torch.special.gammaincc(torch.tensor(df / 2.0), torch.tensor(stat / 2.0))), df


def total_variation(counts, probs, n):
    keys = set(counts) | set(probs)
    return 0.5 * sum(abs(counts.get(k, 0) / n - probs.get(k, 0.0)) for k in keys)


@pytest.mark.parametrize("draft_vocab", [False, True], ids=["full-vocabulary", "draft-vocabulary"])
def test_speculative_sampling_matches_main_distribution(draft_vocab):
    main = random_model(0, dims=replace(RANDOM_DIMS, n_audio_ctx=16))  # 32 mel frames: cheap to encode
    assistant = perturbed_decoder(main, 0.6, seed=3)  # a poor assistant: many rejections
    if draft_vocab:  # it cannot draft a third of the text tokens; the main model still samples them
        ids = torch.tensor([t for t in range(main.dims.n_vocab) if not 30 <= t < 50])
        weight = assistant.decoder.token_embedding.weight.detach()[ids]
        assistant.decoder.proj_out = DraftVocabProjection(Linear.of(weight), ids, main.dims.n_vocab)
    pair = WhisperPair(main, assistant, torch.device("cpu"), torch.float32)
    torch.manual_seed(11)
    mel = torch.randn(1, 80, 32)
    prompt = main.special.prompt("en", "transcribe", False)
    n = ROWS * REPEATS

    with torch.inference_mode():
        exact = exact_joint(main, mel, prompt)
        drafts_only = exact_joint(assistant_as_main(main, assistant), mel, prompt)
    assert abs(sum(exact.values()) - 1) < 1e-4
    assert len([p for p in exact.values() if p > 0.01]) >= 5, "the test needs a spread-out distribution"
    # the assistant's own distribution is far from the main's: accepting drafts blindly would fail
    assert total_variation({k: v * n for k, v in drafts_only.items()}, exact, n) > 0.15

    speculative, drafted_tokens = sample_pairs(pair, mel, speculation="on", seed=100)
    main_only, main_tokens = sample_pairs(pair, mel, speculation="off", seed=100)
    # the same seeds draw the same tokens with or without drafts, though the assistant is poor
    assert drafted_tokens == main_tokens
    p_spec, df = chi_square_p_value(speculative, exact, n)
    # tolerance: a 0.1% significance level (fixed seeds make the outcome deterministic)
    assert p_spec > 1e-3, f"samples do not follow the main distribution (p={p_spec:.2g}, df={df})"
    other_seed, _ = sample_pairs(pair, mel, speculation="off", seed=200)
    assert other_seed != main_only  # another seed, other draws
    drafted_p, _ = chi_square_p_value({k: round(v * n) for k, v in drafts_only.items()}, exact, n)
    assert drafted_p < 1e-6, "the chi-square test has no power against the assistant's distribution"


def assistant_as_main(main, assistant):
    """The assistant's decoder reading the main encoder, to compute the distribution it drafts from."""
    return main.__class__(**{**main.__dict__, "decoder": assistant.decoder})
