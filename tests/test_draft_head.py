"""Draft heads (model.DraftHead, EAGLE): trained by distill on a small random main model, loaded from
their directory, and exact in both implementations of the round, at batch 1 and 4, greedy and sampling."""

import json
from dataclasses import replace

import pytest
import torch
from conftest import SPEECH, main_alone, mel_of, random_head, random_model
from test_fixed_shapes import OPTIONS as ROUND_OPTIONS
from test_fixed_shapes import fixed_shapes

from whisper_spec.decode.decoding import decode_windows
from whisper_spec.decode.speculative import hidden_before
from whisper_spec.distill.student import build_student
from whisper_spec.distill.train import distill
from whisper_spec.models.attention import DecoderCaches
from whisper_spec.models.draft_head import DraftHead
from whisper_spec.models.load import load_distilled
from whisper_spec.models.pair import WhisperPair
from whisper_spec.options import DecodingOptions, DistillOptions

UNLABELED = SPEECH / "unlabeled" / "librispeech-train-clean-100"
CPU = torch.device("cpu")


def test_a_head_reads_the_hidden_state_before_each_position():
    hidden = torch.arange(2 * 5 * 3, dtype=torch.float32).view(2, 5, 3)
    positions = torch.tensor([[0, 1, 2], [2, 3, 4]])
    before = hidden_before(hidden, positions)
    assert torch.equal(before[0, 0], torch.zeros(3))
    assert torch.equal(before[0, 1:], hidden[0, :2]) and torch.equal(before[1], hidden[1, 1:4])


@pytest.mark.parametrize("name, batch, feature_layers", [
    ("greedy", 1, ()), ("greedy", 4, ()), ("sampling", 4, ()), ("timestamps-adaptive", 4, ()), ("confidence", 4, ()),
    ("fallback", 3, ()), ("greedy", 4, (0,)), ("sampling", 1, (0,)), ("fallback", 3, (0,))])
def test_an_untrained_head_is_exact_in_both_rounds(name, batch, feature_layers):
    options, main = ROUND_OPTIONS[name], random_model(0, eot_bias=0.25)
    pair = WhisperPair(main, random_head(main, 1, noise=0.1, feature_layers=feature_layers), CPU, torch.float32)
    torch.manual_seed(batch)
    mel = torch.randn(batch, 80, 3000)
    reference, _ = decode_windows(pair, mel, main_alone(options), seeds=list(range(batch)))
    for decoding in (pair, fixed_shapes(pair, 1), fixed_shapes(pair, 3)):
        results, stats = decode_windows(decoding, mel, options, seeds=list(range(batch)))
        assert [r.tokens for r in results] == [r.tokens for r in reference]
        assert [r.avg_logprob for r in results] == pytest.approx([r.avg_logprob for r in reference])
        assert stats.drafted > 0


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    folder = tmp_path_factory.mktemp("audio")
    for source in sorted(UNLABELED.glob("*.flac"))[:6]:
        (folder / source.name).symlink_to(source)
    return folder


