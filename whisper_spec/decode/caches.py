"""The decoders' caches while a batch decodes, and their one owner: each decoder's cross-attention
states of the batch (encoding.Encoded) and self-attention caches, and which rows they compute."""

from __future__ import annotations

import torch
from torch import Tensor

from ..models.attention import CrossStates, DecoderCaches, KVCache
from ..models.model import Decoder


def self_attention_caches(decoder: Decoder, batch: int, n_ctx: int) -> list[KVCache]:
    """Self-attention caches of this shape: the decoder's last ones of that shape, dtype and key
    layout where it has them (zeroing new ones costs a little each batch; CUDA graphs captured on
    them read them where they are). Stale entries are harmless: attention masks every position past
    a row's own."""
    key = (batch, n_ctx, decoder.cache_dtype, decoder.transposed_keys)
    return decoder.kept.self_attention.get(key, lambda: decoder.new_caches(batch, n_ctx))


def kept_cache_length(decoder: Decoder) -> int | None:
    """The positions of the decoder's most recently used self-attention caches (None: it has none)."""
    newest = decoder.kept.self_attention.newest()
    return newest[1] if newest is not None else None


def stable_cross(decoder: Decoder, cross: CrossStates) -> CrossStates:
    """These cross-attention states, copied into the decoder's last batch's of the same shapes:
    CUDA graphs captured on them read them there."""
    shape = tuple((t.shape, t.dtype, t.device) for kv in cross for t in kv)
    kept = decoder.kept.cross.get(shape, lambda: cross)
    for old_kv, new_kv in zip(kept, cross):
        for old, new in zip(old_kv, new_kv):
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
        self.own_copies = False  # whether main and assistant are this object's copies, no longer the batch's

    def keep(self, active: Tensor) -> None:
        """Rows still decoding (a mask over the whole batch): the others leave the decoders' batch.
        The first time as copies (the batch's cross states serve a later temperature and word
        timing, its self-attention caches the next batch), then within those copies."""
        if self.alive is not None and len(self.alive) > int(active.sum()):
            keep = active[self.alive]
            self.alive = self.alive[keep]
            self.main, self.assistant = (caches if caches is None else caches.compact(keep) if self.own_copies
                                         else caches.rows(keep) for caches in (self.main, self.assistant))
            self.own_copies = True

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
