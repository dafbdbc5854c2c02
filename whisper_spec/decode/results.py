"""A window's decoding result and openai-whisper's verdicts on it: does the text loop or does the
model doubt it (then decode it again at a higher temperature), and which attempt to keep."""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, replace

from ..options import DecodingOptions
from .stats import DecodingStats


@dataclass
class WindowResult:
    tokens: list[int]  # sampled tokens after the prompt, timestamps included, EOT excluded
    language: str | None
    hit_max_length: bool  # stopped by max_length rather than EOT
    stats: DecodingStats  # this row's counts; times are the batch's, shared equally by its rows
    no_speech: bool = False  # judged silent by the no-speech rule (DecodingOptions): no text
    no_speech_prob: float | None = None  # None where the rule is off
    avg_logprob: float | None = None  # computed where a verdict needs it (needs_fallback, the no-speech rule)
    compression_ratio: float = 0.0  # of the text (compression_ratio): above its threshold, the text loops
    temperature: float = 0.0  # of the decoding pass whose text this is
    language_probability: float | None = None  # of its language, where detected on this window (encoding.detect_language)


def compression_ratio(text: str) -> float:
    """Bytes of the text over bytes of it zlib-compressed: high for text that repeats itself."""
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0


def needs_fallback(result: WindowResult, options: DecodingOptions) -> bool:
    """openai-whisper's verdict: the text loops (compression ratio) or the main model doubts it
    (average log-probability), and the window is not silent (no-speech probability) as well."""
    doubtful = (options.logprob_threshold is not None and result.avg_logprob is not None
                and result.avg_logprob < options.logprob_threshold)
    loops = options.compression_ratio_threshold is not None and result.compression_ratio > options.compression_ratio_threshold
    silent = (doubtful and options.no_speech_threshold is not None and result.no_speech_prob is not None
              and result.no_speech_prob > options.no_speech_threshold)
    return (loops or doubtful) and not silent


def best_attempt(attempts: list[WindowResult], options: DecodingOptions) -> WindowResult:
    """The last attempt where it passed; where every temperature failed, faster-whisper's choice:
    the most probable (average log-probability) of the texts that do not loop, else of all. Its
    stats count every attempt's work."""
    chosen = attempts[-1]
    if needs_fallback(chosen, options):
        threshold = options.compression_ratio_threshold
        unlooped = [a for a in attempts if threshold is None or a.compression_ratio <= threshold]
        chosen = max(unlooped or attempts, key=lambda a: a.avg_logprob if a.avg_logprob is not None else -math.inf)
    if len(attempts) == 1:
        return chosen
    stats = DecodingStats()
    for attempt in attempts:
        stats.add(attempt.stats)
    stats.windows, stats.fallbacks = 1, len(attempts) - 1
    return replace(chosen, stats=stats, language_probability=attempts[0].language_probability)  # detected once