@pytest.mark.parametrize("head_features, test_depth", [((), 1), ((0,), 2)], ids=["final-hidden", "and-layer-0-deeper"])
def test_a_distilled_head_learns_the_main_model_and_stays_exact(clips, tmp_path, head_features, test_depth):
    main = random_model(3, eot_bias=0.5)
    options = DistillOptions(layers=1, head=True, steps=30, batch_size=4, eval_every=30, checkpoint_every=30,
                             held_out=0.34, draft_vocab=90, top_k=4, learning_rate=3e-3, warmup_steps=3,
                             head_features=head_features, head_test_depth=test_depth)
    summary = distill(WhisperPair(main, None, CPU, torch.float32), str(clips), tmp_path / "head", options,
                      cache=tmp_path / "cache")
    assert summary["held_out_acceptance"] > summary["held_out_acceptance_before"]
    config = json.loads((tmp_path / "head" / "assistant.json").read_text())
    assert config["kind"] == "head" and config["layers_from_main"] == [1]
    assert config["feature_layers"] == list(head_features)
    card = (tmp_path / "head" / "README.md").read_text()
    assert f"the same losses again on {test_depth} more pass(es)" in card

    head = load_distilled(tmp_path / "head", main, torch.float32, "cpu")
    assert isinstance(head.decoder, DraftHead) and head.is_draft_head
    assert head.decoder.feature_layers == head_features and (head.decoder.reduce is not None) == bool(head_features)
    assert head.decoder.token_embedding is main.decoder.token_embedding
    pair = WhisperPair(main, head, CPU, torch.float32)
    mel = mel_of(sorted(clips.glob("*.flac")))
    for options in (DecodingOptions(speculation="on", language="en", draft_tokens=3, draft_confidence=0),
                    DecodingOptions(speculation="on", language="en", draft_tokens=4, temperature=(0.7,), seed=2)):
        alone, _ = decode_windows(pair, mel, main_alone(options))
        for decoding in (pair, fixed_shapes(pair, 2)):
            drafted, stats = decode_windows(decoding, mel, options)
            assert [r.tokens for r in drafted] == [r.tokens for r in alone]
            assert stats.accepted > 0


def test_a_head_started_from_an_assistant_starts_as_it(clips, tmp_path):
    """--init-assistant: the head's layers, draft vocabulary and cross-attention sources are the
    assistant's, and before training it drafts what the assistant does whatever hidden states it reads."""
    main = random_model(3, eot_bias=0.5)
    pair = WhisperPair(main, None, CPU, torch.float32)
    common = dict(steps=6, batch_size=4, eval_every=6, checkpoint_every=6, held_out=0.34, draft_vocab=90, top_k=4,
                  learning_rate=3e-3, warmup_steps=3)
    distill(pair, str(clips), tmp_path / "assistant", DistillOptions(layers=2, **common), cache=tmp_path / "cache")
    assistant = load_distilled(tmp_path / "assistant", main, torch.float32, "cpu").decoder

    student = build_student(main, assistant.cross_source, assistant.draft_vocab, head=True, head_features=(0,),
                            start=assistant)
    torch.manual_seed(0)
    tokens = torch.randint(0, 90, (2, 7))
    positions = torch.arange(7).expand_as(tokens)
    cross = main.decoder.cross_states(main.encoder(torch.randn(2, 80, 3000)))
    hidden = torch.randn(2, 7, 2 * main.dims.d_model) * 10
    with torch.no_grad():
        expected = assistant.features(tokens, positions, DecoderCaches(assistant.cross_states(None, cross)))
        got = student.features(tokens, positions, DecoderCaches(student.cross_states(None, cross)),
                               before=hidden_before(student.head_input(hidden), positions))
    torch.testing.assert_close(got, expected)

    options = DistillOptions(layers=2, head=True, init_assistant=str(tmp_path / "assistant"), **common)
    distill(pair, str(clips), tmp_path / "head", options, cache=tmp_path / "cache")
    config = json.loads((tmp_path / "head" / "assistant.json").read_text())
    assert config["kind"] == "head" and config["layers_from_main"] == assistant.cross_source
    assert f"the distilled assistant `{tmp_path / 'assistant'}`" in (tmp_path / "head" / "README.md").read_text()
    head = load_distilled(tmp_path / "head", main, torch.float32, "cpu").decoder
    assert torch.equal(head.draft_vocab, assistant.draft_vocab)

    with pytest.raises(ValueError, match="an assistant of 2 layers, where layers is 1"):
        distill(pair, str(clips), tmp_path / "wrong", replace(options, layers=1), cache=tmp_path / "cache")
    with pytest.raises(ValueError, match="a draft head; training starts from a decoder assistant"):
        distill(pair, str(clips), tmp_path / "wrong", replace(options, init_assistant=str(tmp_path / "head")),
                cache=tmp_path / "cache")
    with pytest.raises(ValueError, match="give one"):
        DistillOptions(layers=2, init_layers=(0, 1), init_assistant=str(tmp_path / "assistant"))
