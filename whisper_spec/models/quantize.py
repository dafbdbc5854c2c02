"""int8 decoder linears (weight-only) and int8 encoder linears (weights and activations).

Decoder: per output channel, symmetric, with float scales.

Decoding at small batch reads every decoder weight once per step, so storing the decoder's
linears (self- and cross-attention, feed-forward, and the tied embedding / output projection) in
int8 halves those bytes against float16. The matmul is fused: `aten._weight_int8pack_mm` reads
the int8 weight and applies the scales inside the kernel. Where that kernel does not run, a
torch.compile-fused dequantize-matmul is used, and only where compilation is unavailable too a
plain dequantize-then-matmul; the platform probes which (`platform.kernel_for`) and sets each
module's choice when it prepares a decoder for its device. On CPU the output projection (and an
assistant's draft-vocabulary rows of it) quantizes its activations too, per row (`row_int8_mm`),
and float32 activations take that kernel everywhere.

Weights are quantized before they reach the device (or come int8 from a pre-quantized
directory), and the modules are built on the meta device and assigned, so no float decoder
weight is ever allocated where the model runs.

Every weight handed to the kernel is contiguous and 64-byte aligned (`aligned`): on AVX-512 CPUs
ATen's int8 kernel reads the weight with aligned vector loads and crashes the process (SIGSEGV, no
Python error) on a weight at an unaligned address, such as a tensor viewed in place inside a
safetensors file, whose data offsets are only 8-byte aligned.
"""

from __future__ import annotations

import functools
import warnings

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import cast

INT8_FORMAT = "whisper-spec-int8/1"
# the decoder's linear layers that go int8 (per block), and the tied embedding / output projection
BLOCK_LINEARS = ("attn.qkv", "attn.out", "cross_attn.q", "cross_attn.kv", "cross_attn.out", "mlp.fc1", "mlp.fc2")
# the encoder's linear layers (per block) that go int8 with DynamicInt8Linear
ENCODER_BLOCK_LINEARS = ("attn.qkv", "attn.out", "mlp.fc1", "mlp.fc2")
# what freshly allocated CPU storage guarantees (c10's allocator), and what AVX-512 loads need
ALIGNMENT = 64


def is_aligned(tensor: Tensor) -> bool:
    return tensor.is_contiguous() and tensor.data_ptr() % ALIGNMENT == 0


def aligned(tensor: Tensor) -> Tensor:
    """The tensor itself if contiguous and aligned, else a copy in fresh storage, which is."""
    return tensor if is_aligned(tensor) else tensor.clone(memory_format=torch.contiguous_format)


def per_channel_scales(weight: Tensor) -> Tensor:
    """Symmetric int8 scales per output channel (row) of a float32 weight."""
    return weight.abs().amax(dim=1).clamp(min=1e-12) / 127


def quantize_per_channel(weight: Tensor) -> tuple[Tensor, Tensor]:
    """Symmetric int8 per output channel (row): weight ~ int8 * scales[:, None]."""
    w = weight.detach().float()
    scales = per_channel_scales(w)
    return torch.round(w / scales[:, None]).clamp(-127, 127).to(torch.int8), scales


