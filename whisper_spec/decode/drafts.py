"""An assistant's draft step, eager or compiled with torch.compile."""

from __future__ import annotations

import functools
import warnings

from torch import Tensor

from ..models.attention import DecoderCaches


def draft_logits(decoder, caches: DecoderCaches, span: int, window: Tensor, positions: Tensor,
                 before: Tensor | None = None) -> Tensor | tuple[Tensor, Tensor]:
    """An assistant's logits on its draft vocabulary after each row's last position, [batch,
    columns]; attention spans the first span positions of its caches. A draft head (model.DraftHead) reads
    before, the hidden states at the positions before the window's, and also returns its hidden
    state at the last position, which its next step reads."""
    if before is None:
        return decoder.logits(decoder.features(window, positions, caches, span)[:, -1], compact=True)
    hidden = decoder.features(window, positions, caches, span, before=before)[:, -1]
    return decoder.logits(hidden, compact=True), hidden


@functools.cache
def _compiled_draft_logits():
    # one graph for every frame count and span, one for batches of 1 and one for larger ones
    # (dynamic shapes: the caches' batch shrinks as rows finish, and static shapes made a graph per
    # batch size, each compiled for seconds inside a job); compiled at first use, as importing the
    # compiler alone costs seconds
    import torch._dynamo

    return torch._dynamo.config.patch(force_parameter_static_shapes=False, force_nn_module_property_static_shapes=False)(
        torch.compile(draft_logits, dynamic=True, fullgraph=True))


_COMPILE_FAILED: list[str] = []  # why drafts went back to eager, once a compilation failed


def compiled_draft_logits(decoder, caches: DecoderCaches, span: int, window: Tensor, positions: Tensor,
                          before: Tensor | None = None) -> Tensor | tuple[Tensor, Tensor]:
    """draft_logits through torch.compile (DecodingOptions.compile on CPU): the step's ~750 small
    ops fused into a few kernels around the matmuls. Its drafts may differ from eager ones in the
    last bits (fused arithmetic); they are proposals, each verified by the main model, so the
    output does not change. One position a row only, the usual step: the few wider calls (a
    round's first step, catching up on the main model's token) run eagerly, as a graph for them
    would be compiled per width (the decoder's query-by-query attention loops over it). Where
    compilation fails (no C++ compiler), eager, with a warning."""
    if window.shape[1] == 1 and not _COMPILE_FAILED:
        try:
            return _compiled_draft_logits()(decoder, caches, span, window, positions, before)
        except Exception as error:  # noqa: BLE001 - any compiler failure: the eager step is the same function
            _COMPILE_FAILED.append(f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}")
            warnings.warn(f"compiled drafts unavailable, drafting eagerly ({_COMPILE_FAILED[0]})", stacklevel=2)
    return draft_logits(decoder, caches, span, window, positions, before)
