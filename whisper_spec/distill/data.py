"""The training data: recordings (single files, joined files, perturbed copies) and the teacher
cache of encoder outputs, pseudo-labels and top-k logits per 30 s window."""

from __future__ import annotations

import functools
import hashlib
import json
import random
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from ..decode.decoding import decode_encoded
from ..decode.encoding import Encoded
from ..jobs.inputs import Job, audio_seconds
from ..models.attention import CrossStates, DecoderCaches
from ..models.pair import Whisper, WhisperPair
from ..models.sources import cache_dir
from ..options import LONG_RECORDING_SECONDS, DecodingOptions, DistillOptions
from ..speech.audio import N_SAMPLES, SAMPLE_RATE, AudioError, batch_features, load_audio

CACHE_VERSION = 1  # of the window files' contents


def _recording_key(parts: tuple[Job, ...], digests: dict[Path, bytes]) -> str:
    """By content, not path or time stamp: a copied or re-synced data set keeps its teacher labels.
    digests: each file's, computed once however many recordings it is part of."""
    key = hashlib.sha1()
    for job in parts:
        if job.path not in digests:
            digests[job.path] = hashlib.sha1(job.path.read_bytes()).digest()
        key.update(digests[job.path])
        key.update(f":{job.language}".encode())  # a forced language changes the labels
    return key.hexdigest()[:20]


@dataclass(frozen=True)
class Recording:
    label: str  # the file, or the joined files
    parts: tuple[Job, ...]
    held_out: bool
    copy: int = 0  # 0: the audio as it is; n > 0: its n-th perturbed copy
    span: tuple[float, float] = (0.0, 1.0)  # the part of the audio used, as fractions of its length
    shift: float = 0.0  # seconds into the span where its first window starts (another cut of the audio)

    def key(self, content: str) -> str:
        """Its windows' cache key, from the content key of its parts."""
        if self.span != (0.0, 1.0) or self.shift:
            content = f"{content}_{self.span[0]:g}_{self.span[1]:g}_{self.shift:g}"
        return content


def is_long(job: Job) -> bool:
    return _is_long_file(str(job.path))


@functools.lru_cache(maxsize=None)
def _is_long_file(path: str) -> bool:
    # asked while splitting and again while planning: one header read per file
    return audio_seconds(Path(path)) >= LONG_RECORDING_SECONDS


def perturb(audio: np.ndarray, seed: int, copy: int, key: str) -> np.ndarray:
    """A perturbed copy of a recording (key: its content's), the same for the same seed and copy:
    speed changed by up to 10% (tempo and pitch, as Kaldi's speed perturbation: other voices) and
    white noise at 10-30 dB SNR. The teacher labels the copy, so the assistant learns what the main
    model writes for audio less clean than the training set's."""
    import librosa  # slow to import; only augmentation needs it

    rng = np.random.default_rng([seed, copy, int(key[:8], 16)])
    speed = rng.uniform(0.9, 1.1)
    audio = librosa.resample(audio, orig_sr=round(SAMPLE_RATE * speed), target_sr=SAMPLE_RATE)
    noise = rng.standard_normal(len(audio)).astype(np.float32)
    snr_db = rng.uniform(10, 30)
    gain = np.sqrt(np.mean(audio**2) / 10 ** (snr_db / 10)) if len(audio) else 0.0
    return (audio + gain * noise).astype(np.float32)


