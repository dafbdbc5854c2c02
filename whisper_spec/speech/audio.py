"""Audio files -> 16 kHz mono float32 -> log-mel features of 30 s windows."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import soundfile
import torch
import torch.nn.functional as F

from ..options import CHUNK_SECONDS

SAMPLE_RATE = 16000
N_FFT = 400
HOP_LENGTH = 160
N_SAMPLES = CHUNK_SECONDS * SAMPLE_RATE  # 480000 samples in a 30 s window
N_FRAMES = N_SAMPLES // HOP_LENGTH  # 3000 mel frames in a window


class AudioError(ValueError):
    """An audio file that cannot be used; the message names the file and the problem."""


# A stretch whose every sample lies below -80 dBFS is digital silence (padding, a muted input): it is
# neither decoded nor listened to for speech. Quieter rooms and noise are judged by Whisper's no-speech
# rule (DecodingOptions).
SILENCE_PEAK = 1e-4


def peak(audio: np.ndarray) -> float:
    """The largest sample magnitude (0 for no samples)."""
    return float(np.abs(audio).max(initial=0.0))


STDIN = "-"  # as a path: the audio piped into the process


def load_audio(path: str | Path) -> np.ndarray:
    """Decode a file (or STDIN) to 16 kHz mono float32, resampling and downmixing: libsndfile's
    formats (wav, flac, ogg, mp3, ...), else the first audio track of any container ffmpeg reads
    (m4a, mp4, webm, ...)."""
    if str(path) == STDIN:
        return _load_stdin()
    path = Path(path)
    if not path.exists():
        raise AudioError(f"{path}: no such file")
    if path.is_dir():
        raise AudioError(f"{path}: is a folder, not an audio file (whisper-spec batch transcribes folders)")
    if path.stat().st_size == 0:
        raise AudioError(f"{path}: empty file")
    return _decode(path, path)


def _load_stdin() -> np.ndarray:
    """The piped bytes, through a temporary file: containers such as mp4 need to seek."""
    if sys.stdin is None or sys.stdin.isatty():
        raise AudioError(f"{STDIN}: standard input is a terminal; pipe audio into it (ffmpeg ... -f wav - | ...)")
    data = sys.stdin.buffer.read()
    if not data:
        raise AudioError(f"{STDIN}: empty input")
    with tempfile.NamedTemporaryFile(prefix="whisper-spec-stdin-") as file:
        file.write(data)
        file.flush()
        return _decode(Path(file.name), STDIN)


@contextlib.contextmanager
def _native_stderr_muted():
    """What native code writes to the process's stderr, dropped: libsndfile's mp3 decoder (mpg123)
    writes "Note: Illegal Audio-MPEG-Header ..." lines there for a damaged or mislabelled file,
    around the one-line error that names it (and for a playable file with a stray frame)."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no stderr to guard
        yield
        return
    try:
        with open(os.devnull, "wb") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _decode(path: Path, name: str | Path) -> np.ndarray:
    """path's audio; errors name it as name."""
    try:
        with _native_stderr_muted():  # decoding runs on this thread alone: nothing else of ours is dropped
            audio, rate = soundfile.read(str(path), dtype="float32", always_2d=True)
        audio = audio.mean(axis=1)
    except Exception as error:  # libsndfile names the problem but not always the file
        audio, rate = _read_with_ffmpeg(path, error, name), SAMPLE_RATE
    if audio.shape[0] == 0:
        raise AudioError(f"{name}: no audio samples")
    if rate != SAMPLE_RATE:
        audio = _resample(audio, rate)
    if not np.isfinite(audio).all():
        raise AudioError(f"{name}: audio contains NaN or infinite samples")
    return np.ascontiguousarray(audio, dtype=np.float32)


