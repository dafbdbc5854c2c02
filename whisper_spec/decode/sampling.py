"""Sampling by counter-based randomness: the uniform number a token position draws at is a hash
of the window's seed and the position, so a position samples the same token in any batch, on any
device, and whether the main model scored it alone or verifying drafts (speculative.accept)."""

from __future__ import annotations

import torch
from torch import Tensor

_UINT32 = 0xFFFFFFFF


def _mul32(x: Tensor, constant: int) -> Tensor:
    """x * constant modulo 2**32, for x in [0, 2**32), in halves so that int64 never overflows."""
    return (x * (constant & 0xFFFF) + (((x * (constant >> 16)) & 0xFFFF) << 16)) & _UINT32


def _hash32(x: Tensor) -> Tensor:
    """An integer hash of 32-bit values (Wellons' lowbias32) whose outputs pass as independent
    uniform draws: counter-based randomness, the same on every device and in any batch."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def position_uniforms(seeds: Tensor, positions: Tensor) -> Tensor:
    """A uniform number in (0, 1) per (seed, token position): what sampling draws at a position."""
    key = _hash32((_hash32(seeds & _UINT32) + positions) & _UINT32)
    return ((key >> 9).float() + 0.5) / 2**23  # exact in float32, never 0 or 1


def sample_tokens(logits: Tensor, temperature: float, uniforms: Tensor) -> Tensor:
    """Per row, the token where the cumulative distribution softmax(logits / temperature) first
    exceeds the row's uniform number (inverse transform sampling): distributed as the model's, and
    a function of the logits and the number alone, so a position scored in either mode gives the
    same token. logits: [n, vocab]; uniforms: [n]."""
    cumulative = torch.softmax(logits / temperature, dim=-1).cumsum(dim=-1)
    # times the total rather than 1, as the float sum may fall short of 1; the first index reaching
    # the target is always a token of positive probability
    targets = (uniforms * cumulative[:, -1])[:, None]
    return torch.searchsorted(cumulative, targets)[:, 0]


def choose_tokens(logits: Tensor, temperature: float, seeds: Tensor, positions: Tensor) -> Tensor:
    """Per row of logits ([n, vocab]), the token its position takes: the argmax at temperature 0,
    else the draw at the uniform number of the row's seed and position (sample_tokens). seeds,
    positions: [n]."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    return sample_tokens(logits, temperature, position_uniforms(seeds, positions))


def row_seeds(seed: int, window_seeds: list[int], device: torch.device) -> Tensor:
    """Per row, what its uniform numbers derive from: the options' seed mixed with the window's."""
    return _hash32((_hash32(torch.tensor(seed, device=device) & _UINT32)
                    + torch.tensor(window_seeds, device=device)) & _UINT32)
