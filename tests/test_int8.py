"""int8 weight-only decoder linears: error bounds, exactness under int8, pre-quantized loading; int8 encoder linears."""

import json
import os
import shutil
from dataclasses import replace

import pytest
import torch
from conftest import main_alone, manifest, mel_of, speech
from whisper_spec.cli.main import main as cli

from whisper_spec.decode.decoding import decode_encoded, decode_windows, encode_batch
from whisper_spec.decode.encoding import encoder_states
from whisper_spec.models import load, platform
from whisper_spec.models.attention import DecoderCaches
from whisper_spec.models.load import load_model, load_pair
from whisper_spec.models.pair import encoder_precision
from whisper_spec.models.platform import KERNEL_ROW_BLOCK, prepare_int8
from whisper_spec.models.quantize import (
    ALIGNMENT,
    BLOCK_LINEARS,
    DynamicInt8Linear,
    Int8Embedding,
    Int8Linear,
    dynamic_int8_weights,
    int8pack_mm,
    is_aligned,
    pack_row_int8,
    quantize_decoder_state,
    quantize_per_channel,
    row_int8_mm,
    weight_bytes,
)
from whisper_spec.models.sources import default_assistant
from whisper_spec.options import DecodingOptions

CLIPS = [speech(r["path"]) for r in manifest() if r["set"] == "librispeech"][8:12] + [
    speech("multilingual/pl/mls_1889_1447_000002.flac")
]


@pytest.fixture(scope="module")
def int8_pair():
    """int8 decoders on bfloat16 rows beside an int8 encoder (the CPU default without AMX)."""
    return load_pair("base", default_assistant("base"), dtype="bfloat16", int8=True, encoder_precision="int8")


@pytest.fixture(scope="module")
def row_int8_pair():
    """int8 decoders, the main model's on float32 rows (every linear row-int8), the assistant's on
    bfloat16 rows (aten's fused kernel, faster at one row)."""
    return load_pair("base", default_assistant("base"), int8=True, dtype="float32")


def _relative_error(approx: torch.Tensor, exact: torch.Tensor) -> float:
    return float((approx.float() - exact.float()).norm() / exact.float().norm())


def test_per_channel_quantization_round_trips_within_half_a_step():
    weight = torch.randn(64, 32) * torch.logspace(-3, 1, 64)[:, None]  # rows of very different scales
    q, scales = quantize_per_channel(weight)
    assert q.dtype == torch.int8 and scales.shape == (64,)
    assert int(q.abs().max()) == 127
    assert torch.all((q.float() * scales[:, None] - weight).abs() <= scales[:, None] / 2 + 1e-7)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_every_int8_layer_stays_close_to_its_float_layer(base_pair, int8_pair, dtype):
    float_decoder, int8_decoder = base_pair.main.decoder, int8_pair.main.decoder
    torch.manual_seed(0)
    for i in range(len(float_decoder.blocks)):
        for name in BLOCK_LINEARS:
            exact = float_decoder.get_submodule(f"blocks.{i}.{name}")
            approx = int8_decoder.get_submodule(f"blocks.{i}.{name}")
            assert isinstance(approx, Int8Linear) and approx.weight.dtype == torch.int8
            x = torch.randn(8, exact.in_features)
            error = _relative_error(approx(x.to(dtype)), exact(x))
            # per-channel int8 of these weights: ~0.5-1% (bfloat16 activations add ~0.3%); float32 rows
            # take quantize.row_int8_mm, whose 7-bit activations add about 1% on these Gaussian rows
            bound = 0.035 if dtype == torch.float32 else 0.02
            assert error < bound, f"blocks.{i}.{name}: {error:.4f}"
    tokens = torch.randint(0, 51865, (4, 16))
    assert _relative_error(int8_decoder.token_embedding(tokens), float_decoder.token_embedding(tokens)) < 0.02
    x = torch.randn(4, 512)
    logits = torch.nn.functional.linear(x, float_decoder.token_embedding.weight)
    # the output projection quantizes its activations too on CPU (7 bits a row, quantize.row_int8_mm):
    # about 2.7% on these Gaussian rows; its WER cost is measured in docs/models.md (int8 decoder linears)
    assert _relative_error(int8_decoder.proj_out(x.to(dtype)), logits) < 0.035


