"""Attention over a static KV cache: a decoder's caches (self-attention keys and values written by
position, cross-attention states of a batch) and attention written out so that a position's output
does not depend on how many are computed at once (row invariance)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor


def cast(tensor: Tensor, dtype: torch.dtype) -> Tensor:
    """tensor in dtype; one that already is costs no dispatcher call (a decoder step makes a
    hundred such casts, most of them no-ops)."""
    return tensor if tensor.dtype == dtype else tensor.to(dtype)


@dataclass
class KVCache:
    """Preallocated keys and values of one decoder self-attention layer: [batch, head, ctx, head_dim]."""

    k: Tensor
    v: Tensor

    @classmethod
    def empty(cls, batch: int, n_head: int, n_ctx: int, head_dim: int, dtype, device,
              transposed_keys: bool = False) -> "KVCache":
        """transposed_keys: keys stored head_dim-major (keys_in_memory)."""
        # zeros, not torch.empty: a masked position's value still enters attention's product (times 0)
        shape = (batch, n_head, n_ctx, head_dim)
        keys = torch.zeros(shape, dtype=dtype, device=device)
        return cls(keys_in_memory(keys, transposed_keys), torch.zeros(shape, dtype=dtype, device=device))

    def write(self, positions: Tensor, k: Tensor, v: Tensor) -> None:
        """positions: [batch, T]; k, v: [batch, head, T, head_dim]."""
        # a scatter along the positions: one kernel, where indexing rows and positions is three
        index = positions[:, None, :, None].expand(-1, k.shape[1], -1, k.shape[3])
        self.k.scatter_(2, index, cast(k, self.k.dtype))
        self.v.scatter_(2, index, cast(v, self.v.dtype))


CrossStates = list  # per decoder block, the cross-attention (keys, values) of a batch: [batch, head, frames, head_dim] each


@dataclass
class DecoderCaches:
    """What a decoder call attends to besides its tokens, for one batch: per block, the cross-attention
    keys and values of the batch's audio (Decoder.cross_states), and while decoding the self-attention
    caches (Decoder.new_caches). Without caches (training, whole-sequence scoring) a call attends to
    its own tokens, at positions 0..T-1 in every row."""

    cross: CrossStates
    self_attention: list[KVCache] | None = None

    def rows(self, keep: Tensor) -> "DecoderCaches":
        """These rows only (an index or a mask), in that order: copies, the originals stay whole."""
        return DecoderCaches([(k[keep], v[keep]) for k, v in self.cross], self.self_attention and [
            KVCache(c.k[keep], c.v[keep]) for c in self.self_attention])

    def compact(self, keep: Tensor) -> "DecoderCaches":
        """These rows only (a mask), in order: moved to the front of each tensor in place, then views
        of the first rows. Only for caches nothing else reads: unlike rows, it allocates nothing and
        moves only the rows after the first one left out."""
        index = keep.nonzero()[:, 0].tolist()
        for t in self.tensors():
            for row, source in enumerate(index):
                if source != row:  # sources run ahead of rows: none is overwritten before it is read
                    t[row].copy_(t[source])
        n = len(index)
        return DecoderCaches([(k[:n], v[:n]) for k, v in self.cross], self.self_attention and [
            KVCache(c.k[:n], c.v[:n]) for c in self.self_attention])

    def tensors(self) -> list[Tensor]:
        """Every tensor a call reads or writes: the self-attention caches', then the cross-attention states."""
        caches = self.self_attention or []
        return [t for c in caches for t in (c.k, c.v)] + [t for kv in self.cross for t in kv]


def keys_in_memory(keys: Tensor, transposed: bool) -> Tensor:
    """keys [..., positions, head_dim] as a dense tensor of that shape, stored head_dim-major where
    transposed (k^T contiguous: attention's q k^T then reads them in rows, faster on CPU;
    decisions, "Keys stored transposed on CPU"), else row-major. Slices, row selections, clones
    and dtype conversions keep the layout; .contiguous() does not."""
    if transposed:
        return keys.transpose(-1, -2).contiguous().transpose(-1, -2)
    return keys.contiguous()


def _bmm(a: Tensor, b: Tensor) -> Tensor:
    """a @ b for [batch, head, ...] operands through one bmm on [batch * head, ...] views: the
    kernel and strides torch.matmul reaches for these shapes, without its dozen reshaping ops a
    call (a decoder step makes two dozen such products)."""
    out = torch.bmm(a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:]))
    return out.view(*a.shape[:-1], b.shape[-1])


def attend(q: Tensor, k: Tensor, v: Tensor, blocked: Tensor | None, min_queries: int,
           scores_out: list | None = None) -> Tensor:
    """softmax(q k^T / sqrt(d)) v, with q padded with zero queries to at least min_queries rows
    (row_invariance.query_rows); blocked: True where a query may not attend."""
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


def decoder_attention(q: Tensor, k: Tensor, v: Tensor, blocked: Tensor | None, exact_queries: int | None,
                       scores_out: list | None = None) -> Tensor:
    """Attention written out rather than F.scaled_dot_product_attention, whose fused kernels pick
    blockings by query count, so that one position's output would depend on how many are computed
    at once. With a full-cache key span and row-invariant matmuls, a verified position's logits
    are those of a one-token step, bit for bit. exact_queries (Decoder.exact_queries; None: not
    asked): the query rows padding to which makes this CPU's matmuls row-invariant, 0 where none
    does (then one product a query; the rest is elementwise or per row, row-invariant anyway).
    blocked: True where a query may not attend. scores_out: a list the attention scores (before
    the softmax) are appended to."""
    if exact_queries is None:
        return attend(q, k, v, blocked, 0, scores_out)
    if exact_queries:
        return attend(q, k, v, blocked, exact_queries, scores_out)
    row_scores = [] if scores_out is not None else None
    rows = [attend(q[..., i : i + 1, :], k, v, None if blocked is None else blocked[..., i : i + 1, :], 0, row_scores)
            for i in range(q.shape[-2])]
    if scores_out is not None:
        scores_out.append(torch.cat(row_scores, dim=-2))
    return torch.cat(rows, dim=-2)