def plan_recordings(jobs: list[Job], held_out: set[str], join: int, seed: int, augment: int = 0, *,
                    held_out_fraction: float = 0.0, shifts: int = 1) -> list[Recording]:
    """Every file on its own; with join, also recordings of `join` files end to end. A short file is
    one 30 s window padded with silence, but long-form transcription decodes full windows that cut
    speech at both edges: joined recordings give the assistant those. Files are joined only with
    files of the same language and the same side of the held-out split, in a seeded order.
    held_out: the short files held out whole. A long file (is_long) is never joined: its last
    held_out_fraction is held out, the rest is trained on, cut into windows `shifts` ways (starting
    0, 30/shifts, ... s in) so that the same speech falls at other places of a window. With augment,
    every training recording (never a held-out one) also comes as that many perturbed copies."""
    recordings, short = [], []
    for job in jobs:
        if not is_long(job):
            recordings.append(Recording(str(job.path), (job,), str(job.path) in held_out))
            short.append(job)
            continue
        cut = 1.0 - held_out_fraction
        recordings += [Recording(str(job.path) + (f"@{shift:g}s" if shift else ""), (job,), False, span=(0.0, cut),
                                 shift=shift) for shift in (n * N_SAMPLES / SAMPLE_RATE / shifts for n in range(shifts))]
        if held_out_fraction:
            recordings.append(Recording(f"{job.path}#end", (job,), True, span=(cut, 1.0)))
    groups: dict[tuple, list[Job]] = {}
    for job in short if join else []:
        groups.setdefault((str(job.path) in held_out, job.language), []).append(job)
    for (held, _), members in groups.items():
        random.Random(seed).shuffle(members)
        for first in range(0, len(members) - join + 1, join):
            parts = tuple(members[first : first + join])
            recordings.append(Recording(f"joined:{parts[0].path}+{join - 1}", parts, held))
    return recordings + [replace(recording, label=f"{recording.label}#{copy}", copy=copy)
                         for copy in range(1, augment + 1) for recording in recordings if not recording.held_out]


def _main_identity(main: Whisper) -> dict:
    return {"cache_version": CACHE_VERSION, "model": str(main.path), "dims": asdict(main.dims),
            "special": main.special.fingerprint()}


def default_cache(main: Whisper) -> Path:
    """Per main model: the teacher cache is reused by every distillation from the same audio."""
    digest = hashlib.sha1(json.dumps(_main_identity(main), sort_keys=True).encode()).hexdigest()[:12]
    return cache_dir() / "distill" / digest


@torch.inference_mode()
def _teacher_top_k(main: Whisper, cross: CrossStates, sequences: list[list[int]], starts: list[int], top_k: int):
    """The main model's top-k logits at every predicted position of each sequence (teacher forcing)."""
    device = main.decoder.token_embedding.weight.device
    width = max(map(len, sequences))
    tokens = torch.tensor([s + [main.special.eot] * (width - len(s)) for s in sequences], device=device)
    positions = torch.arange(width, device=device).expand_as(tokens)
    logits = main.decoder(tokens, positions, DecoderCaches(cross))  # whole sequences at once: no self-attention caches
    out = []
    for row, (sequence, start) in enumerate(zip(sequences, starts)):
        values, ids = logits[row, start : len(sequence) - 1].topk(top_k, dim=-1)
        out.append((ids.to(torch.int32).cpu(), values.half().cpu()))
    return out


def _label_batch(main_pair: WhisperPair, batch: list[tuple[Path, Recording, np.ndarray]], top_k: int,
                 tasks: tuple[str, ...]) -> None:
    """A batch of windows through the teacher: its encoder states, for each task its greedy texts with
    and without timestamps and its top-k logits along them, each window saved to its file."""
    main = main_pair.main
    mel = batch_features([w[2] for w in batch], main.dims.n_mels, main_pair.device)
    languages = [recording.parts[0].language for _, recording, _ in batch]
    examples = [[] for _ in batch]
    with torch.inference_mode():
        states = main.encoder(mel)
        encoded = Encoded(main.decoder.cross_states(states))
    for task in tasks:
        for timestamps in (False, True):
            # the greedy texts assistants draft
            options = DecodingOptions(task=task, timestamps=timestamps, temperature=0.0, speculation="off")
            results, _ = decode_encoded(main_pair, encoded, options, languages=languages)
            languages = [r.language for r in results]
            prompts = [main.special.prompt(r.language, task, timestamps) for r in results]
            sequences = [p + r.tokens + [main.special.eot] for p, r in zip(prompts, results)]
            starts = [len(p) - 1 for p in prompts]
            for row, (ids, values) in enumerate(_teacher_top_k(main, encoded.main, sequences, starts, top_k)):
                examples[row].append({"task": task, "timestamps": timestamps, "tokens": sequences[row],
                                      "start": starts[row], "top_ids": ids, "top_logits": values})
    states = states.half().cpu()
    for row, (file, recording, _) in enumerate(batch):
        partial = file.with_suffix(".partial")
        torch.save({"source": recording.label, "language": languages[row], "encoder": states[row].clone(),
                    "examples": examples[row]}, partial)
        partial.replace(file)