@pytest.mark.slow
@torch.inference_mode()
def test_int8_cross_attention_states_come_from_a_float_product_of_the_int8_weights(base_pair):
    """With a float encoder, a window's cross-attention keys and values (1500 frames) go through a
    float GEMM on the dequantized int8 weights: as close to the float layer as the int8 kernel is."""
    int8_pair = load_pair("base", None, dtype="bfloat16", int8=True, encoder_precision="float32")
    states = torch.randn(1, 1500, 512) * 0.5
    float_block, int8_block = base_pair.main.decoder.blocks[2], int8_pair.main.decoder.blocks[2]
    k, v = int8_pair.main.decoder.cross_states(states)[2]
    assert k.dtype == v.dtype == torch.float32
    kv = int8_block.cross_attn.kv
    product = kv.many_rows(states.to(torch.bfloat16).float())
    assert torch.equal(torch.cat([t.transpose(1, 2).flatten(2) for t in (k, v)], dim=-1), product)
    assert _relative_error(product, float_block.cross_attn.kv(states)) < 0.02
    assert _relative_error(product, kv(states.to(torch.bfloat16))) < 0.01  # the fused kernel's product


@pytest.mark.slow
@torch.inference_mode()
@pytest.mark.parametrize("int8_decoder", [False, True])
def test_cross_attention_states_beside_an_int8_encoder_are_int8_products_a_window_at_a_time(base_pair, int8_pair,
                                                                                          int8_decoder):
    """Where the encoder is int8 (the CPU default without AMX), so are the cross-attention keys and values,
    the decoder's one other product over a window's 1500 frames: activations quantized per frame,
    one window a call, so that a window's states do not depend on the windows beside it. Float
    or int8 decoder alike; near the float layer's."""
    pair = int8_pair if int8_decoder else load_pair("base", None, int8=False, encoder_precision="int8")
    assert pair.main.encoder.blocks[0].mlp.fc1.__class__ is DynamicInt8Linear
    states = torch.randn(3, 1500, 512) * torch.tensor([0.1, 0.5, 2.0])[:, None, None]
    decoder = pair.main.decoder
    together = decoder.cross_states(states)[2]
    alone = [decoder.cross_states(window)[2] for window in states.split(1)]
    for i, t in enumerate(together):
        assert t.dtype == torch.float32
        assert torch.equal(t, torch.cat([a[i] for a in alone]))
    k, v = together
    merged = torch.cat([t.transpose(1, 2).flatten(2) for t in (k, v)], dim=-1)
    exact = base_pair.main.decoder.blocks[2].cross_attn.kv(states.to(decoder.dtype).float())
    assert all(0 < _relative_error(merged[i], exact[i]) < 0.03 for i in range(3))


def _unaligned_tensors(module: torch.nn.Module) -> list[str]:
    return [name for name, t in module.state_dict().items() if t.numel() and not is_aligned(t)]


@pytest.mark.slow
def test_float16_assistant_file_is_loaded_into_aligned_storage():
    """The shipped assistant is stored float16: at dtype float16 nothing converts its tensors, so
    without realignment they would stay views at the file's offsets."""
    pair = load_pair("base", default_assistant("base"), dtype="float16", assistant_int8=False)
    assert pair.assistant.decoder.blocks[0].mlp.fc1.weight.dtype == torch.float16
    assert _unaligned_tensors(pair.assistant.decoder) == [] and _unaligned_tensors(pair.main.decoder) == []


def _misaligned_copy(tensor: torch.Tensor, offset: int) -> torch.Tensor:
    """tensor's values in storage that starts `offset` bytes past an aligned address."""
    buffer = torch.empty(tensor.numel() * tensor.element_size() + ALIGNMENT, dtype=torch.uint8)
    view = buffer[offset : offset + tensor.numel() * tensor.element_size()].view(tensor.dtype).view(tensor.shape)
    view.copy_(tensor)
    return view


@pytest.mark.parametrize("offset", [1, 2, 4, 8, 16, 32])
def test_int8_linear_realigns_a_misaligned_weight_before_the_kernel_reads_it(offset):
    """On AVX-512 CPUs aten._weight_int8pack_mm crashes the process on an unaligned weight (the
    weights of a safetensors file read in place); on any CPU the weight must be realigned first."""
    weight, scales = quantize_per_channel(torch.randn(1024, 512))
    reference = Int8Linear(512, 1024, bias=False, device="meta")
    reference.weight, reference.scales = weight, scales
    linear = Int8Linear(512, 1024, bias=False, device="meta")
    linear.weight, linear.scales = _misaligned_copy(weight, offset), scales
    for module in (reference, linear):
        prepare_int8(module, torch.device("cpu"), {torch.bfloat16})
    assert linear.kernels[torch.bfloat16] == "int8pack_mm"
    assert not is_aligned(linear.weight)
    x = torch.randn(3, 512, dtype=torch.bfloat16)
    assert torch.equal(linear(x), reference(x))
    assert is_aligned(linear.weight) and torch.equal(linear.weight, weight)


