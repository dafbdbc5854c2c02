"""A compact Whisper: encoder, decoder and a static KV cache with per-row positions.

The decoder is written for speculative decoding: every call takes explicit positions per row,
writes its keys and values into a preallocated cache at those positions, and attends causally by
position. Rolling a row back after a rejected draft is then just lowering that row's length:
stale entries beyond it are masked out by position and overwritten by the next call.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass(frozen=True)
class ModelDims:
    n_mels: int
    n_vocab: int
    d_model: int
    n_audio_ctx: int  # encoder frames after the stride-2 conv (1500 for 30 s)
    n_audio_layer: int
    n_audio_head: int
    n_audio_ffn: int
    n_text_ctx: int  # learned decoder positions (448)
    n_text_layer: int
    n_text_head: int
    n_text_ffn: int


# Devices where a decoder position's result can be made not to depend on how many positions one call
# computes (linears padded to the rows their kernel needs, attention with padded queries: see
# Linear.rows_for_row_invariance, _decoder_attention), where the probes find such padding (see
# Decoder.row_invariant). Elsewhere (cuBLAS, fused attention and reductions choose algorithms by shape)
# decoding gives every main call one shape.
ROW_INVARIANT_DEVICES = {"cpu"}


def cast(tensor: Tensor, dtype: torch.dtype) -> Tensor:
    """tensor in dtype; one that already is costs no dispatcher call (a decoder step makes a
    hundred such casts, most of them no-ops, at ~2 us each through Tensor.to)."""
    return tensor if tensor.dtype == dtype else tensor.to(dtype)


def _onednn_packed(weight: Tensor) -> Tensor | None:
    """oneDNN's blocked copy of a float32 CPU weight, None where oneDNN does not run.

    Packed for 16 rows, the kernel computes every row alike whatever the row count (measured:
    each row of a 1-100 row product equals that row alone, bit for bit), which F.linear's float32
    kernels do not, and it is faster at the row counts decoding uses (base's 51865 x 512
    projection, 2 threads: 1 / 4 / 20 rows 6 / 7 / 12 ms, against 12 / 22 / 33 ms for F.linear)."""
    if weight.device.type != "cpu" or weight.dtype != torch.float32:
        return None
    try:
        return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), 16)
    except (AttributeError, RuntimeError):
        return None


# the row counts a call may be padded to, in the probes of row invariance
PROBED_ROW_COUNTS = (1, 2, 4, 8, 16)


def _padded_rows(product, x: Tensor, min_rows: int) -> Tensor:
    """product(x) with x's rows (dim -2) padded with zeros to at least min_rows, those dropped after."""
    n_rows, padding = x.shape[-2], max(min_rows - x.shape[-2], 0)
    if not padding:
        return product(x)
    return product(F.pad(x, (0, 0, 0, padding)))[..., :n_rows, :]


def _rows_alike(product, x: Tensor, min_rows: int) -> bool:
    """Whether product(rows, min_rows) gives each of x's rows (dim -2) the result it gives that row
    alone, bit for bit, whatever rows share the call: x is cut into calls of 2, 3, 4, 5, 9 and 17 rows."""
    alone = torch.cat([product(row, min_rows) for row in x.split(1, dim=-2)], dim=-2)
    return all(torch.equal(torch.cat([product(rows, min_rows) for rows in x.split(count, dim=-2)], dim=-2), alone)
               for count in (2, 3, 4, 5, 9, 17))


def fewest_rows_alike(product, x: Tensor) -> int | None:
    """The fewest rows (of PROBED_ROW_COUNTS) that padding every call to makes product(rows,
    min_rows) compute each row alike whatever the row count, None where none does.

    Measured, not assumed: GEMM libraries pick micro-kernels and summation orders by row count, and
    the choice differs between instruction sets, so a decoding is exact only on what this CPU does."""
    return next((min_rows for min_rows in PROBED_ROW_COUNTS if _rows_alike(product, x, min_rows)), None)


