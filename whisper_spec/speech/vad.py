"""Audio -> where people speak (Silero VAD) -> chunks of at most one window, cut at the longest pauses.

A long recording is decoded as chunks of its speech: each chunk is the audio from the start of a run
of consecutive speech regions (each padded into the pauses around it) to the end of its last, at
most one window long, so the pauses between chunks, before the first and after the last are not
decoded. Chunks are few (every chunk costs a whole encoder pass) and, among the fewest, cut where
the shortest pause cut at is longest.
"""

from __future__ import annotations

import bisect
import functools
import importlib.util
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ..options import VadOptions
from .audio import SAMPLE_RATE, SILENCE_PEAK, peak

VAD_FRAME = 512  # samples Silero VAD scores at a time at 16 kHz
VAD_CONTEXT = 64  # samples of the frame before it that a frame's score also reads


class SileroVad(torch.nn.Module):
    """Silero VAD at 16 kHz on the silero-vad package's weights (those of its default model), every
    frame's convolutions in one batch and the LSTM over the frames in one call, where the package's
    model takes a call per frame (docs/decisions.md, "Long audio: VAD chunks")."""

    def __init__(self):
        super().__init__()
        conv = torch.nn.Conv1d
        self.stft_conv = conv(1, 258, kernel_size=256, stride=128, bias=False)  # a learned STFT: 129 bins, re and im
        self.conv1, self.conv2 = conv(129, 128, 3, padding=1), conv(128, 64, 3, stride=2, padding=1)
        self.conv3, self.conv4 = conv(64, 64, 3, stride=2, padding=1), conv(64, 128, 3, padding=1)
        self.lstm = torch.nn.LSTM(128, 128)
        self.final_conv = conv(128, 1, 1)

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        """[samples] at 16 kHz -> [frames] speech probabilities, one per VAD_FRAME samples (the last zero-padded)."""
        audio = F.pad(audio, (VAD_CONTEXT, -len(audio) % VAD_FRAME))
        frames = audio.unfold(0, VAD_FRAME + VAD_CONTEXT, VAD_FRAME)  # each after the context before it
        x = self.stft_conv(F.pad(frames.unsqueeze(1), (0, VAD_CONTEXT), mode="reflect"))
        x = (x[:, :129].square() + x[:, 129:].square()).sqrt()
        for layer in (self.conv1, self.conv2, self.conv3, self.conv4):
            x = layer(x).relu()
        hidden, _ = self.lstm(x.squeeze(-1).unsqueeze(1))  # [frames, 1, 128]: the frames as one sequence
        return self.final_conv(hidden.squeeze(1).relu().unsqueeze(-1)).sigmoid().flatten()


def _package_file(name: str) -> Path:
    """A data file of the silero-vad package, found without importing it (its import sets torch to one thread)."""
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("silero-vad is not installed (pip install silero-vad): voice activity needs its weights")
    return Path(spec.submodule_search_locations[0]) / "data" / name


