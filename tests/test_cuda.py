"""The CUDA path: exactness in half precision at every batch size, CUDA graphs, the int8 kernel and
int8 memory. Marked `cuda`; skipped without a GPU (`benchmarks/gpu.sh` runs them on one)."""

import json
from dataclasses import replace

import pytest
import torch
from conftest import main_alone, mel_of, perturbed_decoder, random_model, speech
from whisper_spec.cli.main import main as cli

from whisper_spec.decode.decoding import decode_windows
from whisper_spec.decode.graphs import capture_round
from whisper_spec.models.load import load_model, load_pair
from whisper_spec.models.pair import WhisperPair
from whisper_spec.models.quantize import Int8Linear, weight_bytes
from whisper_spec.options import DecodingOptions

pytestmark = [pytest.mark.cuda, pytest.mark.slow, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]

CLIPS = [
    "librispeech/test-other/1688-142285-0000.flac",
    "librispeech/test-clean/1089-134686-0001.flac",
    "multilingual/de/thorsten_1386ecbb98a8f46dd0b0eb75d68ee0d0.flac",
    "librispeech/test-other/1688-142285-0002.flac",
]


@pytest.fixture(scope="module")
def clip_mel():
    return mel_of([speech(c) for c in CLIPS])


@pytest.fixture(scope="module", params=["float16", "bfloat16"])
def cuda_pair(request):
    """Real whisper base and its shipped assistant on the GPU."""
    return load_pair("base", "default", device="cuda", dtype=request.param)


def tokens_of(pair, mel, options, **kwargs):
    return [r.tokens for r in decode_windows(pair, mel, options, **kwargs)[0]]