class Linear(nn.Linear):
    """nn.Linear that computes in the activation dtype, so one model can hold mixed weights.
    After pack(), float32 on CPU runs oneDNN's kernel on a packed copy of the weight. On CPU a
    call of few rows is padded to the rows from which this kernel computes every row alike
    (rows_for_row_invariance), so a position's result does not depend on how many share its call."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register_buffer("packed", None, persistent=False)

    def reset_parameters(self) -> None:
        # as Embedding's: values drawn on the meta device are never read (the weights are assigned),
        # and drawing them for the 87 linears of a pair took 0.15 s of every start
        if not self.weight.is_meta:
            super().reset_parameters()

    def pack(self) -> None:
        """For inference: the packed copy does not follow later changes to the weight."""
        if self.packed is None:
            self.packed = _onednn_packed(self.weight)

    def product(self, x: Tensor) -> Tensor:
        """x @ weight.T + bias by this layer's kernel, rows as they come."""
        # the oneDNN op has no backward: training (an assistant's loss through a shared, frozen
        # projection) takes F.linear
        if self.packed is not None and x.dtype == torch.float32 and not (torch.is_grad_enabled() and x.requires_grad):
            return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")
        bias = None if self.bias is None else cast(self.bias, x.dtype)
        return F.linear(x, cast(self.weight, x.dtype), bias)

    def rows_for_row_invariance(self, dtype: torch.dtype) -> int | None:
        """The fewest rows from which this layer's kernel computes every row alike, probed once per
        shape, dtype and thread count (see fewest_rows_alike). Measured on AVX-512 (Xeon with AMX,
        torch 2.13): oneDNN's packed float32 kernel sums a one-row product of 1536 or more inputs
        in another order than two or more rows, so base's mlp.fc2 is padded to two rows there; on
        AVX2 every row count agreed."""
        key = (self.in_features, self.out_features, dtype, self.bias is not None,
               self.packed is not None and dtype == torch.float32, torch.get_num_threads())
        if key not in _LINEAR_ROWS:
            # a half-precision result hides most differences in the float32 sums behind its rounding
            # (one element in thousands shows one): enough rows that ~2^18 elements are compared
            n_rows = 18 if dtype == torch.float32 else max(18, -(-2**18 // self.out_features))
            generator = torch.Generator().manual_seed(0)
            x = torch.randn(n_rows, self.in_features, generator=generator).to(device=self.weight.device, dtype=dtype)
            with torch.no_grad():
                _LINEAR_ROWS[key] = fewest_rows_alike(lambda rows, min_rows: _padded_rows(self.product, rows, min_rows), x)
        return _LINEAR_ROWS[key]

    def forward(self, x: Tensor) -> Tensor:
        rows = x.numel() // self.in_features
        if (rows >= PROBED_ROW_COUNTS[-1] or x.device.type not in ROW_INVARIANT_DEVICES
                or torch.compiler.is_compiling() or (torch.is_grad_enabled() and x.requires_grad)):
            return self.product(x)
        min_rows = self.rows_for_row_invariance(x.dtype)
        if min_rows is None or rows >= min_rows:  # None: decoders with it take fixed shapes (Decoder.row_invariant)
            return self.product(x)
        return _padded_rows(self.product, x.reshape(rows, self.in_features), min_rows).reshape(
            *x.shape[:-1], self.out_features)

    @classmethod
    def of(cls, weight: Tensor) -> "Linear":
        """A bias-free projection with this weight (shared, not copied), packed like it would be."""
        with torch.device("meta"):
            linear = cls(weight.shape[1], weight.shape[0], bias=False)
        linear.weight = weight if isinstance(weight, nn.Parameter) else nn.Parameter(weight, requires_grad=False)
        linear.pack()
        return linear


_LINEAR_ROWS: dict[tuple, int | None] = {}  # Linear.rows_for_row_invariance's answers


class Embedding(nn.Embedding):
    def reset_parameters(self) -> None:
        # a meta tensor has no values to draw, yet drawing them imports torch's compiler (the meta
        # normal_ is a decomposition): 1.7 s of every start, where decoders are built on meta
        if not self.weight.is_meta:
            super().reset_parameters()


def _split_heads(x: Tensor, n_head: int) -> Tensor:
    b, t, d = x.shape
    return x.view(b, t, n_head, d // n_head).transpose(1, 2)


def _merge_heads(x: Tensor) -> Tensor:
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)


class EncoderSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.qkv = Linear(d_model, 3 * d_model)  # k has no bias in Whisper: its slice stays zero
        self.out = Linear(d_model, d_model)

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = (_split_heads(t, self.n_head) for t in self.qkv(x).chunk(3, dim=-1))
        return self.out(_merge_heads(F.scaled_dot_product_attention(q, k, v)))


class MLP(nn.Module):
    def __init__(self, d_model: int, d_ffn: int):
        super().__init__()
        self.fc1 = Linear(d_model, d_ffn)
        self.fc2 = Linear(d_ffn, d_model)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class EncoderBlock(nn.Module):
    def __init__(self, d_model: int, n_head: int, d_ffn: int):
        super().__init__()
        self.attn_ln = nn.LayerNorm(d_model)
        self.attn = EncoderSelfAttention(d_model, n_head)
        self.mlp_ln = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model, d_ffn)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.attn_ln(x))
        return x + self.mlp(self.mlp_ln(x))