@torch.inference_mode()
def test_int8_kernel_calls_of_at_most_four_rows_give_each_row_its_one_row_result():
    """On CPU int8pack_mm takes calls of KERNEL_ROW_BLOCK rows at most (a speed fix);
    every row, in any call, is what the kernel gives that row alone, and what one call gives it."""
    weight, scales = quantize_per_channel(torch.randn(1031, 512))
    scales = scales.to(torch.bfloat16)
    x = torch.randn(9, 512, dtype=torch.bfloat16)
    alone = torch.cat([torch.ops.aten._weight_int8pack_mm(x[i : i + 1], weight, scales) for i in range(len(x))])
    for n_rows in range(1, len(x) + 1):
        assert torch.equal(int8pack_mm(x[:n_rows], weight, scales, KERNEL_ROW_BLOCK), alone[:n_rows])
        assert torch.equal(torch.ops.aten._weight_int8pack_mm(x[:n_rows], weight, scales), alone[:n_rows])
    assert KERNEL_ROW_BLOCK < len(x)


@pytest.mark.slow
@torch.inference_mode()
def test_an_assistants_own_wide_calls_take_a_float_gemm_and_the_main_models_never(int8_pair):
    """A round's first assistant step reads a prompt or a hint at once: its own linears run such calls
    through a float GEMM on the dequantized weight (near the fused kernel's result); the linears it
    shares with the main model (cross-attention keys and values, the output rows) and all of the main
    model's stay on the row-invariant kernel, so verification stays exact; its draft vocabulary's on
    the fused kernel."""
    main_linears = [m for m in int8_pair.main.decoder.modules() if isinstance(m, Int8Linear)]
    shared = {id(m) for m in main_linears}
    assistant = int8_pair.assistant.decoder
    vocabulary = [m for m in assistant.proj_out.modules() if isinstance(m, Int8Linear)]
    own = [m for m in assistant.modules() if isinstance(m, Int8Linear) and id(m) not in shared and m not in vocabulary]
    assert own and all(m.dense_rows == platform.ASSISTANT_DENSE_ROWS for m in own)
    # its draft vocabulary's projection (a row a batch row, 20480 x 512): dequantized, dearer at any row count
    assert vocabulary and all(m.dense_rows is None for m in vocabulary)
    assert all(m.dense_rows is None for m in main_linears)
    fc1 = int8_pair.assistant.decoder.blocks[0].mlp.fc1
    x = torch.randn(platform.ASSISTANT_DENSE_ROWS, fc1.in_features, dtype=torch.bfloat16)
    fused = int8pack_mm(x, fc1.weight, fc1.scales.to(x.dtype), KERNEL_ROW_BLOCK) + fc1.bias.to(x.dtype)
    assert not torch.equal(fc1(x), fused) and _relative_error(fc1(x), fused) < 0.01


