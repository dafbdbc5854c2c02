"""What decoding did: counts of drafted, accepted and generated tokens, forward passes, and times."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class DecodingStats:
    """What decoding did, for one window, one file or a whole run.

    main_forwards counts batched passes of the main decoder; row_forwards counts the rows that
    took part in them, so tokens_per_main_forward is per row, comparable across batch sizes.
    Acceptance = accepted / drafted. draft_seconds and verify_seconds are the rounds' host seconds
    in the assistant's drafts and the main model's verification, counted where the host clock times
    the device's work (CPU; 0 elsewhere, where it would time launches): round_costs reads them.
    """

    windows: int = 0
    drafted: int = 0
    accepted: int = 0
    generated: int = 0  # output tokens, EOT included
    main_forwards: int = 0
    row_forwards: int = 0
    assistant_forwards: int = 0
    fallbacks: int = 0  # windows decoded again at a higher temperature, once per extra pass
    audio_seconds: float = 0.0  # of audio in the windows decoded (pipeline.transcribe)
    encoder_seconds: float = 0.0
    decoding_seconds: float = 0.0
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0
    drafted_by_position: list[int] = field(default_factory=list)
    accepted_by_position: list[int] = field(default_factory=list)

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def tokens_per_main_forward(self) -> float | None:
        return self.generated / self.row_forwards if self.row_forwards else None

    def add(self, other: "DecodingStats") -> None:
        for name in ("windows", "drafted", "accepted", "generated", "main_forwards", "row_forwards", "assistant_forwards",
                     "fallbacks", "audio_seconds", "encoder_seconds", "decoding_seconds", "draft_seconds", "verify_seconds"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for mine, theirs in ((self.drafted_by_position, other.drafted_by_position),
                             (self.accepted_by_position, other.accepted_by_position)):
            mine.extend([0] * (len(theirs) - len(mine)))
            for i, n in enumerate(theirs):
                mine[i] += n

    def as_dict(self) -> dict:
        return {
            "windows": self.windows,
            "drafted_tokens": self.drafted,
            "accepted_tokens": self.accepted,
            "acceptance": None if self.acceptance is None else round(self.acceptance, 4),
            "generated_tokens": self.generated,
            "main_forwards": self.main_forwards,
            "assistant_forwards": self.assistant_forwards,
            "fallbacks": self.fallbacks,
            "audio_seconds": round(self.audio_seconds, 3),
            "tokens_per_main_forward": (None if self.tokens_per_main_forward is None
                                        else round(self.tokens_per_main_forward, 3)),
            "encoder_seconds": round(self.encoder_seconds, 3),
            "decoding_seconds": round(self.decoding_seconds, 3),
            "draft_seconds": round(self.draft_seconds, 3),
            "verify_seconds": round(self.verify_seconds, 3),
            "drafted_by_position": self.drafted_by_position,
            "accepted_by_position": self.accepted_by_position,
        }


def timed_part(stats: DecodingStats | None, part: str, function, *args):
    """function(*args), its host seconds added to stats' `part`_seconds (draft or verify); stats None:
    not timed (see host_timed)."""
    if stats is None:
        return function(*args)
    start = time.perf_counter()
    try:
        return function(*args)
    finally:
        setattr(stats, f"{part}_seconds", getattr(stats, f"{part}_seconds") + time.perf_counter() - start)


def host_timed(stats: DecodingStats, device) -> DecodingStats | None:
    """stats where the host clock times the device's work (CPU), None where it would time launches."""
    return stats if device.type == "cpu" else None


def round_costs(drafting: DecodingStats, main_only: DecodingStats) -> dict | None:
    """Why drafting wins or loses against main-only decoding of the same batches: a round's parts in
    main-only steps (verification, one draft step, the rest: rules, acceptance and bookkeeping), its
    draft steps, and the tokens a round keeps (all rows together, as main-only's per step), so that
    decoding_speedup = tokens_per_round / main_only_tokens_per_step / round_in_main_steps. None where
    the parts were not timed (not CPU) or nothing was decoded."""
    if not (drafting.verify_seconds and drafting.main_forwards and main_only.main_forwards):
        return None
    step = main_only.decoding_seconds / main_only.main_forwards
    rounds = drafting.main_forwards

    def in_steps(seconds: float, calls: int) -> float | None:
        return round(seconds / calls / step, 3) if calls else None

    return {
        "main_step_ms": round(1000 * step, 3),
        "round_in_main_steps": in_steps(drafting.decoding_seconds, rounds),
        "verify_in_main_steps": in_steps(drafting.verify_seconds, rounds),
        "draft_step_in_main_steps": in_steps(drafting.draft_seconds, drafting.assistant_forwards),
        "draft_steps_per_round": round(drafting.assistant_forwards / rounds, 3),
        "rest_in_main_steps": in_steps(drafting.decoding_seconds - drafting.verify_seconds - drafting.draft_seconds,
                                       rounds),
        "tokens_per_round": round(drafting.generated / rounds, 3),
        "main_only_tokens_per_step": round(main_only.generated / main_only.main_forwards, 3),
        "decoding_speedup": round(main_only.decoding_seconds / drafting.decoding_seconds, 3),
    }