class Encoder(nn.Module):
    def __init__(self, dims: ModelDims):
        super().__init__()
        self.conv1 = nn.Conv1d(dims.n_mels, dims.d_model, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(dims.d_model, dims.d_model, kernel_size=3, stride=2, padding=1)
        self.register_buffer("positional_embedding", torch.zeros(dims.n_audio_ctx, dims.d_model))
        self.blocks = nn.ModuleList(
            EncoderBlock(dims.d_model, dims.n_audio_head, dims.n_audio_ffn) for _ in range(dims.n_audio_layer)
        )
        self.ln_post = nn.LayerNorm(dims.d_model)

    def forward(self, mel: Tensor) -> Tensor:
        """mel: [batch, n_mels, 3000] -> encoder states [batch, 1500, d_model]."""
        x = F.gelu(self.conv1(mel.to(self.conv1.weight.dtype)))
        x = F.gelu(self.conv2(x)).transpose(1, 2)
        x = x + self.positional_embedding.to(x.dtype)
        for block in self.blocks:
            x = block(x)
        return self.ln_post(x)


class KVCache(nn.Module):
    """Preallocated keys and values of one decoder self-attention layer: [batch, head, ctx, head_dim]."""

    def __init__(self, batch: int, n_head: int, n_ctx: int, head_dim: int, dtype, device):
        super().__init__()
        shape = (batch, n_head, n_ctx, head_dim)
        self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=device), persistent=False)

    def write(self, positions: Tensor, k: Tensor, v: Tensor) -> None:
        """positions: [batch, T]; k, v: [batch, head, T, head_dim]."""
        rows = torch.arange(positions.shape[0], device=positions.device)[:, None]
        self.k[rows, :, positions] = k.transpose(1, 2).to(self.k.dtype)
        self.v[rows, :, positions] = v.transpose(1, 2).to(self.v.dtype)


def _bmm(a: Tensor, b: Tensor) -> Tensor:
    """a @ b for [batch, head, ...] operands through one bmm on [batch * head, ...] views: the
    kernel and strides torch.matmul reaches for these shapes, without its dozen reshaping ops a
    call (a decoder step makes two dozen such products)."""
    out = torch.bmm(a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:]))
    return out.view(*a.shape[:-1], b.shape[-1])


def _attend(q: Tensor, k: Tensor, v: Tensor, blocked: Tensor | None, min_queries: int,
            scores_out: list | None = None) -> Tensor:
    """softmax(q k^T / sqrt(d)) v, with q padded with zero queries to at least min_queries rows
    (see query_rows_for_row_invariance); blocked: True where a query may not attend."""
    n_queries, padding = q.shape[-2], max(min_queries - q.shape[-2], 0)
    if padding:
        q = F.pad(q, (0, 0, 0, padding))
        blocked = None if blocked is None else F.pad(blocked, (0, 0, 0, padding), value=False)
    scores = _bmm(q * (q.shape[-1] ** -0.5), k.transpose(-1, -2))
    if scores_out is not None:
        scores_out.append(scores[..., :n_queries, :])
    if blocked is not None:
        scores = scores.masked_fill(blocked, float("-inf"))
    out = _bmm(cast(torch.softmax(scores.float(), dim=-1), v.dtype), v)
    return out[..., :n_queries, :] if padding else out


@functools.cache
def query_rows_for_row_invariance() -> int | None:
    """The fewest query rows from which this CPU's float32 batched matmuls compute every row alike
    whatever the row count, None where none up to 16 does (then attention goes a query at a time).

    On AVX2 (oneDNN, torch 2.13) one row, two or three rows, and four or more each round
    differently, while every count from four on agrees: decoding pads its queries to four, and a
    verification pass then scores its positions in one product, as a one-token step does, bit for
    bit. Probed on the attention's shapes in a one-window step (8 heads of 64, a window of keys,
    base's cache), with this process's threads."""
    generator = torch.Generator().manual_seed(0)
    queries = torch.randn(8, 18, 64, generator=generator)
    keys_values = [torch.randn(2, 8, n_keys, 64, generator=generator) for n_keys in (465, 1500)]
    return fewest_rows_alike(lambda q, min_queries: torch.cat(
        [_attend(q, k, v, None, min_queries) for k, v in keys_values], dim=-1), queries)


