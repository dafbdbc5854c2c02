"""Held-out acceptance: the groups of held-out windows a distillation reports on, and the figures its
summary keeps (before and after, by language and task, and the draft vocabulary's coverage)."""

from __future__ import annotations

import numpy as np
import torch

from .data import Example


def held_out_groups(held_out: list[Example], recording_of: list) -> tuple[dict, dict]:
    """The held-out examples by language, and the groups whose acceptance training reports: overall,
    on joined recordings' full windows, per task and per language where several."""
    by_language: dict[str, list[Example]] = {}
    for example in held_out:
        by_language.setdefault(example.language, []).append(example)
    by_language = dict(sorted(by_language.items()))
    groups = {"held_out_acceptance": held_out,
              "held_out_joined_acceptance": [e for e in held_out if len(recording_of[e.window].parts) > 1]}
    tasks = sorted({e.task for e in held_out})
    if len(tasks) > 1:
        groups.update({f"held_out_{task}_acceptance": [e for e in held_out if e.task == task] for task in tasks})
    if len(by_language) > 1:
        groups.update({f"held_out_acceptance_{language}": group for language, group in by_language.items()})
    return by_language, groups


def held_out_figures(initial: dict, log: list[dict], tasks: tuple[str, ...], held_out: list[Example],
                      held_out_by_language: dict, to_draft: torch.Tensor) -> dict:
    """The summary's held-out acceptance before and after (overall, joined recordings, by language and
    by task) and how many held-out tokens the draft vocabulary holds."""
    last = log[-1] if log else {}

    def coverage(examples: list[Example]) -> float | None:
        tokens = [t for e in examples for t in e.tokens[e.start + 1 :].tolist()]
        return float(np.mean([to_draft[t] >= 0 for t in tokens])) if tokens else None

    return {
        "held_out_acceptance_before": initial.get("held_out_acceptance"),
        "held_out_acceptance": last["held_out_acceptance"] if log else None,
        "held_out_joined_acceptance_before": initial.get("held_out_joined_acceptance"),
        "held_out_joined_acceptance": last.get("held_out_joined_acceptance") if log else None,
        "held_out_acceptance_by_language": {key.removeprefix("held_out_acceptance_"): value
                                            for key, value in last.items() if key.startswith("held_out_acceptance_")},
        "held_out_acceptance_by_task": {task: last.get(f"held_out_{task}_acceptance")
                                        for task in tasks} if len(tasks) > 1 else None,
        "held_out_draft_vocab_coverage": coverage(held_out),
        "held_out_draft_vocab_coverage_by_language": {
            language: coverage(group) for language, group in held_out_by_language.items()},
    }