def prepare_teacher_cache(main_pair: WhisperPair, recordings: list[Recording], cache: Path, *, top_k: int,
                          seed: int = 0, batch_size: int = 4, tasks: tuple[str, ...] = DistillOptions.tasks
                          ) -> list[tuple[Path, Recording]]:
    """Encoder outputs, pseudo-labels (for each task, with and without timestamps) and teacher top-k
    logits for every 30 s window of the recordings, one file per window; windows already cached are
    skipped. seed: of the perturbed copies."""
    main = main_pair.main
    cache.mkdir(parents=True, exist_ok=True)
    identity_file = cache / "main.json"
    identity = _main_identity(main)
    if identity_file.is_file() and json.loads(identity_file.read_text()) != identity:
        raise ValueError(f"{cache}: cached for another main model or cache version; use another --cache-dir")
    identity_file.write_text(json.dumps(identity, indent=2) + "\n")

    windows, files = [], []
    # a window's file holds the labels of these tasks (transcription alone: named as before tasks were chosen)
    labelled = "" if tasks == ("transcribe",) else "-" + "+".join(tasks)
    digests: dict[Path, bytes] = {}
    unreadable: set[Path] = set()  # said once, though the file may be part of several recordings
    # the last recording's decoded files: a long file's recordings (its cuts, its held-out end) come
    # one after another, and decoding a compressed file is most of the time of a cached run
    last: dict[Path, np.ndarray] = {}
    for recording in tqdm(recordings, desc="reading audio", unit="recording", leave=False):
        if unreadable.intersection(job.path for job in recording.parts):
            continue
        pieces = []
        for job in recording.parts:
            try:
                pieces.append(last[job.path] if job.path in last else load_audio(job.path))
            except AudioError as error:
                print(f"skipped: {error}", file=sys.stderr)
                unreadable.add(job.path)
                break
        if len(pieces) < len(recording.parts):
            continue
        last = {job.path: piece for job, piece in zip(recording.parts, pieces)}
        audio = np.concatenate(pieces)
        key = _recording_key(recording.parts, digests)
        if recording.copy:
            audio = perturb(audio, seed, recording.copy, key)  # the whole recording, then its span
            key = f"{key}-p{seed}.{recording.copy}"
        key = recording.key(key)
        start, end = (round(fraction * len(audio)) for fraction in recording.span)
        audio = audio[start + round(recording.shift * SAMPLE_RATE) : end]
        for offset in range(0, len(audio), N_SAMPLES):
            file = cache / "windows" / f"{key}-{offset // N_SAMPLES}{labelled}.pt"
            files.append((file, recording))
            if not file.is_file():
                windows.append((file, recording, audio[offset : offset + N_SAMPLES]))
    (cache / "windows").mkdir(exist_ok=True)

    for first in tqdm(range(0, len(windows), batch_size), desc="teacher labels", unit="batch"):
        _label_batch(main_pair, windows[first : first + batch_size], top_k, tasks)
    return files


@dataclass
class Example:
    window: int
    language: str  # the window's, as the main model detected it (or as given)
    tokens: torch.Tensor  # prompt + labels + EOT
    start: int  # first predicting position
    top_ids: torch.Tensor  # [n, k] full-vocabulary ids
    top_logits: torch.Tensor  # [n, k]
    hidden: torch.Tensor | None = None  # [len(tokens), d_model]: the main decoder's, for a draft head (train.teacher_hidden)
    task: str = "transcribe"  # the labels' (windows cached before tasks were chosen: transcription)


def load_cache(files: list[Path], top_k: int):
    encoder, examples, languages = None, [], []
    for index, file in enumerate(files):
        item = torch.load(file, weights_only=True)
        if item["examples"][0]["top_ids"].shape[1] != top_k:
            raise ValueError(f"{file}: cached with another top_k; use another --cache-dir")
        if encoder is None:  # filled in place: a list and a stack would hold every window twice
            encoder = torch.empty((len(files), *item["encoder"].shape), dtype=item["encoder"].dtype)
        encoder[index] = item["encoder"]
        languages.append(item["language"])
        for ex in item["examples"]:
            examples.append(Example(index, item["language"], torch.tensor(ex["tokens"]), ex["start"], ex["top_ids"].long(),
                                     ex["top_logits"].float(), task=ex.get("task", "transcribe")))
    return encoder, examples, languages
