"""Sounds that are not speech, made from numbers, and podcast-style recordings of real speech with
them: what a transcript must leave empty (music, pauses, noise) beside what it must transcribe; and
recordings whose language changes with every utterance.

Music is chords, a melody and drums (a kick, a snare, hi-hats) at a tempo, each note an enveloped
sum of harmonics; noise is a bed of brown noise or a crowd-like band of filtered noise. Everything is
drawn from a seeded generator, so a recording is the same on every machine."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..speech.audio import SAMPLE_RATE

# a I-V-vi-IV progression in C major as note numbers (MIDI), and a pentatonic scale for the melody
CHORDS = [(60, 64, 67), (55, 59, 62), (57, 60, 64), (53, 57, 60)]
MELODY_SCALE = (72, 74, 76, 79, 81, 84)


def _hz(note: int) -> float:
    return 440.0 * 2 ** ((note - 69) / 12)


def _note(frequency: float, seconds: float, rng: np.random.Generator, harmonics: int = 4, decay: float = 3.0) -> np.ndarray:
    """One enveloped tone: harmonics falling off as 1/k, a 10 ms attack and an exponential decay."""
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    tone = sum(np.sin(2 * np.pi * frequency * k * t + rng.uniform(0, 2 * np.pi)) / k for k in range(1, harmonics + 1))
    envelope = np.minimum(t / 0.01, 1.0) * np.exp(-decay * t)
    return (tone * envelope).astype(np.float32)


def _kick() -> np.ndarray:
    t = np.arange(int(0.25 * SAMPLE_RATE)) / SAMPLE_RATE
    frequency = 50 + 100 * np.exp(-30 * t)  # a falling pitch
    return (np.sin(2 * np.pi * np.cumsum(frequency) / SAMPLE_RATE) * np.exp(-12 * t)).astype(np.float32)


def _noise_burst(rng: np.random.Generator, seconds: float, decay: float, bright: bool) -> np.ndarray:
    n = int(seconds * SAMPLE_RATE)
    noise = rng.standard_normal(n).astype(np.float32)
    if bright:  # hi-hat: the difference of neighbours keeps the high band
        noise = np.diff(noise, prepend=0.0)
    return noise * np.exp(-decay * np.arange(n) / SAMPLE_RATE).astype(np.float32)


def music(seconds: float, seed: int = 0, bpm: float = 100.0, level_dbfs: float = -20.0) -> np.ndarray:
    """Chords, a melody and drums for this many seconds, at an RMS level of level_dbfs."""
    rng = np.random.default_rng(seed)
    n = int(seconds * SAMPLE_RATE)
    out = np.zeros(n + SAMPLE_RATE, np.float32)  # room for the last notes' tails
    beat = 60.0 / bpm

    def add(sound: np.ndarray, at: float, gain: float) -> None:
        start = int(at * SAMPLE_RATE)
        if start < n:
            end = min(start + len(sound), len(out))
            out[start:end] += gain * sound[: end - start]

    for bar, at in enumerate(np.arange(0.0, seconds, 4 * beat)):
        for note in CHORDS[bar % len(CHORDS)]:
            add(_note(_hz(note), 4 * beat, rng, harmonics=3, decay=0.6), at, 0.12)
        add(_note(_hz(CHORDS[bar % len(CHORDS)][0] - 24), 4 * beat, rng, harmonics=2, decay=0.8), at, 0.25)  # bass
        for step in range(8):  # eighth notes: kick on 1 and 3, snare on 2 and 4, hats on every eighth
            t = at + step * beat / 2
            if step % 4 == 0:
                add(_kick(), t, 0.6)
            if step % 4 == 2:
                add(_noise_burst(rng, 0.2, 18.0, bright=False), t, 0.25)
            add(_noise_burst(rng, 0.05, 60.0, bright=True), t, 0.08)
            if rng.random() < 0.7:
                add(_note(_hz(int(rng.choice(MELODY_SCALE))), beat / 2, rng, harmonics=5, decay=4.0), t, 0.2)
    out = out[:n]
    fade = min(n // 4, int(0.5 * SAMPLE_RATE))  # fades in and out, as a jingle does
    if fade:
        ramp = np.linspace(0.0, 1.0, fade, dtype=np.float32)
        out[:fade] *= ramp
        out[n - fade :] *= ramp[::-1]
    return _at_level(out, level_dbfs)


def noise(seconds: float, seed: int = 0, kind: str = "brown", level_dbfs: float = -35.0) -> np.ndarray:
    """A noise bed: "brown" (a rumble, as room tone or traffic) or "crowd" (noise in the voice band,
    a murmur or applause-like hiss)."""
    rng = np.random.default_rng(seed)
    n = int(seconds * SAMPLE_RATE)
    white = rng.standard_normal(n).astype(np.float32)
    if kind == "brown":
        sound = np.cumsum(white)
        sound -= np.convolve(sound, np.ones(1601, np.float32) / 1601, mode="same")  # no drift
    elif kind == "crowd":
        band = np.convolve(white, np.ones(4, np.float32) / 4, mode="same")
        sound = band - np.convolve(band, np.ones(40, np.float32) / 40, mode="same")
        sound *= 1.0 + 0.5 * np.sin(2 * np.pi * 3.0 * np.arange(n) / SAMPLE_RATE)  # swells like clapping
    else:
        raise ValueError(f"noise kind {kind!r}: brown or crowd")
    return _at_level(sound.astype(np.float32), level_dbfs)


def _at_level(sound: np.ndarray, level_dbfs: float) -> np.ndarray:
    rms = float(np.sqrt(np.mean(sound**2))) if len(sound) else 0.0
    return sound * (10 ** (level_dbfs / 20) / rms) if rms > 0 else sound


@dataclass(frozen=True)
class Spoken:
    """An utterance placed in a made recording: where its speech lies (seconds) and what it says."""

    start: float
    end: float
    text: str
    language: str


# what comes between utterances, in turn: music, a pause of room tone, noise, a short pause
GAPS = (("music", 8.0), ("pause", 3.0), ("noise", 4.0), ("pause", 1.0), ("music", 5.0), ("pause", 2.5))


def podcast(utterances: list[tuple[np.ndarray, str, str]], seed: int = 0, intro: float = 6.0, outro: float = 6.0
            ) -> tuple[np.ndarray, list[Spoken]]:
    """A podcast-style recording of these utterances (16 kHz audio, its reference text, its language):
    a music intro, then each utterance with music, pauses (room tone at -60 dBFS) or noise between them
    in the turn of GAPS, and a music outro. Returns the audio and where each utterance was put."""
    rng = np.random.default_rng(seed)

    def room_tone(seconds: float) -> np.ndarray:
        return noise(seconds, seed=int(rng.integers(1 << 30)), kind="brown", level_dbfs=-60.0)

    parts, spoken, at = [music(intro, seed=int(rng.integers(1 << 30)))], [], intro
    for index, (audio, text, language) in enumerate(utterances):
        parts.append(room_tone(0.3))  # a breath between the jingle and the voice
        at += 0.3
        spoken.append(Spoken(at, at + len(audio) / SAMPLE_RATE, text, language))
        parts.append(audio.astype(np.float32))
        at += len(audio) / SAMPLE_RATE
        kind, seconds = GAPS[index % len(GAPS)] if index < len(utterances) - 1 else ("music", outro)
        gap = (music(seconds, seed=int(rng.integers(1 << 30))) if kind == "music"
               else noise(seconds, seed=int(rng.integers(1 << 30)), kind="crowd") if kind == "noise"
               else room_tone(seconds))
        parts += [room_tone(0.3), gap]
        at += 0.3 + seconds
    return np.concatenate(parts), spoken


def words_outside(words: list[tuple[float, float]], spoken: list[Spoken], margin: float = 0.5) -> int:
    """How many timed words (start, end in seconds) lie wholly outside every utterance's span widened by
    margin: words the recording does not say (written over music, pauses or noise)."""
    return sum(not any(s.start - margin < (a + b) / 2 < s.end + margin for s in spoken) for a, b in words)


def language_switching(utterances: list[tuple[np.ndarray, str, str]], seed: int = 0, pause: float = 1.0
                       ) -> tuple[np.ndarray, list[Spoken]]:
    """A recording whose language changes with every utterance (16 kHz audio, its reference text, its
    language), as in a multilingual meeting: the utterances one after another, pause seconds of room
    tone (-60 dBFS) between them. Returns the audio and where each utterance was put."""
    parts, spoken, at = [], [], 0.0
    for index, (audio, text, language) in enumerate(utterances):
        if index:
            parts.append(noise(pause, seed=seed * 1000 + index, kind="brown", level_dbfs=-60.0))
            at += pause
        spoken.append(Spoken(at, at + len(audio) / SAMPLE_RATE, text, language))
        parts.append(audio.astype(np.float32))
        at += len(audio) / SAMPLE_RATE
    return np.concatenate(parts), spoken
