"""A compact Whisper: encoder and decoder over a static KV cache with per-row positions (attention.py).

The decoder is written for speculative decoding: every call takes explicit positions per row,
writes its keys and values into a preallocated cache at those positions, and attends causally by
position. Rolling a row back after a rejected draft is then just lowering that row's length:
stale entries beyond it are masked out by position and overwritten by the next call.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from .attention import CrossStates, DecoderCaches, KVCache, cast, decoder_attention, keys_in_memory
from .kept import DecoderKept


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


def padded_rows(product, x: Tensor, min_rows: int) -> Tensor:
    """product(x) with x's rows (dim -2) padded with zeros to at least min_rows, those dropped after."""
    n_rows, padding = x.shape[-2], max(min_rows - x.shape[-2], 0)
    if not padding:
        return product(x)
    return product(F.pad(x, (0, 0, 0, padding)))[..., :n_rows, :]


class Linear(nn.Linear):
    """nn.Linear that computes in the activation dtype, so one model can hold mixed weights. Where
    the platform packed it (platform.prepare), float32 runs oneDNN's kernel on the packed copy; a
    call of fewer than pad_rows rows is padded to them (row_invariance.make_row_invariant), so a
    position's result does not depend on how many share its call."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register_buffer("packed", None, persistent=False)
        self.register_buffer("aligned", None, persistent=False)  # align_rows' padded weight
        self.pad_rows = 0

    def reset_parameters(self) -> None:
        # as Embedding's: values drawn on the meta device are never read (the weights are assigned)
        if not self.weight.is_meta:
            super().reset_parameters()

    def align_rows(self, multiple: int) -> None:
        """Compute through a copy of the weight with its rows padded to a multiple of `multiple`,
        the output sliced back: the weight becomes a view of that copy's first rows, so a module that
        shares it (a tied embedding) shares the copy. Bias-free layers only; idempotent."""
        weight = self.weight
        if self.aligned is not None or self.bias is not None or weight.is_meta or self.out_features % multiple == 0:
            return
        rows = torch.zeros(-(-self.out_features // multiple) * multiple, self.in_features, dtype=weight.dtype,
                           device=weight.device)
        rows[: self.out_features] = weight.detach()
        weight.data = rows[: self.out_features]
        self.aligned = rows

    def product(self, x: Tensor) -> Tensor:
        """x @ weight.T + bias by this layer's kernel, rows as they come."""
        if self.aligned is not None and x.dtype == self.aligned.dtype:
            return F.linear(x, self.aligned)[..., : self.out_features]
        # the oneDNN op has no backward: training (an assistant's loss through a shared, frozen
        # projection) takes F.linear
        if self.packed is not None and x.dtype == torch.float32 and not (torch.is_grad_enabled() and x.requires_grad):
            return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")
        bias = None if self.bias is None else cast(self.bias, x.dtype)
        return F.linear(x, cast(self.weight, x.dtype), bias)

    def forward(self, x: Tensor) -> Tensor:
        rows = x.numel() // self.in_features
        if rows >= self.pad_rows or torch.compiler.is_compiling() or (torch.is_grad_enabled() and x.requires_grad):
            return self.product(x)
        return padded_rows(self.product, x.reshape(rows, self.in_features), self.pad_rows).reshape(
            *x.shape[:-1], self.out_features)

    @classmethod
    def of(cls, weight: Tensor) -> "Linear":
        """A bias-free projection with this weight (shared, not copied)."""
        with torch.device("meta"):
            linear = cls(weight.shape[1], weight.shape[0], bias=False)
        linear.weight = weight if isinstance(weight, nn.Parameter) else nn.Parameter(weight, requires_grad=False)
        return linear