def _packaged_model() -> SileroVad:
    with warnings.catch_warnings():  # torch.jit.load's deprecation notice: the package ships TorchScript
        warnings.simplefilter("ignore", DeprecationWarning)
        packaged = torch.jit.load(str(_package_file("silero_vad.jit")), map_location="cpu")._model.state_dict()
    names = {"stft.forward_basis_buffer": "stft_conv.weight", "decoder.decoder.2.weight": "final_conv.weight",
             "decoder.decoder.2.bias": "final_conv.bias"}
    names |= {f"encoder.{i}.reparam_conv.{kind}": f"conv{i + 1}.{kind}" for i in range(4) for kind in ("weight", "bias")}
    names |= {f"decoder.rnn.{kind}": f"lstm.{kind}_l0" for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")}
    model = SileroVad().eval()
    model.load_state_dict({ours: packaged[theirs] for theirs, ours in names.items()})
    return model


@functools.lru_cache(maxsize=1)
def _segmentation():
    """silero-vad's own rules from frame probabilities to stretches of speech."""
    threads = torch.get_num_threads()
    from silero_vad.utils_vad import get_speech_timestamps_from_probs

    torch.set_num_threads(threads)  # the package's import sets one thread for the whole process: put it back
    return get_speech_timestamps_from_probs


# Silero carries its state along a whole recording, and after loud speech it misses a quiet speaker
# (decisions, "Long audio: VAD chunks"): each stretch of at least RELISTEN_SECONDS where it heard
# none is heard again on its own, its loudest sample brought up to RELISTEN_PEAK by at most RELISTEN_GAIN
RELISTEN_SECONDS, RELISTEN_PEAK, RELISTEN_GAIN = 1.0, 0.3, 100.0


class SpeechDetector:
    """Where a recording's speech is: Silero VAD's network on the silero-vad package's weights and
    the package's rules from frame probabilities to speech. Loaded where first needed by whoever
    keeps it (a loaded pair keeps one, WhisperPair.speech_detector), so no module holds a model."""

    def __init__(self):
        self.model = _packaged_model()

    def probabilities(self, audio: np.ndarray) -> list[float]:
        """Silero's speech probability of each 32 ms frame of 16 kHz audio (the last one zero-padded)."""
        if not len(audio):
            return []
        with torch.inference_mode():
            return self.model(torch.from_numpy(np.ascontiguousarray(audio, dtype=np.float32))).tolist()

    def regions(self, audio: np.ndarray, options: VadOptions, longest: float) -> list[tuple[int, int]]:
        """(start, end) samples of the speech in audio, none longer than `longest` seconds once padded
        (longer speech is split at its longest short pause, as Silero does)."""
        found = self._heard(audio, options, longest)
        again = []
        for start, end in zip([0] + [e for _, e in found], [s for s, _ in found] + [len(audio)]):
            if end - start < RELISTEN_SECONDS * SAMPLE_RATE:
                continue
            part = audio[start:end]
            loudest = peak(part)
            if loudest >= SILENCE_PEAK:
                gain = min(max(RELISTEN_PEAK / loudest, 1.0), RELISTEN_GAIN)
                again += [(start + s, start + e) for s, e in self._heard(part * gain, options, longest)]
        return sorted(found + again)

    def _heard(self, audio: np.ndarray, options: VadOptions, longest: float) -> list[tuple[int, int]]:
        """Silero's speech in audio, heard from its start with a fresh state."""
        found = _segmentation()(
            self.probabilities(audio), sampling_rate=SAMPLE_RATE, threshold=options.threshold,
            min_speech_duration_ms=round(options.min_speech * 1000),
            min_silence_duration_ms=round(options.min_silence * 1000),
            max_speech_duration_s=max(longest - 2 * options.speech_pad, VAD_FRAME * 3 / SAMPLE_RATE),
            speech_pad_ms=0, audio_length_samples=len(audio))
        return [(int(s["start"]), int(s["end"])) for s in found]


def padded(regions: list[tuple[int, int]], pad: float, n_samples: int) -> list[tuple[int, int]]:
    """Regions each widened by pad seconds into the pauses around them, by at most half a pause."""
    pad = round(pad * SAMPLE_RATE)
    widened = []
    for i, (start, end) in enumerate(regions):
        before = (start - regions[i - 1][1]) // 2 if i else start
        after = (regions[i + 1][0] - end + 1) // 2 if i + 1 < len(regions) else n_samples - end
        widened.append((start - min(pad, before), end + min(pad, after)))
    return widened


def plan_chunks(regions: list[tuple[int, int]], longest: int) -> list[tuple[int, int]]:
    """Consecutive regions (samples, in order, none longer than longest) grouped into chunks of
    contiguous audio, each from its first region's start to its last one's end, at most `longest`
    samples: the fewest such chunks, and among those the grouping whose shortest pause cut at is
    longest (docs/decisions.md, "Long audio: VAD chunks")."""
    n = len(regions)
    # best[i]: (chunks, -shortest pause cut at) for regions[:i], and where its last chunk starts
    best: list[tuple[tuple[int, float], int]] = [((0, -float("inf")), 0)] + [((n + 1, 0.0), 0)] * n
    for i in range(1, n + 1):
        for j in range(i - 1, -1, -1):
            if j < i - 1 and regions[i - 1][1] - regions[j][0] > longest:
                break
            (count, shortest), _ = best[j]
            pause = regions[j][0] - regions[j - 1][1] if j else float("inf")
            score = (count + 1, max(shortest, -pause))
            if score < best[i][0]:
                best[i] = (score, j)
    chunks, i = [], n
    while i:
        j = best[i][1]
        chunks.append((regions[j][0], regions[i - 1][1]))
        i = j
    return chunks[::-1]


def clamp_to_speech(spans: list[tuple[float, float]], regions: list[tuple[int, int]]) -> list[tuple[float, float]]:
    """Words' (start, end) seconds moved out of the pauses between regions: a start in a pause to
    where the speech after it begins, an end in a pause to where the speech before it ends (both
    within the word's own span, so a word stays a word)."""
    starts = [s / SAMPLE_RATE for s, _ in regions]
    ends = [e / SAMPLE_RATE for _, e in regions]
    clamped = []
    for start, end in spans:
        i = bisect.bisect_right(starts, start) - 1
        if i < 0 or start >= ends[i]:  # in a pause: before region i + 1
            if i + 1 < len(starts) and starts[i + 1] < end:
                start = starts[i + 1]
        j = bisect.bisect_left(ends, end)
        if j >= len(ends) or end <= starts[j]:  # in a pause: after region j - 1
            if j > 0 and ends[j - 1] > start:
                end = ends[j - 1]
        clamped.append((start, end))
    return clamped


def speech_within(regions: list[tuple[int, int]], start: float, end: float) -> float:
    """Samples of regions between start and end (samples)."""
    return sum(max(0, min(b, end) - max(a, start)) for a, b in regions)
