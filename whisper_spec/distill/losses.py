"""The losses a student trains on: distil-whisper's (cross-entropy on the pseudo-labels plus KL to the
teacher's top-k), and a draft head's regression onto the main decoder's hidden states."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..options import DistillOptions


def distillation_loss(logits, labels, top_ids, top_logits, options: DistillOptions) -> torch.Tensor:
    """ce_weight * CE(pseudo-labels) + kl_weight * T^2 * KL(teacher top-k || assistant), per position."""
    mask = labels >= 0
    ce = F.cross_entropy(logits[mask], labels[mask])
    t = options.kl_temperature
    has_teacher = torch.isfinite(top_logits).any(dim=-1)
    teacher = torch.softmax(top_logits[has_teacher] / t, dim=-1)
    student = torch.log_softmax(logits[has_teacher] / t, dim=-1).gather(1, top_ids[has_teacher])
    kl = (teacher * (torch.log(teacher.clamp(min=1e-20)) - student)).sum(dim=-1).mean()
    return options.ce_weight * ce + options.kl_weight * t * t * kl


def hidden_loss(predicted: torch.Tensor, hidden: torch.Tensor, tokens: torch.Tensor, eot: int) -> torch.Tensor:
    """A draft head's regression onto the main decoder's final hidden states (EAGLE's smooth L1; the
    last d_model of its features), over the positions up to each sequence's end of text."""
    ends = (tokens == eot).long().argmax(dim=1)
    mask = torch.arange(tokens.shape[1]) <= ends[:, None]
    return F.smooth_l1_loss(predicted[mask], hidden[..., -predicted.shape[-1]:][mask])
