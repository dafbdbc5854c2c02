"""whisper-spec: Whisper speculative decoding with output identical to the main model's."""

from .audio import AudioError, load_audio, log_mel_spectrogram
from .decoding import DecodingOptions, DecodingStats, decode_windows
from .loader import IncompatiblePair, WhisperPair, load_model, load_pair
from .transcribe import Failure, Segment, Transcript, transcribe

__all__ = [
    "AudioError", "DecodingOptions", "DecodingStats", "Failure", "IncompatiblePair", "Segment", "Transcript",
    "WhisperPair", "decode_windows", "load_audio", "load_model", "load_pair", "log_mel_spectrogram", "transcribe",
]
__version__ = "0.1.0"
