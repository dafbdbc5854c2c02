"""The decoders' caches while a batch decodes, and their one owner: each decoder's cross-attention
states of the batch (encoding.Encoded) and self-attention caches, and which rows they compute."""

from __future__ import annotations

import weakref

import torch
from torch import Tensor

from .model import CrossStates, Decoder, DecoderCaches, KVCache

# per decoder, its last batch's self-attention caches and (stable) cross-attention states
_KEPT_CACHES: "weakref.WeakKeyDictionary[Decoder, list[KVCache]]" = weakref.WeakKeyDictionary()
_KEPT_CROSS: "weakref.WeakKeyDictionary[Decoder, CrossStates]" = weakref.WeakKeyDictionary()


def self_attention_caches(decoder: Decoder, batch: int, n_ctx: int) -> list[KVCache]:
    """Self-attention caches of this shape: the decoder's last ones where they have it (zeroing
    new ones costs a little each batch; CUDA graphs captured on them read them where they are).
    Stale entries are harmless: attention masks every position past a row's own."""
    kept = _KEPT_CACHES.get(decoder)
    if kept is None or kept[0].k.shape[0] != batch or kept[0].k.shape[2] != n_ctx:
        kept = _KEPT_CACHES[decoder] = decoder.new_caches(batch, n_ctx)
    return kept


def kept_cache_length(decoder: Decoder) -> int | None:
    """The positions of the decoder's last self-attention caches (None: it has none)."""
    kept = _KEPT_CACHES.get(decoder)
    return kept[0].k.shape[2] if kept is not None else None


def stable_cross(decoder: Decoder, cross: CrossStates) -> CrossStates:
    """These cross-attention states, copied into the decoder's last batch's where every shape
    matches: CUDA graphs captured on them read them there."""
    kept = _KEPT_CROSS.get(decoder)
    pairs = [(old, new) for old_kv, new_kv in zip(kept or [], cross) for old, new in zip(old_kv, new_kv)]
    if kept is None or len(kept) != len(cross) or any(
            old.shape != new.shape or old.dtype != new.dtype or old.device != new.device for old, new in pairs):
        _KEPT_CROSS[decoder] = cross
        return cross
    for old, new in pairs:
        if old.data_ptr() != new.data_ptr():
            old.copy_(new)
    return kept


class BatchCaches:
    """The decoders' caches while a batch decodes: the main decoder's and the assistant's
    DecoderCaches (main, assistant), made from the batch's cross-attention states and the
    self-attention caches of the decoder's last batch of this shape.

    With row-invariant kernels (Platform.row_invariant) finished rows leave the decoders' batch
    rather than run until the longest row ends (keep): a row's results do not depend on which rows
    run beside it. Without, every row stays (fixed shapes). stable: in the buffers of the last
    batch of this shape (stable_cross), for CUDA graphs. rows: decode these rows of the batch only
    (a later temperature's)."""

    def __init__(self, decoders: list[tuple[Decoder, CrossStates]], n_ctx: int, row_invariant: bool,
                 stable: bool = False, rows: Tensor | None = None):
        caches = []
        for decoder, cross in decoders:
            cross = stable_cross(decoder, cross) if stable else cross
            decoder_caches = DecoderCaches(cross, self_attention_caches(decoder, cross[0][0].shape[0], n_ctx))
            caches.append(decoder_caches if rows is None else decoder_caches.rows(rows))
        self.main, self.assistant = caches[0], caches[1] if len(caches) > 1 else None
        self.batch = caches[0].cross[0][0].shape[0]
        self.alive = torch.arange(self.batch, device=caches[0].cross[0][0].device) if row_invariant else None

    def keep(self, active: Tensor) -> None:
        """Rows still decoding (a mask over the whole batch): the others leave the decoders' batch."""
        if self.alive is not None and len(self.alive) > int(active.sum()):
            keep = active[self.alive]
            self.alive = self.alive[keep]
            self.main = self.main.rows(keep)
            self.assistant = self.assistant.rows(keep) if self.assistant is not None else None

    def call(self, step, *row_inputs: Tensor | None) -> Tensor | tuple[Tensor, ...]:
        """step(*row_inputs) (each [batch, ...], or None) for every row of the batch, its output a
        tensor or a tuple of them; rows that left the batch get zeros. step reads main or assistant
        as they are when it is called."""
        if self.alive is None or len(self.alive) == self.batch:
            return step(*row_inputs)
        out = step(*(None if x is None else x[self.alive] for x in row_inputs))
        whole = [t.new_zeros((self.batch, *t.shape[1:])).index_copy_(0, self.alive, t)
                 for t in (out if isinstance(out, tuple) else (out,))]
        return tuple(whole) if isinstance(out, tuple) else whole[0]
