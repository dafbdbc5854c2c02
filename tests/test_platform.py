"""The platform record and module set-up: what a pair's decoders get on this machine's CPU follows
from the probes, whatever the instruction set (the probes' answers differ between CPUs; these tests
check what is done with them)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import perturbed_decoder, random_model

from whisper_spec.models import platform, row_invariance
from whisper_spec.models.attention import DecoderCaches
from whisper_spec.models.model import Linear
from whisper_spec.models.pair import WhisperPair

CPU = torch.device("cpu")


def _pair():
    main = random_model(0)
    return WhisperPair(main, perturbed_decoder(main, 0.05, seed=1), CPU, torch.float32)


def test_the_main_decoder_is_made_row_invariant_where_every_probe_finds_padding():
    pair = _pair()
    main, assistant = pair.main.decoder, pair.assistant.decoder
    linears = [m for m in main.modules() if isinstance(m, Linear)]
    rows = [row_invariance.linear_rows(m, main.dtype) for m in linears]
    assert pair.platform.row_invariant == all(n is not None for n in rows)
    if pair.platform.row_invariant:
        assert [m.pad_rows for m in linears] == rows
        assert main.exact_queries == row_invariance.query_rows(main.cache_dtype, main.transposed_keys)
    # an assistant's drafts need not be exact: none of its own linears is padded, its attention is plain
    assert all(m.pad_rows == 0 for m in assistant.modules() if isinstance(m, Linear))
    assert assistant.exact_queries is None
    # flash cross-attention off CPU only (platform.prepare)
    assert not main.flash_cross_attention and not assistant.flash_cross_attention


def test_cpu_decoders_keep_keys_head_dim_major_and_attend_to_the_same_values():
    """Keys stored transposed on CPU (decisions, "Keys stored transposed on CPU"): the cross-attention
    keys and the self-attention caches' keys, also once finished rows leave the batch; and a step
    reads through them the logits row-major keys give, up to the products' summation order (a
    scrambled layout would change them, in both decoding modes alike)."""
    pair = _pair()
    decoder = pair.main.decoder
    assert decoder.transposed_keys and pair.assistant.decoder.transposed_keys
    torch.manual_seed(0)
    audio = torch.randn(3, pair.main.dims.n_audio_ctx, pair.main.dims.d_model)
    tokens, positions = torch.randint(0, pair.main.dims.n_vocab, (3, 5)), torch.arange(5).expand(3, 5)
    logits = {}
    for transposed in (True, False):
        decoder.transposed_keys = transposed
        with torch.inference_mode():
            caches = DecoderCaches(decoder.cross_states(audio), decoder.new_caches(3, 24))
            logits[transposed] = decoder.logits(decoder.features(tokens, positions, caches))
        for kept in (caches, caches.rows(torch.tensor([0, 2]))):
            keys = [k for k, _ in kept.cross] + [c.k for c in kept.self_attention]
            values = [v for _, v in kept.cross] + [c.v for c in kept.self_attention]
            assert all((k.transpose(-1, -2) if transposed else k).is_contiguous() for k in keys)
            assert all(v.is_contiguous() for v in values)
    torch.testing.assert_close(logits[True], logits[False], rtol=0, atol=1e-4)


def test_an_assistant_sharing_the_main_decoders_cross_states_reads_them_in_its_own_attention_dtype():
    """As where the main decoder's attention runs in bfloat16 (benchmarks/experiments/attention_dtype.py)
    and the assistant's in float32."""
    main = random_model(0)
    assistant = perturbed_decoder(main, 0.05, seed=1)
    for model in (main, assistant):
        model.decoder.to(torch.bfloat16)
    pair = WhisperPair(main, assistant, CPU, torch.bfloat16)
    main, assistant = pair.main.decoder, pair.assistant.decoder
    main.attention_dtype = torch.bfloat16
    assistant.cross_source = list(range(len(assistant.blocks)))
    with torch.inference_mode():
        main_cross = main.cross_states(torch.randn(1, pair.main.dims.n_audio_ctx, pair.main.dims.d_model))
        shared = assistant.cross_states(None, main=main_cross, n_frames=7)
    assert assistant.cache_dtype == torch.float32
    for (k, v), (main_k, main_v) in zip(shared, main_cross):
        assert main_k.dtype == torch.bfloat16
        assert k.dtype == v.dtype == torch.float32 and v.is_contiguous()
        # dense in the assistant's own key layout (model.keys_in_memory), whatever slice of the main's it is
        assert (k.transpose(-1, -2) if assistant.transposed_keys else k).is_contiguous()
        assert torch.equal(k, main_k[:, :, :7].float()) and torch.equal(v, main_v[:, :, :7].float())