def _decoder_attention(q: Tensor, k: Tensor, v: Tensor, blocked: Tensor | None, row_invariant: bool,
                       scores_out: list | None = None) -> Tensor:
    """Attention written out rather than F.scaled_dot_product_attention, whose fused kernels pick
    blockings by query count, so that one position's output would depend on how many are computed
    at once. With a full-cache key span and row-invariant matmuls, a verified position's logits
    are those of a one-token step, bit for bit; row_invariant (decoding on CPU) gets that from
    CPU matmuls by padding the queries (query_rows_for_row_invariance), or where no padding does,
    by one product a query (the rest is elementwise or per row, row-invariant anyway).
    blocked: True where a query may not attend. scores_out: a list the attention scores (before
    the softmax) are appended to."""
    if not row_invariant:
        return _attend(q, k, v, blocked, 0, scores_out)
    min_queries = query_rows_for_row_invariance()
    if min_queries is not None:
        return _attend(q, k, v, blocked, min_queries, scores_out)
    row_scores = [] if scores_out is not None else None
    rows = [_attend(q[..., i : i + 1, :], k, v, None if blocked is None else blocked[..., i : i + 1, :], 0, row_scores)
            for i in range(q.shape[-2])]
    if scores_out is not None:
        scores_out.append(torch.cat(row_scores, dim=-2))
    return torch.cat(rows, dim=-2)


class DecoderAttention(nn.Module):
    """Causal self-attention (cached, by position) or cross-attention (keys from the encoder)."""

    def __init__(self, d_model: int, n_head: int, cross: bool):
        super().__init__()
        self.n_head = n_head
        self.cross = cross
        if cross:
            self.q = Linear(d_model, d_model)
            self.kv = Linear(d_model, 2 * d_model)  # k has no bias in Whisper: its half stays zero
        else:
            self.qkv = Linear(d_model, 3 * d_model)
        self.out = Linear(d_model, d_model)
        self.window_kv: nn.Module | None = None  # kv in int8 for set_cross (quantize.quantize_dynamic_linears)
        self.kv_cache: KVCache | None = None
        self.cross_kv: tuple[Tensor, Tensor] | None = None

    def set_cross(self, encoder_states: Tensor, dtype: torch.dtype) -> None:
        if self.window_kv is not None:
            states = self.window_kv(encoder_states.float())
        elif (many_rows := getattr(self.kv, "many_rows", None)) is not None:  # an int8 projection's, for many rows
            states = many_rows(encoder_states.to(dtype))
        else:
            states = self.kv(encoder_states)
        # contiguous per (row, head): a strided copy would make every batched step copy them again
        k, v = states.chunk(2, dim=-1)
        new = tuple(_split_heads(t, self.n_head).to(dtype).contiguous() for t in (k, v))
        old = self.cross_kv
        # on CUDA, into the old tensors where they fit (not views of another decoder's): captured
        # CUDA graphs of this decoder's steps read them there
        if old is not None and torch.is_inference_mode_enabled() and all(
                o.is_cuda and o.is_inference() and o._base is None and o.shape == n.shape and o.dtype == n.dtype
                and o.device == n.device for o, n in zip(old, new)):
            for o, n in zip(old, new):
                o.copy_(n)
        else:
            self.cross_kv = new

    def forward(self, x: Tensor, positions: Tensor, blocked: Tensor | None, row_invariant: bool,
                scores_out: list | None = None) -> Tensor:
        if self.cross:
            q = _split_heads(self.q(x), self.n_head)
            k, v = self.cross_kv
        else:
            q, k, v = (_split_heads(t, self.n_head) for t in self.qkv(x).chunk(3, dim=-1))
            if self.kv_cache is not None:
                self.kv_cache.write(positions, k, v)
                k, v = self.kv_cache.k[:, :, : blocked.shape[-1]], self.kv_cache.v[:, :, : blocked.shape[-1]]
            # without a cache (training, whole-sequence scoring) positions are 0..T-1 in every row
        attn = _decoder_attention(cast(q, k.dtype), k, v, None if self.cross else blocked, row_invariant, scores_out)
        return self.out(cast(_merge_heads(attn), x.dtype))


