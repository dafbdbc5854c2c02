"""Drafts from a hint (a previous hypothesis of the same audio, as a live stream has): free drafts,
verified, so the tokens are the main model's whatever the hint, in fewer main-model passes."""

from dataclasses import replace

import pytest
import torch
from conftest import main_alone, perturbed_decoder, random_model

from whisper_spec.decode.decoding import decode_windows, encode_batch
from whisper_spec.decode.speculative import HINT_SHIFT, hint_continuation, hint_text
from whisper_spec.models.pair import WhisperPair
from whisper_spec.options import DecodingOptions

CPU = torch.device("cpu")


def test_a_hint_continues_where_the_text_meets_it():
    hint = (10, 11, 12, 13, 14, 15)
    assert hint_continuation(hint, [10, 11], 3) == [12, 13, 14]
    assert hint_continuation(hint, [], 2) == [10, 11]
    assert hint_continuation(hint, [10, 11, 20, 12, 13], 2) == [14, 15]  # a token inserted: found again after it
    assert hint_continuation(hint, [10, 11, 12, 14, 15], 4) == []  # past the hint's end
    assert hint_continuation(hint, [10, 11, 12, 13, 14], 3, end=0) == [15, 0]  # then the token it ended with
    assert hint_continuation(hint, [*hint, 16], 3, end=0) == []  # the text went on past the hint's end
    assert hint_continuation(hint, [30, 31], 3) == []  # nowhere in it
    # of two occurrences, the one nearest to where the text ends
    assert hint_continuation((5, 6, 1, 5, 6, 2, 5, 6, 3), [9, 9, 9, 9, 5, 6], 1) == [2]
    # an occurrence further than HINT_SHIFT from where the text ends is a common pair recurring, not a shift
    far = [9] * (HINT_SHIFT + 3) + [5, 6]
    assert hint_continuation((5, 6, 1, *[8] * (HINT_SHIFT + 3)), far, 1) == []
    assert hint_continuation((*[8] * (HINT_SHIFT + 3), 5, 6, 1), far, 1) == [1]


def test_a_hints_closing_timestamps_are_left_to_the_assistant():
    """A live stream's last hypothesis closes its last segment where that buffer ended; the next buffer
    goes on, so the hint's text is drafted and the assistant drafts what follows it."""
    assert hint_text((1, 2, 60, 3, 61, 62), timestamp_begin=59) == (1, 2, 60, 3)
    assert hint_text((1, 2), timestamp_begin=59) == (1, 2)
    assert hint_text((60,), timestamp_begin=59) == ()


def test_past_its_hint_a_row_drafts_from_the_assistant_in_the_same_round():
    """The hint (all but a row's last tokens) and the assistant's drafts after it are verified in one
    pass: with an assistant that always agrees, fewer passes than the hint followed by EOT alone."""
    pair, mel = _assisted_pair_and_mel(noise=0.0, windows=3)
    options = DecodingOptions(language="en", speculation="on", draft_tokens=4)
    main_only, _ = decode_windows(pair, mel, main_alone(options))
    hints = [r.tokens[:-3] for r in main_only]
    together, _ = decode_windows(pair, mel, options, hints=hints)
    hint_alone, _ = decode_windows(WhisperPair(pair.main, None, CPU, torch.float32), mel, options, hints=hints)
    assert [r.tokens for r in together] == [r.tokens for r in hint_alone] == [r.tokens for r in main_only]
    assert all(t.stats.main_forwards < h.stats.main_forwards for t, h in zip(together, hint_alone))
    # speculation "auto" beside hints drafts from the hints alone: on a live tail the assistant's steps
    # cost more than the passes they save (decoding._assistant)
    auto, auto_stats = decode_windows(pair, mel, replace(options, speculation="auto"), hints=hints)
    assert [r.tokens for r in auto] == [r.tokens for r in main_only]
    assert auto_stats.assistant_forwards == 0 and [r.stats.main_forwards for r in auto] == [
        r.stats.main_forwards for r in hint_alone]
    # and its encoding makes no assistant states for it (a live update's batch is encoded before it decodes)
    with_hints = {speculation: encode_batch(pair, mel, replace(options, speculation=speculation), hints=hints)[0]
                  for speculation in ("auto", "on")}
    assert with_hints["auto"].assistant is None and with_hints["on"].assistant is not None
    assert encode_batch(pair, mel, replace(options, speculation="auto"))[0].assistant is not None


@pytest.fixture(scope="module")
def pair_and_mel():
    main = random_model(0, eot_bias=0.1)
    torch.manual_seed(3)
    return WhisperPair(main, None, CPU, torch.float32), torch.randn(4, 80, 3000)


@pytest.mark.parametrize("temperature", [0.0, 0.6])
def test_hinted_rows_give_the_main_models_tokens_in_fewer_passes(pair_and_mel, temperature):
    """Four rows: no hint, the main model's own output, that output with a token dropped and one
    changed, and another row's output: every row's tokens are main-only's, and the exact hint decodes in
    a pass for every max_draft_tokens tokens."""
    pair, mel = pair_and_mel
    options = DecodingOptions(language="en", timestamps=True, temperature=(temperature,), seed=7)
    main_only, main_stats = decode_windows(pair, mel, main_alone(options))
    own, other = main_only[1].tokens, main_only[2].tokens
    assert len(own) > 8 and len(other) > 8
    edited = [*other[:3], *other[4:6], 1, *other[7:]]
    hints = [None, own, edited, main_only[0].tokens]
    hinted, stats = decode_windows(pair, mel, options, hints=hints)
    assert [r.tokens for r in hinted] == [r.tokens for r in main_only]
    # the hint and its EOT drafted max_draft_tokens a pass, every one accepted; no assistant ran
    assert hinted[1].stats.main_forwards == -(-(len(own) + 1) // (options.max_draft_tokens + 1))
    assert hinted[1].stats.accepted == len(own) + 1 - hinted[1].stats.main_forwards
    assert hinted[0].stats.drafted == 0 and stats.assistant_forwards == 0
    assert stats.row_forwards < main_stats.row_forwards
    # the main model alone takes no drafts, hinted or not
    _, alone = decode_windows(pair, mel, main_alone(options), hints=hints)
    assert alone.drafted == 0 and alone.main_forwards == main_stats.main_forwards


def test_a_hint_and_an_assistant_draft_together_and_stay_exact():
    """Past its hint's end (or where its text left the hint) a row drafts from the assistant."""
    pair, mel = _assisted_pair_and_mel(noise=0.05, windows=2)
    options = DecodingOptions(language="en", speculation="on", draft_tokens=3)
    main_only, _ = decode_windows(pair, mel, main_alone(options))
    half = [r.tokens[: len(r.tokens) // 2] for r in main_only]
    hinted, stats = decode_windows(pair, mel, options, hints=half)
    _, unhinted = decode_windows(pair, mel, options)
    assert [r.tokens for r in hinted] == [r.tokens for r in main_only]
    assert stats.assistant_forwards > 0 and stats.main_forwards < unhinted.main_forwards


def _assisted_pair_and_mel(noise: float, windows: int) -> tuple[WhisperPair, torch.Tensor]:
    """A random main model with an assistant of its weights plus noise (0.0: it always agrees), and
    random mel windows."""
    main = random_model(0, eot_bias=0.25)
    pair = WhisperPair(main, perturbed_decoder(main, noise, seed=1), CPU, torch.float32)
    torch.manual_seed(4)
    return pair, torch.randn(windows, 80, 3000)