def test_a_padded_linear_gives_each_row_its_one_row_result():
    pair = _pair()
    linear = pair.main.decoder.blocks[0].mlp.fc2
    if not pair.platform.row_invariant:
        pytest.skip("this CPU's kernels cannot be padded into row invariance: decoding takes fixed shapes")
    x = torch.randn(7, linear.in_features)
    with torch.inference_mode():
        alone = torch.cat([linear(row[None]) for row in x])
        for count in (2, 3, 5, 7):
            assert torch.equal(torch.cat([linear(rows) for rows in x.split(count)]), alone)


def test_prepare_packs_decoder_linears_sets_cpu_attention_and_one_encoder_window_a_call():
    pair = _pair()
    decoder, encoder = pair.main.decoder, pair.main.encoder
    assert decoder.cache_dtype == torch.float32
    platform.prepare(encoder, CPU)
    assert encoder.one_window_a_call
    # the encoder's linears keep F.linear's kernel; a decoder's float32 ones run oneDNN's where it runs
    assert all(m.packed is None for m in encoder.modules() if isinstance(m, Linear))
    packed = [m.packed is not None for m in decoder.modules() if isinstance(m, Linear)]
    assert all(packed) or platform.onednn_packed(torch.zeros(4, 4)) is None
    platform.prepare(decoder, CPU)  # idempotent: the packed copies stay
    assert [m.packed is not None for m in decoder.modules() if isinstance(m, Linear)] == packed


def test_the_record_keys_policies_on_the_device_kind_and_decoder_precision(monkeypatch):
    kind = platform.device_kind(CPU)
    assert kind == ("cpu-amx" if platform.cpu_has_amx() else "cpu-avx2" if platform.cpu_limited_to_avx2() else "cpu")
    monkeypatch.setattr(platform, "AUTO_MAX_DRAFT_FRAMES", {(kind, "float"): 1234, (kind, "int8"): 99})
    record = _pair().platform
    assert record.auto_max_draft_frames == 1234  # float decoders
    assert record.compiles == "drafts" and record.assistant_skips_padding and not record.cuda_graphs


def test_loader_defaults_by_device():
    cuda = torch.device("cuda")
    assert platform.default_precision(cuda) == (False, "float16")
    assert platform.default_precision(cuda, int8=True, dtype="bfloat16") == (True, "bfloat16")
    int8 = platform.default_int8(CPU)
    assert platform.default_precision(CPU) == (int8, (platform.cpu_int8_dtype() or "bfloat16") if int8 else "float32")
    assert platform.default_encoder_precision(cuda, torch.float16) == "float16"
    assert platform.default_encoder_precision(CPU, torch.float32) in ("bfloat16", "int8", "float32")


# what .ci/run's second pass sets: an AVX-512 CPU then runs the kernels an AVX2-only CPU runs. ATen's and
# oneDNN's choices are checked here; fbgemm's (the row-int8 kernel) shows in time only (1.7x slower under
# its AVX2 limit on an AVX-512 EPYC, the same integers); MKL's is set for CPUs where MKL honours it (on
# AMD EPYCs MKL picks its own code path: results bit-identical down to SSE4_2 there).
AVX2_KERNELS = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
                "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2"}
ISA_PROBE = """
import torch
from whisper_spec.models import platform
platform.onednn_packed(torch.randn(64, 64))  # a oneDNN primitive: its verbose mode names the ISA it runs
print("kind", torch.backends.cpu.get_cpu_capability(), platform.device_kind(torch.device("cpu")), platform.cpu_has_amx())
"""


@pytest.mark.skipif("avx2" not in Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else True,
                    reason="not an x86 CPU with AVX2")
def test_avx2_kernel_limits_take_effect_and_the_platform_decides_as_on_avx2():
    env = {k: v for k, v in os.environ.items() if k not in AVX2_KERNELS} | AVX2_KERNELS | {"ONEDNN_VERBOSE": "1"}
    run = subprocess.run([sys.executable, "-c", ISA_PROBE], capture_output=True, text=True, env=env, check=True)
    isa = next(line for line in run.stdout.splitlines() if ",isa:" in line)
    assert "AVX2" in isa and "512" not in isa and "AMX" not in isa, isa
    assert run.stdout.splitlines()[-1].split() == ["kind", "AVX2", "cpu-avx2", "False"]
