"""Which rows of a batch the decoders compute: their caches and cross-attention states narrowed to
some rows, and put back whole afterwards."""

from __future__ import annotations

import torch
from torch import Tensor


class RowsKept:
    """Some rows of the batch in the decoders' caches and cross-attention states; on exit, normal or
    not, every row's are put back, so the next call neither reallocates the caches nor misses a
    row's audio."""

    def __init__(self, decoders: list):
        self.decoders = decoders
        self._full = [(block.attn, block.attn.kv_cache, block.cross_attn, block.cross_attn.cross_kv)
                      for decoder in decoders for block in decoder.blocks]
        self._tensors = [(cache, cache.k, cache.v) for _, cache, _, _ in self._full if cache is not None]

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        for attention, cache, cross, states in self._full:
            attention.kv_cache, cross.cross_kv = cache, states
        for cache, k, v in self._tensors:
            cache.k, cache.v = k, v

    def keep(self, rows: Tensor) -> None:
        """Keep these rows (an index or a mask over the rows kept so far)."""
        for decoder in self.decoders:
            decoder.keep_rows(rows)


class LiveRows(RowsKept):
    """The rows the decoders compute. With row-invariant kernels (Platform.row_invariant)
    finished rows leave the decoders' batch rather than run until the longest row ends: a row's
    results do not depend on which rows run beside it. Without, every row stays (fixed shapes)."""

    def __init__(self, decoders: list, batch: int, device: torch.device, row_invariant: bool):
        super().__init__(decoders)
        self.batch = batch
        self.alive = torch.arange(batch, device=device) if row_invariant else None

    def keep(self, active: Tensor) -> None:
        if self.alive is not None and len(self.alive) > int(active.sum()):
            keep = active[self.alive]
            self.alive = self.alive[keep]
            super().keep(keep)

    def call(self, step, *row_inputs: Tensor | None) -> Tensor | tuple[Tensor, ...]:
        """step(*row_inputs) (each [batch, ...], or None) for every row of the batch, its output a
        tensor or a tuple of them; rows that left the batch get zeros."""
        if self.alive is None or len(self.alive) == self.batch:
            return step(*row_inputs)
        out = step(*(None if x is None else x[self.alive] for x in row_inputs))
        whole = [t.new_zeros((self.batch, *t.shape[1:])).index_copy_(0, self.alive, t)
                 for t in (out if isinstance(out, tuple) else (out,))]
        return tuple(whole) if isinstance(out, tuple) else whole[0]