@torch.inference_mode()
def test_row_int8_kernel_gives_each_row_its_one_row_result_and_stays_near_float():
    """The output projection's kernel (int8 activations per row, fixed quantization): a row's
    result does not depend on the rows computed with it, bit for bit, unlike torch's dynamic
    linear (its activation scale comes from the whole call), and stays within int8's error."""
    torch.manual_seed(0)  # unseeded, the inputs followed whatever ran before (0.0211 once against 0.02)
    weight = torch.randn(1031, 512)
    quantized, scales = quantize_per_channel(weight)
    packed = pack_row_int8(quantized, scales)
    x = torch.randn(9, 512) * torch.logspace(-2, 2, 9)[:, None]  # rows of very different magnitudes
    alone = torch.cat([row_int8_mm(x[i : i + 1], packed) for i in range(len(x))])
    for n_rows in range(1, len(x) + 1):
        assert torch.equal(row_int8_mm(x[:n_rows], packed), alone[:n_rows])
    exact = x @ weight.T
    # 7-bit activations (a step of 1/63 of the row's largest, about 3.5 standard deviations) and int8
    # weights: about 2% of a row's norm, more in an unlucky draw
    assert ((alone - exact).norm(dim=1) / exact.norm(dim=1)).max() < 0.03
    dynamic = torch.ops.quantized.linear_dynamic(x, packed, True)
    assert not torch.equal(dynamic[:1], torch.ops.quantized.linear_dynamic(x[:1], packed, True))


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["int8/float32", "int8/bfloat16"])
def test_int8_pairs_are_exact_on_their_kernels(request, precision):
    pair = request.getfixturevalue("row_int8_pair" if precision == "int8/float32" else "int8_pair")
    main, assistant = pair.main.decoder, pair.assistant.decoder
    rows = torch.randn(1, 512, dtype=main.dtype)
    assert main.blocks[0].mlp.fc1.kernel(rows) == pair.int8_kernel == {"int8/float32": "row_int8",
                                                                      "int8/bfloat16": "int8pack_mm"}[precision]
    # the output projections, the main model's and the draft vocabulary's, take int8 activations;
    # the assistant's one-row steps run aten's fused kernel on bfloat16 rows in both pairs
    draft_rows = torch.randn(1, 512, dtype=assistant.dtype)
    assert main.proj_out.kernel(rows) == assistant.proj_out.rows.kernel(draft_rows) == "row_int8"
    assert assistant.dtype == torch.bfloat16 and assistant.blocks[0].mlp.fc1.kernel(draft_rows) == "int8pack_mm"
    assert assistant.token_embedding is main.token_embedding
    # drafting for Polish too (the shipped assistant would leave it to the main model): the clip
    # on which bfloat16 verification once diverged
    everywhere = replace(pair, assistant=replace(pair.assistant, draft_languages=None))
    plain_and_timed = (DecodingOptions(speculation="on"), DecodingOptions(speculation="on", timestamps=True))
    main_only = {}  # (clip, timestamps): the main model's tokens at batch 4, which batch 1 must give too
    for batch_size in (4, 1):
        for first in range(0, len(CLIPS), batch_size):
            encoded, _ = encode_batch(everywhere, mel_of(CLIPS[first : first + batch_size]), plain_and_timed[0])
            for options in plain_and_timed:
                if batch_size == 4:
                    alone, _ = decode_encoded(everywhere, encoded, main_alone(options))
                    main_only.update({(first + i, options.timestamps): r.tokens for i, r in enumerate(alone)})
                spec, stats = decode_encoded(everywhere, encoded, options)
                assert [r.tokens for r in spec] == [main_only[first + i, options.timestamps] for i in range(len(spec))]
                assert stats.drafted > 0


@pytest.mark.slow
def test_auto_speculation_drafts_in_every_round_for_an_int8_pair_on_cpu(int8_pair):
    """As measured to pay there (platform.AUTO_MAX_DRAFT_FRAMES: on CPUs with AMX up to one full
    window, three without): auto drafts as on does for two short clips; every mode gives the int8
    main model's tokens."""
    mel = mel_of(CLIPS[:2])
    alone, _ = decode_windows(int8_pair, mel, DecodingOptions(speculation="off"))
    auto, auto_stats = decode_windows(int8_pair, mel, DecodingOptions())
    on, on_stats = decode_windows(int8_pair, mel, DecodingOptions(speculation="on"))
    assert auto_stats.drafted == on_stats.drafted > 0
    assert [r.tokens for r in on] == [r.tokens for r in auto] == [r.tokens for r in alone]


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["int8/float32", "int8/bfloat16", "bfloat16", "float32"])
@torch.inference_mode()
def test_positions_scored_together_get_the_logits_of_one_token_steps(request, base_pair, precision):
    """What makes verification exact by construction: scoring several positions in one call gives
    each the logits a one-token step gives it, bit for bit (int8/float32: every linear row_int8)."""
    fixtures = {"int8/float32": "row_int8_pair", "int8/bfloat16": "int8_pair", "float32": "base_pair"}
    pair = request.getfixturevalue(fixtures[precision]) if precision in fixtures else load_pair("base", None, dtype=precision)
    decoder = pair.main.decoder
    cross = decoder.cross_states(pair.main.encoder(mel_of(CLIPS[:2])))
    prompt = pair.main.special.prompt("en", "transcribe", False)
    text = torch.randint(220, 50000, (2, 8), generator=torch.Generator().manual_seed(0))
    tokens = torch.cat([torch.tensor([prompt, prompt]), text], dim=1)
    positions = torch.arange(tokens.shape[1]).expand_as(tokens)
    together = decoder(tokens, positions, DecoderCaches(cross, decoder.new_caches(2, 40)))
    caches = DecoderCaches(cross, decoder.new_caches(2, 40))
    one_by_one = torch.cat([decoder(tokens[:, i : i + 1], positions[:, i : i + 1], caches)
                            for i in range(tokens.shape[1])], 1)
    assert torch.equal(together, one_by_one)