class DecoderBlock(nn.Module):
    def __init__(self, d_model: int, n_head: int, d_ffn: int):
        super().__init__()
        self.attn_ln = nn.LayerNorm(d_model)
        self.attn = DecoderAttention(d_model, n_head, cross=False)
        self.cross_attn_ln = nn.LayerNorm(d_model)
        self.cross_attn = DecoderAttention(d_model, n_head, cross=True)
        self.mlp_ln = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model, d_ffn)

    def forward(self, x: Tensor, positions: Tensor, blocked: Tensor, row_invariant: bool,
                cross_scores: list | None = None) -> Tensor:
        x = x + self.attn(self.attn_ln(x), positions, blocked, row_invariant)
        x = x + self.cross_attn(self.cross_attn_ln(x), positions, None, row_invariant, cross_scores)
        return x + self.mlp(self.mlp_ln(x))


class DraftVocabProjection(nn.Module):
    """An output projection onto a subset of the vocabulary, for an assistant that drafts only
    common tokens: its cost per step scales with the subset, not the full vocabulary.

    Logits of the other tokens are -inf, so they are never drafted; the main model, which scores
    the full vocabulary, still produces them.
    """

    def __init__(self, rows: nn.Module, token_ids: Tensor, n_vocab: int):
        super().__init__()
        self.n_vocab = n_vocab
        self.rows = rows  # projection onto token_ids, in their order
        self.register_buffer("token_ids", token_ids, persistent=False)

    def compact(self, x: Tensor) -> Tensor:
        """Logits over the subset only: [..., len(token_ids)]."""
        return self.rows(x).float()

    def forward(self, x: Tensor) -> Tensor:
        compact = self.compact(x)
        logits = compact.new_full((*compact.shape[:-1], self.n_vocab), float("-inf"))
        return logits.index_copy_(-1, self.token_ids, compact)