def _resample(audio: np.ndarray, rate: int) -> np.ndarray:
    """To 16 kHz: librosa.resample's default (soxr, high quality, the length rounded up), without the
    two and a half seconds its first call spends importing librosa's core."""
    import soxr

    out = soxr.resample(audio, rate, SAMPLE_RATE, quality="HQ")
    length = -(-len(audio) * SAMPLE_RATE // rate)
    return np.pad(out, (0, max(length - len(out), 0)))[:length]


def _read_with_ffmpeg(path: Path, soundfile_error: Exception, name: str | Path) -> np.ndarray:
    """The first audio track of a container libsndfile does not read (m4a, mp4, webm, ...), through
    PyAV, resampled to 16 kHz mono float32 by ffmpeg."""
    import av  # only these formats need it

    try:
        with av.open(str(path)) as container:
            if not container.streams.audio:
                raise AudioError(f"{name}: no audio track")
            resampler = av.AudioResampler(format="flt", layout="mono", rate=SAMPLE_RATE)
            chunks = [out.to_ndarray().reshape(-1) for frame in container.decode(container.streams.audio[0])
                      for out in resampler.resample(frame)]
            chunks += [out.to_ndarray().reshape(-1) for out in resampler.resample(None)]
    except AudioError:
        raise
    except Exception as error:  # neither decoder reads it: libsndfile's reason, unless ffmpeg found a container
        reason = soundfile_error if isinstance(error, av.error.InvalidDataError) else error
        raise AudioError(f"{name}: cannot decode audio ({_reason(reason, path, name)})") from None
    if not chunks:  # a stream ffmpeg guessed at that holds nothing it can decode
        raise AudioError(f"{name}: cannot decode audio ({_reason(soundfile_error, path, name)})")
    return np.concatenate(chunks)


def _reason(error: Exception, path: Path, name: str | Path) -> str:
    """A decoder's reason in one line, naming the file as the user did."""
    text = str(error).strip().splitlines()
    reason = text[0].replace(str(path), str(name)) if text else type(error).__name__
    # libsndfile's words for a file its mp3 decoder gives up on, though the file is there and regular
    if "does not exist or is not a regular file" in reason:
        return "not audio in a format libsndfile or ffmpeg reads, or damaged"
    return reason


# Slaney's mel scale: linear (this many Hz a mel) below the knee, logarithmic above it
_MEL_LINEAR_STEP, _MEL_KNEE_HZ, _MEL_LOG_STEP = 200.0 / 3, 1000.0, np.log(6.4) / 27.0


def _hz_to_mel(hz: np.ndarray) -> np.ndarray:
    mel = hz / _MEL_LINEAR_STEP
    above = hz >= _MEL_KNEE_HZ
    return np.where(above, _MEL_KNEE_HZ / _MEL_LINEAR_STEP + np.log(np.maximum(hz, 1e-10) / _MEL_KNEE_HZ)
                    / _MEL_LOG_STEP, mel)


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    knee = _MEL_KNEE_HZ / _MEL_LINEAR_STEP
    return np.where(mel >= knee, _MEL_KNEE_HZ * np.exp(_MEL_LOG_STEP * (mel - knee)), _MEL_LINEAR_STEP * mel)


@functools.lru_cache(maxsize=None)
def mel_filters(n_mels: int) -> np.ndarray:
    """Slaney-normalised mel filterbank [n_mels, N_FFT // 2 + 1], as openai/whisper and Hugging Face
    use (librosa's `filters.mel` defaults, which a test compares it with), computed here because
    importing librosa takes scipy.signal with it: two seconds of every start. Read-only: one constant
    array per size (a table, not a tensor on some device: no module-level store holds tensors)."""
    fft_hz = np.fft.rfftfreq(N_FFT, 1.0 / SAMPLE_RATE)
    edges = _mel_to_hz(np.linspace(_hz_to_mel(np.array(0.0)), _hz_to_mel(np.array(SAMPLE_RATE / 2)), n_mels + 2))
    ramps = edges[:, None] - fft_hz[None, :]
    widths = np.diff(edges)
    weights = np.zeros((n_mels, len(fft_hz)), dtype=np.float32)
    for i in range(n_mels):
        weights[i] = np.maximum(0, np.minimum(-ramps[i] / widths[i], ramps[i + 2] / widths[i + 1]))
    weights *= (2.0 / (edges[2:] - edges[:-2]))[:, None]  # equal area per filter
    weights.setflags(write=False)
    return weights


def log_mel_spectrogram(windows: torch.Tensor, n_mels: int) -> torch.Tensor:
    """windows: [batch, N_SAMPLES] zero-padded audio -> [batch, n_mels, N_FRAMES] features.

    Each window is normalised on its own (dynamic range of 8 in log10 below its maximum), as
    Hugging Face's WhisperFeatureExtractor does for a batch of 30 s inputs.
    """
    window = torch.hann_window(N_FFT, device=windows.device)
    stft = torch.stft(windows.float(), N_FFT, HOP_LENGTH, window=window, return_complex=True)
    power = stft[..., :-1].abs() ** 2
    mel = torch.tensor(mel_filters(n_mels), device=windows.device) @ power
    log_spec = mel.clamp(min=1e-10).log10()
    log_spec = torch.maximum(log_spec, log_spec.amax(dim=(-2, -1), keepdim=True) - 8.0)
    return (log_spec + 4.0) / 4.0


def signal_frames(mel: torch.Tensor) -> torch.Tensor:
    """Per row of [batch, n_mels, frames] features: the frames up to the end of the audio. The
    zero padding after it sits at the row's floor value in every band; audio, even silence from
    a microphone, does not."""
    above_floor = (mel > mel.amin(dim=(1, 2), keepdim=True)).any(dim=1)
    last = above_floor.shape[1] - above_floor.flip(1).int().argmax(dim=1)
    return torch.where(above_floor.any(dim=1), last, 0)


def pad_or_trim(audio: torch.Tensor, length: int = N_SAMPLES) -> torch.Tensor:
    if audio.shape[-1] >= length:
        return audio[..., :length]
    return F.pad(audio, (0, length - audio.shape[-1]))


def batch_features(audio: list[np.ndarray], n_mels: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """Clips of at most one window each -> [batch, n_mels, N_FRAMES] features, each clip padded to 30 s."""
    windows = torch.stack([pad_or_trim(torch.from_numpy(np.asarray(a))) for a in audio]).to(device)
    return log_mel_spectrogram(windows, n_mels)
