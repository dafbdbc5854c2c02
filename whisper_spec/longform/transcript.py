"""A file's transcript (its text, language and timed segments, with its decoding figures) and a
file that failed: what the pipeline yields, the writers render and the server returns."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..decode.stats import DecodingStats
from .segments import Segment


@dataclass
class Transcript:
    path: str
    text: str
    language: str | None
    duration: float  # seconds of audio
    segments: list[Segment]
    stats: DecodingStats = field(default_factory=DecodingStats)
    language_probability: float | None = None  # where the language was detected: its probability (detect_language)

    def as_dict(self) -> dict:
        """Times in seconds to the millisecond (a timestamp token is 20 ms); a segment's window's
        decoding figures where they were computed, and its language where not the transcript's."""
        def segment(s: Segment) -> dict:
            scores = {"temperature": s.temperature, "avg_logprob": s.avg_logprob,
                      "compression_ratio": s.compression_ratio, "no_speech_prob": s.no_speech_prob}
            return ({"start": round(s.start, 3), "end": round(s.end, 3), "text": s.text}
                    | ({"language": s.language} if s.language not in (None, self.language) else {})
                    | {name: round(value, 4) for name, value in scores.items() if value is not None}
                    | ({"words": [w.as_dict() for w in s.words]} if s.words else {}))

        return {
            "path": self.path,
            "text": self.text,
            "language": self.language,
            **({"language_probability": round(self.language_probability, 4)} if self.language_probability is not None else {}),
            "duration": round(self.duration, 3),
            "segments": [segment(s) for s in self.segments],
            "stats": self.stats.as_dict(),
        }


@dataclass
class Failure:
    path: str
    error: str  # one line naming the file and the problem