def quantize_decoder_state(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """A decoder state dict with its linears (and tied embedding) as int8 `weight` plus `scales`."""
    out = dict(state)
    for name, tensor in state.items():
        module = name.removesuffix(".weight")
        is_linear = name.endswith(".weight") and module.split(".", 2)[-1] in BLOCK_LINEARS
        if is_linear or name in ("token_embedding.weight", "proj_out.weight"):
            out[name], out[f"{module}.scales"] = quantize_per_channel(tensor)
    return out


def int8pack_mm(x: Tensor, weight: Tensor, scales: Tensor, row_block: int | None = None) -> Tensor:
    """x @ (weight * scales).T by the fused kernel, in calls of at most row_block rows (None: one call)."""
    if row_block is None or len(x) <= row_block:
        return torch.ops.aten._weight_int8pack_mm(x, weight, scales)
    return torch.cat([torch.ops.aten._weight_int8pack_mm(rows, weight, scales) for rows in x.split(row_block)])


# CPU decoders' int8 activations: each row is divided by its largest magnitude, then quantized with one
# fixed scale and zero point (q = round(63 x) + 64, 1..127: 7 bits, so that without VNNI the kernel's
# 16-bit sums of product pairs cannot overflow), its product with the int8 weight summed exactly in
# int32 by fbgemm, and multiplied back. torch's dynamic linear takes the scale from the range of the
# whole call instead, which would make a row's result depend on the rows beside it; with a fixed
# one every row of any call is what it would be alone, bit for bit (exact integer sums, then the
# same float arithmetic per element), so verification stays exact. It is what the output projection
# runs on CPU, whatever the activation dtype: there it is faster than aten's int8-weight kernel at one
# row and several times faster at five (cpu_costs.json, output_projection_ms_by_rows); for the
# block linears at one row it is not faster than that kernel on bfloat16 rows, the CPU default.
ROW_INT8_SCALE, ROW_INT8_ZERO_POINT = 1 / 63, 64
ROW_INT8_ENGINE = "x86"  # fbgemm's kernels, chosen where the weight is packed


def pack_int8(weight: Tensor, scales: Tensor, engine: str):
    """An int8 weight (per output channel, weight * scales[:, None]) packed for torch's CPU int8 GEMM
    of that quantized engine, with no bias (added after the kernel)."""
    with warnings.catch_warnings():  # torch marks quantized tensors deprecated; its CPU int8 GEMM still takes them
        warnings.simplefilter("ignore")
        qweight = torch._make_per_channel_quantized_tensor(weight.cpu(), scales.double().cpu(),
                                                           torch.zeros(len(scales), dtype=torch.long), 0)
        return _with_engine(engine, torch.ops.quantized.linear_prepack, qweight, None)


def pack_row_int8(weight: Tensor, scales: Tensor):
    """An int8 weight packed for row_int8_mm."""
    return pack_int8(weight, scales, ROW_INT8_ENGINE)


def row_int8_mm(x: Tensor, packed) -> Tensor:
    """x @ weight.T for float32 rows x, with int8 activations per row (see ROW_INT8_SCALE)."""
    row_max = torch.linalg.vector_norm(x, float("inf"), dim=-1, keepdim=True).clamp_(min=1e-30)
    return torch.ops.quantized.linear_with_input_q_dq_qweight_dq_output_fp32(
        x / row_max, ROW_INT8_SCALE, ROW_INT8_ZERO_POINT, packed).mul_(row_max)


def _dequantize_mm(x: Tensor, weight: Tensor, scales: Tensor) -> Tensor:
    return F.linear(x, weight.to(x.dtype)) * scales


@functools.cache
def compiled_dequantize_mm():
    """torch.compile'd at first use: importing the compiler costs over a second of start-up."""
    return torch.compile(_dequantize_mm, dynamic=True)


class Int8Linear(nn.Module):
    """y = x @ (int8 weight * scales).T + bias, computed by a fused kernel. A weight assigned
    unaligned (see `aligned`) is copied into aligned storage before the kernel first reads it."""

    def __init__(self, in_features: int, out_features: int, bias: bool, device=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.register_buffer("weight", torch.empty(out_features, in_features, dtype=torch.int8, device=device))
        self.register_buffer("scales", torch.empty(out_features, device=device))
        self.register_buffer("bias", torch.empty(out_features, device=device) if bias else None)
        # int8 activations whatever x's dtype, where row_int8_mm runs: set for the output projection,
        # where that kernel is the fastest at any row count (see ROW_INT8_SCALE)
        self.int8_activations = False
        self.row_packed = None  # the weight packed for row_int8_mm, made at its first use
        # set by platform.prepare for the module's device: the kernel for activations of each dtype it
        # will see, and the most rows a fused-kernel call takes (None: any)
        self.kernels: dict[torch.dtype, str] = {}
        self.row_block: int | None = None
        # calls of at least this many rows through many_rows (None: never): set for an assistant's own
        # linears, whose drafts need not be exact (platform.prepare_assistant)
        self.dense_rows: int | None = None

    def kernel(self, x: Tensor) -> str:
        """Which int8 matmul forward runs for x. A compiled draft step (torch.compile traces no packed
        fbgemm weight) takes the kernel of x's dtype: its drafts may then differ in the last bits,
        which only proposals may."""
        if self.int8_activations and not torch.compiler.is_compiling() and self.kernels.get(torch.float32) == "row_int8":
            return "row_int8"
        if x.dtype not in self.kernels:
            raise RuntimeError(f"int8 linear not prepared for {x.dtype} activations (platform.prepare)")
        return self.kernels[x.dtype]

    def forward(self, x: Tensor) -> Tensor:
        shape = x.shape
        x = x.reshape(-1, self.in_features)
        if self.dense_rows is not None and len(x) >= self.dense_rows and not torch.compiler.is_compiling():
            return self.many_rows(x).reshape(*shape[:-1], self.out_features)
        kernel = self.kernel(x)
        scales = cast(self.scales, x.dtype)
        if kernel == "row_int8":
            if self.row_packed is None:
                self.row_packed = pack_row_int8(self.weight, self.scales)
            y = row_int8_mm(cast(x, torch.float32), self.row_packed)
        elif kernel == "int8pack_mm":
            if not torch.compiler.is_compiling() and not is_aligned(self.weight):
                self.weight = aligned(self.weight)
            y = int8pack_mm(x.contiguous(), self.weight, scales, self.row_block)
        elif kernel == "compiled":
            y = compiled_dequantize_mm()(x, self.weight, scales)
        else:
            y = _dequantize_mm(x, self.weight, scales)
        if self.bias is not None:
            y = y + cast(self.bias, y.dtype)
        return y.reshape(*shape[:-1], self.out_features)

    def many_rows(self, x: Tensor) -> Tensor:
        """The same product in x's dtype through a float GEMM on the dequantized weight, for inputs
        of very many rows (a window's encoder frames), where the fused kernel is compute-bound on
        CPUs without int8 dot-product instructions (about half the time for base's cross-attention
        keys and values). Its results differ from forward's in the last bits: use it for
        a product both decoding modes compute the same way."""
        y = _dequantize_mm(x, self.weight, self.scales.to(x.dtype))
        return y if self.bias is None else y + self.bias.to(y.dtype)

    def rows(self, token_ids: Tensor) -> "Int8Linear":
        """The projection onto some output channels only (a draft vocabulary)."""
        rows = Int8Linear(self.in_features, len(token_ids), bias=False, device="meta")
        rows.weight, rows.scales = self.weight[token_ids], self.scales[token_ids]
        rows.int8_activations, rows.kernels, rows.row_block = self.int8_activations, self.kernels, self.row_block
        return rows


class Int8Embedding(Int8Linear):
    """The tied token embedding in int8: rows looked up and scaled; as a projection it is the
    output layer, so one int8 table serves both."""

    def __init__(self, n_vocab: int, d_model: int, device=None):
        super().__init__(d_model, n_vocab, bias=False, device=device)

    def forward(self, tokens: Tensor) -> Tensor:
        return self.weight[tokens].to(self.scales.dtype) * self.scales[tokens, None]

    def as_projection(self) -> Int8Linear:
        """The output projection tied to this table: the same int8 storage, not a copy."""
        projection = Int8Linear(self.in_features, self.out_features, bias=False, device="meta")
        projection.weight, projection.scales = self.weight, self.scales
        projection.int8_activations = True
        return projection


def _swap(root: nn.Module, path: str, make) -> None:
    """Replace the submodule at path (dotted, from root) with make(the old one)."""
    parent_path, _, name = path.rpartition(".")
    parent = root.get_submodule(parent_path) if parent_path else root
    setattr(parent, name, make(getattr(parent, name)))


def int8_modules(decoder: nn.Module, state: dict[str, Tensor]) -> None:
    """Swap the modules whose state has int8 scales for int8 ones (on the meta device)."""
    for key in [k for k in state if k.endswith(".scales")]:
        path = key.removesuffix(".scales")
        if path == "token_embedding":
            _swap(decoder, path, lambda old: Int8Embedding(old.num_embeddings, old.embedding_dim, device="meta"))
        else:
            _swap(decoder, path, lambda old: Int8Linear(old.in_features, old.out_features, old.bias is not None,
                                                        device="meta"))


def quantize_dynamic(linear: nn.Module) -> tuple[Tensor, Tensor]:
    """A DynamicInt8Linear's int8 weight and scales (per_channel_scales) for a float linear or an
    Int8Linear (its dequantized weight), rounded as torch's quantize_per_channel rounds."""
    weight = linear.weight.detach().float()
    if isinstance(linear, Int8Linear):
        weight = weight * linear.scales.float()[:, None]
    scales = per_channel_scales(weight)
    with warnings.catch_warnings():  # torch marks quantized tensors deprecated
        warnings.simplefilter("ignore")
        qweight = torch.quantize_per_channel(weight, scales.double(), torch.zeros(len(scales), dtype=torch.long),
                                             0, torch.qint8)
    return qweight.int_repr(), scales


class DynamicInt8Linear(nn.Module):
    """An encoder linear in int8 on CPU: int8 weights per output channel (per_channel_scales),
    and activations quantized at each call per row (per frame), multiplied by x86's int8 GEMM
    (oneDNN).

    The encoder's matmuls are 1500 rows a window and compute-bound, so int8 arithmetic is what pays
    there, where the decoder's one-row steps are bound by reading weights. Per row, as
    CTranslate2's int8 encoder does: one scale for a whole window flattens its quieter frames
    (decisions, "int8 encoder: a scale per frame"). torch's CPU int8 GEMM takes one activation scale and zero
    point a call, so each row is first divided by its largest magnitude and the product multiplied
    back by it. That scale and zero point still come from the range of the whole call, so a window's
    states depend on the call it is in: encoding.encoder_states runs a CPU encoder one window a
    call. reduce_range keeps activations to 7 bits, as torch does on x86: without VNNI the kernel
    adds products in pairs in 16 bits, which 8-bit activations could overflow."""

    def __init__(self, linear: nn.Module, quantized: tuple[Tensor, Tensor] | None = None):
        """From a float linear, or an Int8Linear (its dequantized weight); quantized: its
        quantize_dynamic weight and scales where already made (a cache)."""
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.bias = None if linear.bias is None else linear.bias.detach().float()
        weight, scales = quantized if quantized is not None else quantize_dynamic(linear)
        # no bias in the kernel: it is added after the rows are scaled back
        self._packed = pack_int8(weight, scales, "onednn")

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() == 3 and len(x) > 1:  # one call a window, so that no window's result depends on the batch
            return torch.cat([self(window) for window in x.split(1)])
        # the largest magnitude per row, without materialising |x|
        row_max = torch.maximum(x.amax(-1, keepdim=True), x.amin(-1, keepdim=True).neg_()).clamp_(min=1e-30)
        y = torch.ops.quantized.linear_dynamic(x / row_max, self._packed, True).mul_(row_max)
        return y if self.bias is None else y.add_(self.bias)


def _with_engine(engine: str, fn, *args):
    """fn(*args) with torch's quantized engine set to engine (a process-wide setting), then restored."""
    previous = torch.backends.quantized.engine
    torch.backends.quantized.engine = engine
    try:
        return fn(*args)
    finally:
        torch.backends.quantized.engine = previous


def dynamic_int8_available() -> bool:
    return "onednn" in torch.backends.quantized.supported_engines


def dynamic_int8_linears(encoder: nn.Module | None, decoder: nn.Module) -> dict[str, nn.Module]:
    """The linears that DynamicInt8Linear computes on CPU, by name: the encoder's block linears
    (convolutions stay float) and each decoder layer's cross-attention key/value projection,
    whose 1500 rows a window are a product like the encoder's (window_kv, beside the float or int8
    projection, which export and training read)."""
    linears = {} if encoder is None else {f"encoder.blocks.{i}.{path}": block.get_submodule(path)
                                          for i, block in enumerate(encoder.blocks) for path in ENCODER_BLOCK_LINEARS}
    linears.update({f"decoder.blocks.{i}.cross_attn.kv": block.cross_attn.kv for i, block in enumerate(decoder.blocks)})
    return linears


def dynamic_int8_weights(encoder: nn.Module | None, decoder: nn.Module) -> dict[str, Tensor]:
    """quantize_dynamic of every dynamic_int8_linears entry: NAME.weight and NAME.scales."""
    return {f"{name}.{part}": tensor for name, linear in dynamic_int8_linears(encoder, decoder).items()
            for part, tensor in zip(("weight", "scales"), quantize_dynamic(linear))}


def quantize_dynamic_linears(encoder: nn.Module | None, decoder: nn.Module, quantized: dict[str, Tensor]) -> None:
    """dynamic_int8_linears as DynamicInt8Linear, in place, from their dynamic_int8_weights."""
    for name, linear in dynamic_int8_linears(encoder, decoder).items():
        module = DynamicInt8Linear(linear, (quantized[f"{name}.weight"], quantized[f"{name}.scales"]))
        if name.startswith("encoder."):
            _swap(encoder, name.removeprefix("encoder."), lambda _: module)
        else:
            decoder.get_submodule(name.removeprefix("decoder.").removesuffix(".kv")).window_kv = module


def weight_bytes(module: nn.Module) -> int:
    """Bytes of parameters and persistent buffers, each storage counted once."""
    seen, total = set(), 0
    for tensor in list(module.state_dict(keep_vars=True).values()):
        if tensor is None or tensor.is_meta or tensor.untyped_storage().data_ptr() in seen:
            continue
        seen.add(tensor.untyped_storage().data_ptr())
        total += tensor.untyped_storage().nbytes()
    return total
