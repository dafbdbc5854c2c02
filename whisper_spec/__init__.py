"""whisper-spec: Whisper speculative decoding with output identical to the main model's.

The data flow, one module a stage: audio (files -> 16 kHz -> log-mel features) -> vad (long audio ->
speech chunks) -> encoding (encoder states into the decoders) -> decoding (a batch at each
temperature) -> speculative (draft, verify, accept per row) -> segments (a window's tokens -> timed
segments) -> writers (txt, json, srt, vtt, tsv). model is the network, load and pair make the model pair,
platform decides what the device and CPU change; pipeline (transcribe) and batch run files through
it; bench and distill measure and train.

Names are imported on first use, so `import whisper_spec` (and the command line's --help) does not
load torch.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("whisper-spec")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "unknown"

_PUBLIC = {
    "load_audio": "speech.audio", "AudioError": "speech.audio", "log_mel_spectrogram": "speech.audio",
    "DecodingOptions": "options", "ChunkingOptions": "options", "VadOptions": "options", "DistillOptions": "options", "BenchOptions": "options",
    "decode_windows": "decode.decoding", "DecodingStats": "decode.stats",
    "load_model": "models.load", "load_pair": "models.load", "WhisperPair": "models.pair", "IncompatiblePair": "models.pair",
    "transcribe": "longform.pipeline", "Transcript": "longform.transcript", "Failure": "longform.transcript", "Segment": "longform.segments",
    "render": "outputs.writers", "write_outputs": "outputs.writers", "SubtitleOptions": "options",
    "run_bench": "bench.harness",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'whisper_spec' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_PUBLIC[name]}", __name__), name)
