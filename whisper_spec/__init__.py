"""whisper-spec: Whisper speculative decoding with output identical to the main model's."""

from .audio import AudioError, load_audio, log_mel_spectrogram
from .bench import BenchOptions, run_bench
from .decoding import DecodingOptions, DecodingStats, decode_windows
from .distill import DistillOptions
from .loader import IncompatiblePair, WhisperPair, load_model, load_pair
from .transcribe import Failure, Segment, Transcript, transcribe

__all__ = [
    "AudioError", "BenchOptions", "DecodingOptions", "DecodingStats", "DistillOptions", "Failure",
    "IncompatiblePair", "Segment", "Transcript", "WhisperPair", "decode_windows", "load_audio",
    "load_model", "load_pair", "log_mel_spectrogram", "run_bench", "transcribe",
]
__version__ = "0.1.0"
