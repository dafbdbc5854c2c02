"""What decoding did: counts of drafted, accepted and generated tokens, forward passes, and times."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class DecodingStats:
    """What decoding did, for one window, one file or a whole run.

    main_forwards counts batched passes of the main decoder; row_forwards counts the rows that
    took part in them, so tokens_per_main_forward is per row, comparable across batch sizes.
    Acceptance = accepted / drafted.
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
    drafted_by_position: list[int] = field(default_factory=list)
    accepted_by_position: list[int] = field(default_factory=list)

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def tokens_per_main_forward(self) -> float | None:
        return self.generated / self.row_forwards if self.row_forwards else None

    def add(self, other: "DecodingStats") -> None:
        for name in ("windows", "drafted", "accepted", "generated", "main_forwards", "row_forwards",
                     "assistant_forwards", "fallbacks", "audio_seconds", "encoder_seconds", "decoding_seconds"):
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
            "drafted_by_position": self.drafted_by_position,
            "accepted_by_position": self.accepted_by_position,
        }