# a capture that fails falls back to eager steps with a warning: here that is a failure, since batch
# sizes change between cases (new cache layouts) exactly as in a bench run
@pytest.mark.filterwarnings("error:CUDA graphs turned off")
@pytest.mark.parametrize("timestamps", [False, True], ids=["text", "timestamps"])
@pytest.mark.parametrize("batch", [1, 2, 3, 4, 8, 16])
def test_base_speculative_equals_main_only_on_cuda(cuda_pair, clip_mel, batch, timestamps):
    mel = clip_mel.repeat(-(-batch // len(clip_mel)), 1, 1)[:batch]  # the clips again past 4
    for graphs in (True, False):
        options = DecodingOptions(speculation="on", timestamps=timestamps, cuda_graphs=graphs)
        main_only = tokens_of(cuda_pair, mel, main_alone(options))
        speculative, stats = decode_windows(cuda_pair, mel, options)
        assert [r.tokens for r in speculative] == main_only, f"graphs={graphs}: speculative differs from main-only"
        assert stats.accepted > 0 and all(len(t) > 3 for t in main_only)
        if graphs:
            with_graphs = main_only
    assert with_graphs == main_only, "CUDA graph replays changed the tokens"


@pytest.mark.filterwarnings("error:CUDA graphs turned off")
@pytest.mark.parametrize("dtype, batch, timestamps", [("float16", 1, False), ("bfloat16", 4, True)],
                         ids=["float16-b1-text", "bfloat16-b4-timestamps"])
def test_compiled_rounds_are_exact_on_cuda(clip_mel, dtype, batch, timestamps):
    """DecodingOptions.compile on a GPU: every step of a round through torch.compile, then captured
    whole; speculative == main-only, both compiled, and the round's steps were compiled. Two cases,
    each dtype and each timestamp mode once: every case compiles its own graphs, which a GPU lease pays."""
    from torch._dynamo.utils import counters

    cuda_pair = load_pair("base", "default", device="cuda", dtype=dtype)
    mel = clip_mel[:batch]
    options = DecodingOptions(speculation="on", timestamps=timestamps, compile=True)
    compiled_frames = counters["frames"]["ok"]
    main_only = tokens_of(cuda_pair, mel, main_alone(options))
    speculative, stats = decode_windows(cuda_pair, mel, options)
    assert [r.tokens for r in speculative] == main_only and stats.accepted > 0
    assert counters["frames"]["ok"] > compiled_frames and all(len(t) > 3 for t in main_only)


@pytest.mark.filterwarnings("error:CUDA graphs turned off")
def test_kept_round_graphs_replay_other_batches_exactly_on_cuda(cuda_pair, clip_mel, monkeypatch):
    """A whole-round graph captured on one batch replays the next batch of its configuration (other
    audio, other seeds) on that batch's values: the tokens are the eager rounds', and the second
    batch captures nothing (fixed_shapes.whole_rounds)."""
    import whisper_spec.decode.fixed_shapes as fixed_rounds

    captures = []

    def counted(run_round):
        captures.append(1)
        return capture_round(run_round)

    monkeypatch.setattr(fixed_rounds, "capture_round", counted)
    for options in (DecodingOptions(speculation="on"), DecodingOptions(speculation="on", temperature=(0.7,), seed=3)):
        captures.clear()
        for mel, seeds in ((clip_mel[:2], [0, 1]), (clip_mel[2:], [2, 3])):
            eager = tokens_of(cuda_pair, mel, replace(options, cuda_graphs=False), seeds=seeds)
            assert tokens_of(cuda_pair, mel, options, seeds=seeds) == eager
        assert len(captures) <= 1, "the second batch of a configuration captured its rounds again"


def test_flash_cross_attention_reads_the_clips_as_the_written_out_one_on_cuda(cuda_pair, clip_mel):
    """Cross-attention through flash attention (the default on a GPU in half precision,
    platform.prepare) against the written-out attention on the same GPU: the same text for all clips
    but at most one (other sums, near-tied tokens may part); the written-out attention exact as
    well. Without graphs: a kept graph bakes the choice in."""
    decoders = [cuda_pair.main.decoder, cuda_pair.assistant.decoder]
    assert all(decoder.flash_cross_attention for decoder in decoders)
    options = DecodingOptions(speculation="on", cuda_graphs=False)
    flash = tokens_of(cuda_pair, clip_mel, main_alone(options))
    try:
        for decoder in decoders:
            decoder.flash_cross_attention = False
        written_out = tokens_of(cuda_pair, clip_mel, main_alone(options))
        assert tokens_of(cuda_pair, clip_mel, options) == written_out
    finally:
        for decoder in decoders:
            decoder.flash_cross_attention = True
    assert sum(a == b for a, b in zip(flash, written_out)) >= len(CLIPS) - 1


def test_adaptive_drafts_are_exact_on_cuda(cuda_pair, clip_mel):
    options = DecodingOptions(speculation="on", adaptive_draft=True, draft_tokens=2, max_draft_tokens=8)
    assert tokens_of(cuda_pair, clip_mel, options) == tokens_of(cuda_pair, clip_mel, main_alone(options))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("batch", [1, 2, 3, 4])
def test_random_models_are_exact_on_cuda(dtype, batch):
    main = random_model(0, eot_bias=2.0)
    assistant = perturbed_decoder(main, noise=0.1, seed=1)
    # moved before a pair is made: a CPU pair packs its decoder linears for oneDNN, a layout CUDA lacks
    for model in (main, assistant):
        for part in (model.encoder, model.decoder):
            if part is not None:
                part.to(device="cuda", dtype=dtype)
    pair = WhisperPair(main, assistant, torch.device("cuda"), dtype)
    torch.manual_seed(2)
    mel = torch.randn(batch, 80, 3000, device="cuda")
    for options in (DecodingOptions(speculation="on", language="en", max_length=40, draft_confidence=0),
                    DecodingOptions(speculation="on", language="de", timestamps=True, max_length=40, draft_confidence=0)):
        assert tokens_of(pair, mel, options) == tokens_of(pair, mel, main_alone(options))


def test_int8_kernel_runs_on_cuda_and_matches_dequantized_weights():
    pair = load_pair("base", "default", device="cuda", dtype="bfloat16", int8=True)
    assert pair.int8_kernel == "int8pack_mm"
    linears = [m for m in pair.main.decoder.modules() if isinstance(m, Int8Linear)]
    assert len(linears) > 30 and all(m.weight.is_cuda and m.weight.dtype == torch.int8 for m in linears)
    linear = next(m for m in linears if m.bias is not None)
    x = torch.randn(5, linear.in_features, device="cuda", dtype=torch.bfloat16)
    reference = x.float() @ (linear.weight.float() * linear.scales.float()[:, None]).T + linear.bias.float()
    torch.testing.assert_close(linear(x).float(), reference, rtol=2e-2, atol=5e-2)


def test_int8_is_exact_on_cuda(clip_mel):
    pair = load_pair("base", "default", device="cuda", dtype="bfloat16", int8=True)
    options = DecodingOptions(speculation="on")
    assert tokens_of(pair, clip_mel, options) == tokens_of(pair, clip_mel, main_alone(options))


def test_prequantized_directory_builds_no_float_decoder_weight_on_cuda(tmp_path):
    assert cli(["quantize", "base", "--output", str(tmp_path / "base-int8")]) == 0
    assert json.loads((tmp_path / "base-int8" / "quantization.json").read_text())["format"] == "whisper-spec-int8/1"
    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    model = load_model(tmp_path / "base-int8", with_encoder=False, dtype="float16", device="cuda")
    float_matrices = {n for n, t in model.decoder.state_dict().items() if t.is_floating_point() and t.dim() == 2}
    assert float_matrices == {"positional_embedding"}
    float16_bytes = weight_bytes(load_model("base", with_encoder=False, dtype="float16").decoder)
    # no float copy of a decoder weight was ever allocated on the GPU on the way
    assert torch.cuda.max_memory_allocated() - before < 0.6 * float16_bytes
