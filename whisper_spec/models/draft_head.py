"""A draft head: an assistant decoder of a layer or two that reads the main decoder's hidden states
(EAGLE), beside the tokens."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .attention import DecoderCaches, cast
from .model import Decoder, Linear, ModelDims


class DraftHead(Decoder):
    """A draft head (EAGLE, Li et al. 2024): a decoder of a layer or two whose input at each position
    is its token's embedding fused with the main decoder's final hidden state at the position before,
    and which predicts that state at its own position. Drafting past the main model's last verified
    position, it reads its own predictions instead (speculative.draft). It shares the main model's
    embedding, output rows and cross-attention key/value projections (pair.share_main_modules).

    With feature_layers (EAGLE-3), what it reads at a verified position is the outputs of those main
    decoder blocks and the final hidden state, concatenated and reduced to d_model (head_input).
    What it reads is layer-normed before the fusion (feature_ln, as EAGLE-3's hidden_norm): Whisper's
    final hidden states are far from unit scale (docs/decisions.md, "Draft heads")."""

    def __init__(self, dims: ModelDims, feature_layers: tuple[int, ...] = ()):
        super().__init__(dims)
        self.feature_ln = nn.LayerNorm(dims.d_model)
        self.fuse = Linear(2 * dims.d_model, dims.d_model)
        self.feature_layers = tuple(feature_layers)
        self.reduce = Linear((len(self.feature_layers) + 1) * dims.d_model, dims.d_model) if self.feature_layers else None

    def head_input(self, main_features: Tensor) -> Tensor:
        """The main decoder's features (through_blocks with taps=feature_layers) -> what the head
        reads beside a token at a verified position."""
        return main_features if self.reduce is None else self.reduce(cast(main_features, self.dtype))

    def features(self, tokens: Tensor, positions: Tensor, caches: DecoderCaches, span: int | None = None,
                 cross_scores: list | None = None, before: Tensor | None = None) -> Tensor:
        """Decoder.features, given before [batch, T, d_model]: the main decoder's final hidden state
        at each position minus one (zeros at position 0), or the head's own prediction of it."""
        embedded = cast(self.token_embedding(tokens), self.dtype)
        x = self.fuse(torch.cat([self.feature_ln(cast(before, self.dtype)), embedded], dim=-1))
        return self.through_blocks(x, positions, caches, span, cross_scores)