@pytest.mark.slow
def test_prequantized_directories_build_no_float_decoder_weights(tmp_path, int8_pair, capsys):
    assert cli(["quantize", "base", "--output", str(tmp_path / "base-int8")]) == 0
    assert cli(["quantize", str(default_assistant("base")), "--output", str(tmp_path / "assistant-int8")]) == 0
    assert json.loads((tmp_path / "base-int8" / "quantization.json").read_text())["format"] == "whisper-spec-int8/1"
    # a quantized copy keeps its model's shipped assistant (`transcribe --model base-int8/`)
    assert default_assistant(str(tmp_path / "base-int8")) == default_assistant("base") is not None

    model = load_model(tmp_path / "base-int8", dtype="bfloat16", encoder_precision="float32")
    decoder = model.decoder
    assert isinstance(decoder.token_embedding, Int8Embedding)
    assert decoder.proj_out.weight is decoder.token_embedding.weight  # tied: one int8 table
    float_matrices = {n for n, t in decoder.state_dict().items() if t.is_floating_point() and t.dim() == 2}
    assert float_matrices == {"positional_embedding"}
    float16_bytes = sum(t.numel() * 2 for n, t in load_model("base", with_encoder=False).decoder.state_dict().items()
                        if not n.startswith("proj_out"))
    assert weight_bytes(decoder) < 0.55 * float16_bytes
    assert model.encoder.conv1.weight.dtype == torch.float32  # the encoder is stored float

    pair = load_pair(tmp_path / "base-int8", tmp_path / "assistant-int8", dtype="bfloat16", encoder_precision="int8")
    assert pair.int8_kernel == "int8pack_mm"
    # read from safetensors files, whose tensors sit at 8-byte offsets: every weight a kernel reads
    # (the int8 ones crash ATen's kernel on AVX-512 otherwise) is loaded into aligned storage
    int8_weights = [m.weight for d in (pair.main.decoder, pair.assistant.decoder) for m in d.modules()
                    if isinstance(m, Int8Linear)]
    assert len(int8_weights) > 40 and all(is_aligned(w) for w in int8_weights)
    assert [_unaligned_tensors(m) for m in (pair.main.encoder, pair.main.decoder, pair.assistant.decoder)] == [[]] * 3
    mel = mel_of(CLIPS[:2])
    prequantized, _ = decode_windows(pair, mel, DecodingOptions(speculation="on"))
    on_the_fly, _ = decode_windows(int8_pair, mel, DecodingOptions(speculation="on"))
    assert [r.tokens for r in prequantized] == [r.tokens for r in on_the_fly]


@pytest.mark.slow
def test_transcribe_with_int8_flag(capsys):
    assert cli(["transcribe", str(CLIPS[0]), "--int8", "--language", "en"]) == 0
    captured = capsys.readouterr()
    # the kernel of the rows int8 decoders take on this CPU (bfloat16: aten's fused one; float32 on AVX2: row_int8)
    assert f"kernel: {platform.kernel_for('cpu', getattr(torch, platform.cpu_int8_dtype()))}" in captured.err
    assert len(captured.out.split()) > 3