class Embedding(nn.Embedding):
    def reset_parameters(self) -> None:
        # a meta tensor has no values to draw, yet drawing them imports torch's compiler (the meta
        # normal_ is a decomposition), seconds of every start where decoders are built on meta
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
        self.one_window_a_call = False  # encoding.encoder_states' batching (platform.prepare)

    def forward(self, mel: Tensor) -> Tensor:
        """mel: [batch, n_mels, 3000] -> encoder states [batch, 1500, d_model]."""
        x = F.gelu(self.conv1(mel.to(self.conv1.weight.dtype)))
        x = F.gelu(self.conv2(x)).transpose(1, 2)
        x = x + self.positional_embedding.to(x.dtype)
        for block in self.blocks:
            x = block(x)
        return self.ln_post(x)


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
        self.window_kv: nn.Module | None = None  # kv in int8 for cross_states (quantize.quantize_dynamic_linears)

    def cross_states(self, encoder_states: Tensor, dtype: torch.dtype, transposed_keys: bool = False
                     ) -> tuple[Tensor, Tensor]:
        """This layer's cross-attention keys and values of the encoder states, in dtype
        (transposed_keys: see keys_in_memory)."""
        if self.window_kv is not None:
            states = self.window_kv(encoder_states.float())
        elif (many_rows := getattr(self.kv, "many_rows", None)) is not None:  # an int8 projection's, for many rows
            states = many_rows(encoder_states.to(dtype))
        else:
            states = self.kv(encoder_states)
        # dense per (row, head): a strided copy would make every batched step copy them again
        k, v = (_split_heads(t, self.n_head).to(dtype) for t in states.chunk(2, dim=-1))
        return keys_in_memory(k, transposed_keys), v.contiguous()

    def forward(self, x: Tensor, positions: Tensor, blocked: Tensor | None, exact_queries: int | None,
                kv: "KVCache | tuple[Tensor, Tensor] | None", scores_out: list | None = None,
                flash: bool = False) -> Tensor:
        """kv: cross-attention's keys and values, or self-attention's cache (None: no cache); flash:
        cross-attention through flash attention's kernel (Decoder.flash_cross_attention)."""
        if self.cross:
            q = _split_heads(self.q(x), self.n_head)
            k, v = kv
        else:
            q, k, v = (_split_heads(t, self.n_head) for t in self.qkv(x).chunk(3, dim=-1))
            if kv is not None:
                kv.write(positions, k, v)
                k, v = kv.k[:, :, : blocked.shape[-1]], kv.v[:, :, : blocked.shape[-1]]
            # without a cache (training, whole-sequence scoring) positions are 0..T-1 in every row
        if flash and self.cross:
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                attn = F.scaled_dot_product_attention(cast(q, k.dtype), k, v)
        else:
            attn = decoder_attention(cast(q, k.dtype), k, v, None if self.cross else blocked, exact_queries, scores_out)
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

    def forward(self, x: Tensor, positions: Tensor, blocked: Tensor, exact_queries: int | None,
                cache: KVCache | None, cross: tuple[Tensor, Tensor], cross_scores: list | None = None,
                flash: bool = False) -> Tensor:
        x = x + self.attn(self.attn_ln(x), positions, blocked, exact_queries, cache)
        x = x + self.cross_attn(self.cross_attn_ln(x), positions, None, exact_queries, cross, cross_scores, flash)
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
        self.blocks = nn.ModuleList(DecoderBlock(dims.d_model, dims.n_text_head, dims.n_text_ffn)
                                    for _ in range(dims.n_text_layer))
        self.ln = nn.LayerNorm(dims.d_model)
        self.proj_out: nn.Module | None = None
        self.cross_source: list[int] | None = None  # per block: the main decoder layer whose cross keys/values it reuses
        # queries padded to this many for row-invariant attention (row_invariance.make_row_invariant; 0: one
        # product a query), None: the main decoder on a device without row invariance, or an assistant
        self.exact_queries: int | None = None
        # keys, values and attention; None: the activation dtype (platform.prepare)
        self.attention_dtype: torch.dtype | None = None
        # cross-attention through flash attention's kernel (split over the frames), where written out it is
        # seven: only where every main call has one shape, as its result depends on the shape, and flash
        # runs (platform.prepare: CUDA, half precision); decisions, "Flash cross-attention on GPUs"
        self.flash_cross_attention = False
        self.transposed_keys = False  # keys_in_memory's layout for its caches and cross states (platform.prepare)
        self.kept = DecoderKept()  # its buffers, rules and graphs between batches: released with it

    @property
    def dtype(self) -> torch.dtype:
        return self.positional_embedding.dtype  # the activation dtype, also when the linears are int8

    @property
    def cache_dtype(self) -> torch.dtype:
        return self.attention_dtype or self.dtype

    def new_caches(self, batch: int, n_ctx: int) -> list[KVCache]:
        """Empty self-attention caches of n_ctx positions, one a block."""
        head_dim = self.dims.d_model // self.dims.n_text_head
        device = self.positional_embedding.device
        return [KVCache.empty(batch, self.dims.n_text_head, n_ctx, head_dim, self.cache_dtype, device, self.transposed_keys)
                for _ in self.blocks]

    def cross_states(self, encoder_states: Tensor, main: CrossStates | None = None,
                     n_frames: int | None = None) -> CrossStates:
        """Each block's cross-attention keys and values of these encoder states; blocks that share
        their projection with a main decoder layer (cross_source) take that layer's, already
        computed (main: the main decoder's cross_states). n_frames: attend to the first frames only
        (an assistant skipping the padding after the audio)."""
        if main is not None and self.cross_source is not None:
            # dense: one memory layout for a compiled draft step; in its own attention dtype, which
            # need not be the main decoder's
            shared = (main[layer] for layer in self.cross_source)
            return [(keys_in_memory(k[:, :, :n_frames].to(self.cache_dtype), self.transposed_keys),
                     v[:, :, :n_frames].to(self.cache_dtype).contiguous()) for k, v in shared]
        encoder_states = encoder_states[:, :n_frames].to(self.dtype)
        return [block.cross_attn.cross_states(encoder_states, self.cache_dtype, self.transposed_keys) for block in self.blocks]

    def features(self, tokens: Tensor, positions: Tensor, caches: DecoderCaches, span: int | None = None,
                 cross_scores: list | None = None, taps: tuple[int, ...] | None = None) -> Tensor:
        """tokens, positions: [batch, T] -> final hidden states [batch, T, d_model] (taps: see through_blocks).

        With self-attention caches, each row attends to its own cache entries at positions <= its
        query position; without (training), to the tokens of this call. Attention spans the whole
        cache unless span (> every position) limits it: a query's result then does not depend on how
        many positions one call computes, so the verification pass gives each position the logits a
        one-token step would (bit for bit on CPU, see decoder_attention), and no host sync is
        needed for the length. Only an assistant, whose drafts need not be exact, passes a span.
        cross_scores: a list that gets each block's cross-attention scores, [batch, head, T, frames].
        """
        x = cast(self.token_embedding(tokens), self.dtype)  # an assistant may share a main embedding of another dtype
        return self.through_blocks(x, positions, caches, span, cross_scores, taps)

    def through_blocks(self, x: Tensor, positions: Tensor, caches: DecoderCaches, span: int | None = None,
                       cross_scores: list | None = None, taps: tuple[int, ...] | None = None) -> Tensor:
        """Inputs [batch, T, d_model] (before the positional embedding) -> final hidden states; taps:
        the outputs of these blocks, then the final hidden states, concatenated [batch, T, (len(taps)
        + 1) * d_model] (what a DraftHead with feature_layers reads)."""
        self_caches = caches.self_attention
        kv_len = (span or self_caches[0].k.shape[2]) if self_caches is not None else x.shape[1]
        blocked = torch.arange(kv_len, device=x.device) > positions[:, None, :, None]
        # training, whole-sequence scoring and an assistant's drafts need no exactness across call shapes
        exact_queries = self.exact_queries if self_caches is not None and span is None else None
        flash = self.flash_cross_attention and cross_scores is None  # word timestamps read the written-out scores
        x = x + self.positional_embedding[positions.clamp(max=self.dims.n_text_ctx - 1)]
        tapped = []
        for i, block in enumerate(self.blocks):
            cache = self_caches[i] if self_caches is not None else None
            x = block(x, positions, blocked, exact_queries, cache, caches.cross[i], cross_scores, flash)
            if taps and i in taps:
                tapped.append(x)
        return torch.cat([*tapped, self.ln(x)], dim=-1) if tapped else self.ln(x)

    def final_hidden(self, features: Tensor) -> Tensor:
        """The final hidden states of features (through_blocks' output, with or without taps)."""
        # contiguous, as main-only's are: the logits must not depend on whether a head tapped layers
        return features[..., -self.dims.d_model :].contiguous()

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
            return self.proj_out(x).float().contiguous()  # an aligned projection's columns are a slice
        return F.linear(x, self.token_embedding.weight).float()

    def align_vocab_rows(self) -> None:
        """A float output projection's rows padded to a multiple of 16 (Linear.align_rows): cuBLAS
        runs Whisper's odd vocabulary sizes in a slow unaligned kernel."""
        if type(self.proj_out) is Linear:
            self.proj_out.align_rows(16)

    def forward(self, tokens: Tensor, positions: Tensor, caches: DecoderCaches, n_logits: int | None = None,
                span: int | None = None) -> Tensor:
        """tokens, positions: [batch, T] -> logits [batch, n_logits or T, vocab] in float32."""
        x = self.features(tokens, positions, caches, span)
        return self.logits(x if n_logits is None else x[:, -n_logits:])