class Decoder(nn.Module):
    """Whisper's text decoder. The output projection is tied to the token embedding unless
    proj_out replaces it (an untied export, a draft vocabulary, int8 weights)."""

    def __init__(self, dims: ModelDims):
        super().__init__()
        self.dims = dims
        self.token_embedding = Embedding(dims.n_vocab, dims.d_model)
        self.positional_embedding = nn.Parameter(torch.zeros(dims.n_text_ctx, dims.d_model))
        self.blocks = nn.ModuleList(
            DecoderBlock(dims.d_model, dims.n_text_head, dims.n_text_ffn) for _ in range(dims.n_text_layer)
        )
        self.ln = nn.LayerNorm(dims.d_model)
        self.proj_out: nn.Module | None = None
        self.cross_source: list[int] | None = None  # per block: the main decoder layer whose cross keys/values it reuses
        self._row_invariant: bool | None = None  # row_invariant's answer, once probed

    @property
    def dtype(self) -> torch.dtype:
        return self.positional_embedding.dtype  # the activation dtype, also when the linears are int8

    @property
    def attention_dtype(self) -> torch.dtype:
        """Keys, values and attention: float32 on CPU, whose half-precision batched matmuls are
        unvectorised (several times slower); the activation dtype elsewhere."""
        return torch.float32 if self.positional_embedding.device.type == "cpu" else self.dtype

    @property
    def row_invariant(self) -> bool:
        """Whether a position's result is the same however many positions and rows share a call: on
        a ROW_INVARIANT_DEVICES device wherever every float linear's kernel can be padded to that
        (int8 kernels are, see quantize.int8pack_mm); probed at first use. Not so for bfloat16 float
        linears under oneDNN's AVX512_CORE kernels (no bfloat16 instructions), measured: then main
        calls take fixed shapes, as on CUDA."""
        if self._row_invariant is None:
            device = self.positional_embedding.device
            self._row_invariant = device.type in ROW_INVARIANT_DEVICES and all(
                module.rows_for_row_invariance(self.dtype) is not None
                for module in self.modules() if isinstance(module, Linear))
        return self._row_invariant

    def setup_caches(self, batch: int, n_ctx: int) -> None:
        head_dim = self.dims.d_model // self.dims.n_text_head
        device = self.positional_embedding.device
        for block in self.blocks:
            block.attn.kv_cache = KVCache(batch, self.dims.n_text_head, n_ctx, head_dim, self.attention_dtype, device)

    def ensure_caches(self, batch: int, n_ctx: int) -> None:
        """Caches of this shape, reused when the last call's have it."""
        cache = self.blocks[0].attn.kv_cache
        if cache is None or cache.k.shape[0] != batch or cache.k.shape[2] != n_ctx:
            self.setup_caches(batch, n_ctx)

    def clear_caches(self) -> None:
        """Back to cache-free calls (whole-sequence scoring)."""
        for block in self.blocks:
            block.attn.kv_cache = None

    def keep_rows(self, keep: Tensor) -> None:
        """Keep only these rows (an index or a mask) in the caches and cross-attention states:
        later calls carry those rows only, in the same order."""
        for block in self.blocks:
            cache = block.attn.kv_cache
            if cache is not None:
                cache.k, cache.v = cache.k[keep], cache.v[keep]
            if block.cross_attn.cross_kv is not None:
                block.cross_attn.cross_kv = tuple(t[keep] for t in block.cross_attn.cross_kv)

    def pack(self) -> None:
        """Pack the float32 CPU linears for oneDNN (see Linear.pack)."""
        for module in self.modules():
            if isinstance(module, Linear):
                module.pack()

    def set_cross(self, encoder_states: Tensor, main: "Decoder | None" = None, n_frames: int | None = None) -> None:
        """Cross-attention keys and values for these encoder states; blocks that share their
        projection with a main decoder layer (cross_source) take that layer's, already computed.
        n_frames: attend to the first frames only (an assistant skipping the padding after the audio)."""
        encoder_states = encoder_states[:, :n_frames].to(self.dtype)
        for i, block in enumerate(self.blocks):
            if main is not None and self.cross_source is not None:
                k, v = main.blocks[self.cross_source[i]].cross_attn.cross_kv
                # contiguous, as after keep_rows: one memory layout for a compiled draft step
                block.cross_attn.cross_kv = (k[:, :, :n_frames].contiguous(), v[:, :, :n_frames].contiguous())
            else:
                block.cross_attn.set_cross(encoder_states, self.attention_dtype)

    def features(self, tokens: Tensor, positions: Tensor, span: int | None = None,
                 cross_scores: list | None = None) -> Tensor:
        """tokens, positions: [batch, T] -> final hidden states [batch, T, d_model].

        With caches, each row attends to its own cache entries at positions <= its query position;
        without (training), to the tokens of this call. Attention spans the whole cache unless
        span (> every position) limits it: a query's result then does not depend on how many
        positions one call computes, so the verification pass gives each position the logits a
        one-token step would (bit for bit on CPU, see _decoder_attention), and no host sync is
        needed for the length. Only an assistant, whose drafts need not be exact, passes a span.
        cross_scores: a list that gets each block's cross-attention scores, [batch, head, T, frames].
        """
        cache = self.blocks[0].attn.kv_cache
        kv_len = (span or cache.k.shape[2]) if cache is not None else tokens.shape[1]
        blocked = torch.arange(kv_len, device=tokens.device) > positions[:, None, :, None]
        # the main model decoding on CPU; training, whole-sequence scoring and an assistant's drafts
        # need no exactness across call shapes
        row_invariant = cache is not None and span is None and self.row_invariant
        x = cast(self.token_embedding(tokens), self.dtype)  # an assistant may share a main embedding of another dtype
        x = x + self.positional_embedding[positions.clamp(max=self.dims.n_text_ctx - 1)]
        for block in self.blocks:
            x = block(x, positions, blocked, row_invariant, cross_scores)
        return self.ln(x)

    @property
    def draft_vocab(self) -> Tensor | None:
        """The token ids of compact logits (a draft vocabulary), None where logits are full."""
        return self.proj_out.token_ids if isinstance(self.proj_out, DraftVocabProjection) else None

    def logits(self, x: Tensor, compact: bool = False) -> Tensor:
        """Final hidden states [..., d_model] -> logits [..., vocab] in float32; compact: only
        the columns of draft_vocab where there is one."""
        if compact and self.draft_vocab is not None:
            return self.proj_out.compact(x)
        if self.proj_out is not None:
            return self.proj_out(x).float()
        return F.linear(x, self.token_embedding.weight).float()

    def forward(self, tokens: Tensor, positions: Tensor, n_logits: int | None = None, span: int | None = None) -> Tensor:
        """tokens, positions: [batch, T] -> logits [batch, n_logits or T, vocab] in float32."""
        x = self.features(tokens, positions, span)
        return self.logits(x if n_logits is None else x[:, -n_logits:])