def test_int8_encoder_scales_activations_per_row():
    """Frames of very different loudness each keep their precision: one scale for the whole call
    would round the quiet rows to nothing."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(512, 256)
    x = torch.randn(6, 512) * torch.tensor([1e-3, 1e-2, 0.1, 1.0, 10.0, 100.0])[:, None]
    with torch.inference_mode():
        approx, exact = DynamicInt8Linear(linear)(x), linear(x)
    for row in range(6):
        assert _relative_error(approx[row] - linear.bias, exact[row] - linear.bias) < 0.02


@pytest.mark.slow
def test_cpu_encoder_default_is_what_the_cpu_runs_fastest():
    """bfloat16 where the CPU has AMX, else int8 linears: the precision load_pair gives unasked."""
    pair = load_pair("base", None, dtype="bfloat16", int8=True)
    expected = "bfloat16" if platform.cpu_has_amx() else "int8"
    assert encoder_precision(pair.main) == expected == platform.default_encoder_precision(torch.device("cpu"), torch.float32)
    assert isinstance(pair.main.encoder.blocks[0].mlp.fc1, DynamicInt8Linear) == (expected == "int8")


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["int8", "bfloat16"])
def test_cpu_encoders_encode_windows_alike_in_any_batch_and_stay_near_float(base_pair, precision):
    """Either CPU default encoder: a window encodes alike alone and beside others; its states stay
    near float32's (their WER cost is measured in docs/models.md, not here), and speculative decoding on
    them stays exact."""
    pair = load_pair("base", default_assistant("base"), encoder_precision=precision)
    assert encoder_precision(pair.main) == precision
    assert encoder_precision(base_pair.main) == "float32"
    mel = mel_of(CLIPS[:3])
    with torch.inference_mode():
        together = encoder_states(pair.main, mel)
        alone = torch.cat([encoder_states(pair.main, mel[i : i + 1]) for i in range(3)])
        exact = encoder_states(base_pair.main, mel)
    assert torch.equal(together, alone)
    # per row, int8 about 0.1 on these clips (one scale a window: about twice as far), bfloat16 less
    assert all(0 < _relative_error(together[i], exact[i]) < 0.15 for i in range(3))
    alone_tokens, _ = decode_windows(pair, mel, DecodingOptions(speculation="off"))
    spec, stats = decode_windows(pair, mel, DecodingOptions(speculation="on"))
    assert [r.tokens for r in spec] == [r.tokens for r in alone_tokens] and stats.drafted > 0


@pytest.mark.slow
def test_a_warm_start_reads_int8_weights_from_the_cache_instead_of_quantizing(tmp_path, monkeypatch):
    """The int8 decoder states (main model and distilled assistant) and the int8 encoder and
    cross-attention key/value weights are quantized once, then read back bit for bit; a changed
    source file is quantized again."""
    monkeypatch.setattr(load, "cache_dir", lambda: tmp_path / "cache")
    assistant = tmp_path / "assistant"
    shutil.copytree(default_assistant("base"), assistant)
    quantized = []

    def counting(function):
        def counted(*args):
            quantized.append(function.__name__)
            return function(*args)
        return counted

    monkeypatch.setattr(load, "quantize_decoder_state", counting(quantize_decoder_state))
    monkeypatch.setattr(load, "dynamic_int8_weights", counting(dynamic_int8_weights))
    mel = mel_of(CLIPS[:1])

    def loaded():
        pair = load_pair("base", assistant, dtype="bfloat16", int8=True, encoder_precision="int8")
        assert isinstance(pair.main.encoder.blocks[0].mlp.fc1, DynamicInt8Linear)
        with torch.inference_mode():
            states = pair.main.encoder(mel)
            cross = [t for kv in pair.main.decoder.cross_states(states) for t in kv]
        return [model.decoder.state_dict() for model in (pair.main, pair.assistant)], states, cross

    cold = loaded()
    assert sorted(quantized) == ["dynamic_int8_weights", "quantize_decoder_state", "quantize_decoder_state"]
    assert len(list((tmp_path / "cache" / "int8").glob("*.safetensors"))) == 3
    warm = loaded()
    assert len(quantized) == 3  # nothing quantized on the warm start
    for cold_state, warm_state in zip(cold[0], warm[0]):
        assert cold_state.keys() == warm_state.keys()
        assert all(torch.equal(cold_state[k], warm_state[k]) for k in cold_state)
    assert torch.equal(cold[1], warm[1])  # int8 encoder
    assert all(torch.equal(a, b) for a, b in zip(cold[2], warm[2]))  # int8 cross-attention keys and values
    weights = assistant / "model.safetensors"
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 1_000_000_000))
    loaded()
    assert quantized[3:] == ["quantize_decoder_state"]  # the assistant's file changed; the main model's read back
    for _ in range(load.INT8_CACHE_ENTRIES):  # newer files push out the ones used least lately
        os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 1_000_000_000))
        load_pair("base", assistant, dtype="bfloat16", int8=True, encoder_precision="int8")
    assert len(list((tmp_path / "cache" / "int8").glob("*.safetensors"))) == load.INT8_CACHE_ENTRIES
