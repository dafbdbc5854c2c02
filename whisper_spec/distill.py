"""Distil a small assistant decoder from a main Whisper model (distil-whisper's recipe, made small).

The assistant cross-attends to the main encoder (never trained, never stored). Its decoder starts
from the main decoder's embedding and a few of its layers spread out (first and last kept), and
learns to match the main model: cross-entropy on the main model's own greedy transcripts
(pseudo-labels, with and without timestamps) plus KL divergence to the main model's token
distributions (its top-k logits). It drafts from a subset of the vocabulary (see
choose_draft_vocab), so its output projection costs a fraction of the main model's.

Shared with the main model and not stored: the token embedding (and so the draft projection's
rows) and the cross-attention key/value projections, kept frozen. Encoder outputs, pseudo-labels
and teacher logits are computed once and cached on disk, so training epochs cost only the
assistant's own layers.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import random
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from tqdm import tqdm

from .audio import N_SAMPLES, SAMPLE_RATE, AudioError, load_audio, log_mel_spectrogram, pad_or_trim
from .batch import Job, collect_jobs
from .decoding import DecodingOptions, decode_encoded
from .loader import ASSISTANT_CONFIG, ASSISTANT_FORMAT, WhisperModel, WhisperPair, output_rows
from .model import Decoder, DraftVocabProjection
from .models import cache_dir

CACHE_VERSION = 1  # of the window files' contents


@dataclass(frozen=True)
class DistillOptions:
    layers: int = 2  # assistant decoder layers
    init_layers: tuple[int, ...] | None = None  # main layers to start from; default: spread, first and last kept
    draft_vocab: int = 16384  # tokens the assistant can draft (timestamps and EOT included)
    steps: int = 1000
    batch_size: int = 16
    learning_rate: float = 3e-4
    warmup_steps: int = 50
    ce_weight: float = 0.8  # distil-whisper's weights and temperature
    kl_weight: float = 1.0
    kl_temperature: float = 2.0
    top_k: int = 16  # teacher logits kept per position
    join: int = 0  # also train on recordings of this many files end to end (see plan_recordings); 0: none
    augment: int = 0  # perturbed copies of every training recording (see perturb)
    held_out: float = 0.1  # fraction of files kept out of training, for held-out acceptance
    eval_every: int = 100
    checkpoint_every: int = 100
    seed: int = 0

    def __post_init__(self):
        if self.init_layers is not None and len(self.init_layers) != self.layers:
            raise ValueError(f"init_layers names {len(self.init_layers)} layers, layers is {self.layers}")
        if self.layers < 1 or self.steps < 1 or self.batch_size < 1 or not 0 <= self.held_out < 1:
            raise ValueError("layers, steps and batch_size must be >= 1 and held_out in [0, 1)")
        if self.join == 1 or self.join < 0:
            raise ValueError("join must be 0 (no joined recordings) or at least 2 files")
        if self.augment < 0:
            raise ValueError("augment must be >= 0")


def spread_layers(n_main: int, n: int) -> list[int]:
    """n of the main decoder's layers, evenly spread, first and last kept (n = 1: the last)."""
    if not 1 <= n <= n_main:
        raise ValueError(f"an assistant of {n} layers cannot start from a decoder of {n_main}")
    if n == 1:
        return [n_main - 1]
    return sorted({round(i * (n_main - 1) / (n - 1)) for i in range(n)})


# ---------------------------------------------------------------------------- teacher cache


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


def plan_recordings(jobs: list[Job], held_out: set[str], join: int, seed: int, augment: int = 0) -> list[Recording]:
    """Every file on its own; with join, also recordings of `join` files end to end. A short file is
    one 30 s window padded with silence, but long-form transcription decodes full windows that cut
    speech at both edges: joined recordings give the assistant those. Files are joined only with
    files of the same language and the same side of the held-out split, in a seeded order. With
    augment, every training recording (never a held-out one) also comes as that many perturbed copies."""
    recordings = [Recording(str(job.path), (job,), str(job.path) in held_out) for job in jobs]
    groups: dict[tuple, list[Job]] = {}
    for job in jobs if join else []:
        groups.setdefault((str(job.path) in held_out, job.language), []).append(job)
    for (held, _), members in groups.items():
        random.Random(seed).shuffle(members)
        for first in range(0, len(members) - join + 1, join):
            parts = tuple(members[first : first + join])
            recordings.append(Recording(f"joined:{parts[0].path}+{join - 1}", parts, held))
    return recordings + [replace(recording, label=f"{recording.label}#{copy}", copy=copy)
                         for copy in range(1, augment + 1) for recording in recordings if not recording.held_out]


def _main_identity(main: WhisperModel) -> dict:
    return {"cache_version": CACHE_VERSION, "model": str(main.path), "dims": asdict(main.dims),
            "special": main.special.fingerprint()}


def default_cache(main: WhisperModel) -> Path:
    """Per main model: the teacher cache is reused by every distillation from the same audio."""
    digest = hashlib.sha1(json.dumps(_main_identity(main), sort_keys=True).encode()).hexdigest()[:12]
    return cache_dir() / "distill" / digest


@torch.inference_mode()
def _teacher_top_k(main: WhisperModel, sequences: list[list[int]], starts: list[int], top_k: int):
    """The main model's top-k logits at every predicted position of each sequence (teacher forcing)."""
    device = main.decoder.token_embedding.weight.device
    width = max(map(len, sequences))
    tokens = torch.tensor([s + [main.special.eot] * (width - len(s)) for s in sequences], device=device)
    positions = torch.arange(width, device=device).expand_as(tokens)
    main.decoder.clear_caches()  # whole sequences at once, no decoding state
    logits = main.decoder(tokens, positions)
    out = []
    for row, (sequence, start) in enumerate(zip(sequences, starts)):
        values, ids = logits[row, start : len(sequence) - 1].topk(top_k, dim=-1)
        out.append((ids.to(torch.int32).cpu(), values.half().cpu()))
    return out


def prepare_teacher_cache(main_pair: WhisperPair, recordings: list[Recording], cache: Path, *, top_k: int,
                          seed: int = 0, batch_size: int = 4) -> list[tuple[Path, Recording]]:
    """Encoder outputs, pseudo-labels (with and without timestamps) and teacher top-k logits for
    every 30 s window of the recordings, one file per window; windows already cached are skipped.
    seed: of the perturbed copies."""
    main = main_pair.main
    cache.mkdir(parents=True, exist_ok=True)
    identity_file = cache / "main.json"
    identity = _main_identity(main)
    if identity_file.is_file() and json.loads(identity_file.read_text()) != identity:
        raise ValueError(f"{cache}: cached for another main model or cache version; use another --cache-dir")
    identity_file.write_text(json.dumps(identity, indent=2) + "\n")

    windows, files = [], []
    digests: dict[Path, bytes] = {}
    unreadable: set[Path] = set()  # said once, though the file may be part of several recordings
    for recording in tqdm(recordings, desc="reading audio", unit="recording", leave=False):
        if unreadable.intersection(job.path for job in recording.parts):
            continue
        pieces = []
        for job in recording.parts:
            try:
                pieces.append(load_audio(job.path))
            except AudioError as error:
                print(f"skipped: {error}", file=sys.stderr)
                unreadable.add(job.path)
                break
        if len(pieces) < len(recording.parts):
            continue
        audio = np.concatenate(pieces)
        key = _recording_key(recording.parts, digests)
        if recording.copy:
            audio = perturb(audio, seed, recording.copy, key)
            key = f"{key}-p{seed}.{recording.copy}"
        for offset in range(0, len(audio), N_SAMPLES):
            file = cache / "windows" / f"{key}-{offset // N_SAMPLES}.pt"
            files.append((file, recording))
            if not file.is_file():
                windows.append((file, recording, audio[offset : offset + N_SAMPLES]))
    (cache / "windows").mkdir(exist_ok=True)

    for first in tqdm(range(0, len(windows), batch_size), desc="teacher labels", unit="batch"):
        batch = windows[first : first + batch_size]
        audio = torch.stack([pad_or_trim(torch.from_numpy(w[2])) for w in batch]).to(main_pair.device)
        mel = log_mel_spectrogram(audio, main.dims.n_mels)
        languages = [recording.parts[0].language for _, recording, _ in batch]
        examples = [[] for _ in batch]
        with torch.inference_mode():
            states = main.encoder(mel)
            main.decoder.set_cross(states)
        for timestamps in (False, True):
            options = DecodingOptions(timestamps=timestamps)
            results, _ = decode_encoded(main_pair, len(batch), options, languages=languages, use_assistant=False)
            languages = [r.language for r in results]
            prompts = [main.special.prompt(r.language, "transcribe", timestamps) for r in results]
            sequences = [p + r.tokens + [main.special.eot] for p, r in zip(prompts, results)]
            starts = [len(p) - 1 for p in prompts]
            for row, (ids, values) in enumerate(_teacher_top_k(main, sequences, starts, top_k)):
                examples[row].append({"timestamps": timestamps, "tokens": sequences[row], "start": starts[row],
                                      "top_ids": ids, "top_logits": values})
        states = states.half().cpu()
        for row, (file, recording, _) in enumerate(batch):
            partial = file.with_suffix(".partial")
            torch.save({"source": recording.label, "language": languages[row], "encoder": states[row].clone(),
                        "examples": examples[row]}, partial)
            partial.replace(file)
    return files


# ---------------------------------------------------------------------------- the assistant


def choose_draft_vocab(main: WhisperModel, examples: list[_Example], size: int) -> torch.Tensor:
    """EOT, the timestamps and every token of the training pseudo-labels; then the tokens the main
    model gives the most probability on the training audio (its top-k); then the lowest text ids."""
    special = main.special
    chosen = {special.eot, *range(special.timestamp_begin, main.dims.n_vocab)}
    chosen.update(t for e in examples for t in e.tokens.tolist())
    mass = torch.zeros(main.dims.n_vocab)
    for e in examples:
        mass.index_add_(0, e.top_ids.reshape(-1), torch.softmax(e.top_logits, dim=-1).reshape(-1))
    suppressed = set(special.suppress)
    mass[list(suppressed)] = 0
    order = mass.argsort(descending=True, stable=True)
    fill = order[mass[order] > 0].tolist() + [t for t in range(special.eot) if t not in suppressed]
    for token in fill:
        if len(chosen) >= size:
            break
        chosen.add(token)
    return torch.tensor(sorted(chosen), dtype=torch.long)


def build_student(main: WhisperModel, init_layers: list[int], draft_vocab: torch.Tensor) -> Decoder:
    """An assistant decoder initialised from the main one. What it shares with the main model
    (token embedding, output rows, cross-attention key/value projections) is the main model's own
    frozen modules; the rest is a trainable float32 copy of the chosen layers."""
    dims = replace(main.dims, n_text_layer=len(init_layers))
    student = Decoder(dims)
    student.positional_embedding = torch.nn.Parameter(main.decoder.positional_embedding.detach().float().clone())
    student.ln.load_state_dict({k: v.float() for k, v in main.decoder.ln.state_dict().items()})
    for block, layer in zip(student.blocks, init_layers):
        block.load_state_dict({k: v.float() for k, v in main.decoder.blocks[layer].state_dict().items()})
        block.cross_attn.kv = main.decoder.blocks[layer].cross_attn.kv
    student.token_embedding = main.decoder.token_embedding
    student.cross_source = list(init_layers)
    student.proj_out = DraftVocabProjection(output_rows(main.decoder, draft_vocab), draft_vocab, dims.n_vocab)
    return student


def stored_state(student: Decoder) -> dict[str, torch.Tensor]:
    """What an assistant directory stores: the assistant's own weights, nothing shared."""
    return {
        name: tensor
        for name, tensor in student.state_dict().items()
        if not (name.startswith(("token_embedding.", "proj_out.")) or ".cross_attn.kv." in name)
    }


def save_assistant(student: Decoder, main: WhisperModel, output: Path, meta: dict) -> None:
    output.mkdir(parents=True, exist_ok=True)
    tensors = {name: t.detach().to(torch.float16).contiguous() for name, t in stored_state(student).items()}
    tensors["draft_vocab"] = student.proj_out.token_ids.to(torch.int32).cpu()
    save_file(tensors, output / "model.safetensors")
    config = {
        "format": ASSISTANT_FORMAT,
        "main_model": main.name,
        "main_dims": asdict(main.dims),
        "main_fingerprint": main.special.fingerprint(),
        "layers_from_main": student.cross_source,
        "draft_vocab_size": len(student.proj_out.token_ids),
        "shared_with_main": ["token embedding and output projection rows",
                             "cross-attention key/value projections of layers_from_main"],
        **meta,
    }
    (output / ASSISTANT_CONFIG).write_text(json.dumps(config, indent=2) + "\n")
    (output / "README.md").write_text(model_card(config))


def model_card(config: dict) -> str:
    """The assistant's model card: what it is, how it was made, what it reached while training."""
    training = config.get("training", {})
    recipe, data = training.get("recipe", {}), training.get("training_data", {})
    def rate(name: str, entry: dict = training) -> str:
        return "n/a" if entry.get(name) is None else f"{entry[name]:.3f}"

    joined = training.get("held_out_joined_acceptance") is not None
    log = "\n".join(f"| {e['step']} | {e['loss']:.3f} | {rate('held_out_acceptance', e)} |"
                    + (f" {rate('held_out_joined_acceptance', e)} |" if joined else "") for e in training.get("log", []))
    joined_line = (f" (on the held-out joined recordings' windows {rate('held_out_joined_acceptance_before')}"
                   f" before, {rate('held_out_joined_acceptance')} after)") if joined else ""
    joined_files = (f" and {data.get('joined_recordings')} recordings of {recipe.get('join')} of them joined end to end"
                    " (full 30 s windows, as in long-form transcription; held-out files joined only with each other)"
                    if recipe.get("join") else "")
    joined_files += (f"; {data.get('perturbed_copies')} perturbed copies of the training recordings ({recipe.get('augment')}"
                     " each: speed changed by up to 10%, white noise at 10-30 dB SNR)" if recipe.get("augment") else "")
    return f"""# Distilled assistant for {config['main_model']}

A {len(config['layers_from_main'])}-layer assistant decoder for speculative decoding with `{config['main_model']}`
(whisper-spec format: load it with `load_pair("{config['main_model']}", "<this folder>")` or
`whisper-spec transcribe --model {config['main_model']} --assistant <this folder>`; `whisper-spec export`
writes a standard `WhisperForCausalLM`). Greedy output with it is the main model's own, token for token.

- Initialised from the main decoder's layers {config['layers_from_main']}; it cross-attends to the main
  encoder's output. Shared with the main model and not stored here: {'; '.join(config['shared_with_main'])}.
- Drafts from {config['draft_vocab_size']} tokens of the vocabulary (EOT, timestamps, every pseudo-label
  token, then the tokens the main model puts probability on); the main model still scores all.
- Stored: its own layers, positional embedding and final layer norm, float16.

## Recipe

`{training.get('command')}`

Distil-whisper style: cross-entropy (weight {recipe.get('ce_weight')}) on the main model's greedy
transcripts, with and without timestamps, plus KL divergence (weight {recipe.get('kl_weight')}, temperature
{recipe.get('kl_temperature')}) to its top-{recipe.get('top_k')} logits; AdamW, peak learning rate
{recipe.get('learning_rate')}, {recipe.get('warmup_steps')} warm-up steps then cosine decay,
{recipe.get('steps')} steps of {recipe.get('batch_size')} sequences, seed {recipe.get('seed')}; token
embedding and cross-attention key/value projections frozen (shared).

## Data

`{data.get('source')}`: {data.get('files')} files{joined_files}, {data.get('windows')} windows, languages
{data.get('languages')}; {data.get('held_out_files')} files held out for the acceptance below; {data.get('train_sequences')}
training sequences.

## Training

Teacher labels {training.get('label_seconds')} s (0 when cached), training {training.get('train_seconds')} s
on {training.get('machine')}, torch {training.get('torch')}. Held-out acceptance (teacher-forced: the
assistant's argmax equals the main model's greedy token) {rate('held_out_acceptance_before')} before,
{rate('held_out_acceptance')} after{joined_line}; {rate('held_out_draft_vocab_coverage')} of
held-out tokens are in the draft vocabulary.

| step | loss | held-out acceptance |{" joined recordings |" if joined else ""}
|---:|---:|---:|{"---:|" if joined else ""}
{log}
"""


# ---------------------------------------------------------------------------- training


@dataclass
class _Example:
    window: int
    tokens: torch.Tensor  # prompt + labels + EOT
    start: int  # first predicting position
    top_ids: torch.Tensor  # [n, k] full-vocabulary ids
    top_logits: torch.Tensor  # [n, k]


def _load_cache(files: list[Path], top_k: int):
    encoder, examples, languages = [], [], []
    for index, file in enumerate(files):
        item = torch.load(file, weights_only=True)
        if item["examples"][0]["top_ids"].shape[1] != top_k:
            raise ValueError(f"{file}: cached with another top_k; use another --cache-dir")
        encoder.append(item["encoder"])
        languages.append(item["language"])
        for ex in item["examples"]:
            examples.append(_Example(index, torch.tensor(ex["tokens"]), ex["start"], ex["top_ids"].long(),
                                     ex["top_logits"].float()))
    return torch.stack(encoder), examples, languages


def _split(sources: list[str], held_out: float, seed: int) -> set[str]:
    """Held-out source files, chosen by a seeded shuffle of the sorted file names."""
    names = sorted(set(sources))
    random.Random(seed).shuffle(names)
    return set(names[: round(len(names) * held_out)])


def _collate(examples: list[_Example], cross: list[tuple], to_draft: torch.Tensor, eot: int):
    """Padded tokens, the cross keys/values of each example's window, and per predicted position
    its pseudo-label (in draft ids, -100 where outside the draft vocabulary) and teacher top-k."""
    width = max(len(e.tokens) for e in examples)
    k = examples[0].top_ids.shape[1]
    batch = len(examples)
    tokens = torch.full((batch, width), eot, dtype=torch.long)
    labels = torch.full((batch, width), -100, dtype=torch.long)
    top_ids = torch.zeros(batch, width, k, dtype=torch.long)
    top_logits = torch.full((batch, width, k), float("-inf"))
    for row, e in enumerate(examples):
        n = len(e.tokens)
        tokens[row, :n] = e.tokens
        labels[row, e.start : n - 1] = to_draft[e.tokens[e.start + 1 :]]
        top_ids[row, e.start : n - 1] = to_draft[e.top_ids]
        top_logits[row, e.start : n - 1] = e.top_logits
    top_logits = top_logits.masked_fill(top_ids < 0, float("-inf"))
    windows = torch.tensor([e.window for e in examples])
    cross_kv = [(k[windows].float(), v[windows].float()) for k, v in cross]
    return tokens, labels, top_ids.clamp(min=0), top_logits, cross_kv


def _forward(student: Decoder, tokens: torch.Tensor, cross_kv) -> torch.Tensor:
    for block, kv in zip(student.blocks, cross_kv):
        block.cross_attn.cross_kv = kv
    positions = torch.arange(tokens.shape[1]).expand_as(tokens)
    return student.proj_out.compact(student.features(tokens, positions))


def distillation_loss(logits, labels, top_ids, top_logits, options: DistillOptions) -> torch.Tensor:
    """ce_weight * CE(pseudo-labels) + kl_weight * T^2 * KL(teacher top-k || assistant), per position."""
    mask = labels >= 0
    ce = F.cross_entropy(logits[mask], labels[mask])
    t = options.kl_temperature
    has_teacher = torch.isfinite(top_logits).any(dim=-1)
    teacher = torch.softmax(top_logits[has_teacher] / t, dim=-1)
    student = torch.log_softmax(logits[has_teacher] / t, dim=-1).gather(1, top_ids[has_teacher])
    kl = (teacher * (torch.log(teacher.clamp(min=1e-20)) - student)).sum(dim=-1).mean()
    return options.ce_weight * ce + options.kl_weight * t * t * kl


@torch.no_grad()
def agreement(student: Decoder, examples: list[_Example], cross, to_draft, eot: int, batch_size: int = 32) -> float:
    """Teacher-forced acceptance: how often the assistant's argmax is the main model's greedy token."""
    hits = total = 0
    for first in range(0, len(examples), batch_size):
        tokens, labels, _, _, cross_kv = _collate(examples[first : first + batch_size], cross, to_draft, eot)
        target = torch.full_like(labels, -1)
        for row, e in enumerate(examples[first : first + batch_size]):
            target[row, e.start : len(e.tokens) - 1] = e.tokens[e.start + 1 :]
        logits = _forward(student, tokens, cross_kv)
        predicted = student.proj_out.token_ids[logits.argmax(dim=-1)]
        hits += int(((predicted == target) & (target >= 0)).sum())
        total += int((target >= 0).sum())
    return hits / max(total, 1)


def _cross_kv(main: WhisperModel, init_layers: list[int], encoder: torch.Tensor) -> list[tuple]:
    """The frozen cross-attention keys and values of every cached window, per assistant layer."""
    out = []
    with torch.inference_mode():
        for layer in init_layers:
            attention = main.decoder.blocks[layer].cross_attn
            ks, vs = [], []
            for first in range(0, len(encoder), 8):
                attention.set_cross(encoder[first : first + 8].float(), torch.float32)
                ks.append(attention.cross_kv[0].half())
                vs.append(attention.cross_kv[1].half())
            out.append((torch.cat(ks), torch.cat(vs)))
    return out


def distill(
    main_pair: WhisperPair,
    source: str,
    output: Path,
    options: DistillOptions = DistillOptions(),
    *,
    cache: Path | None = None,
    resume: bool = False,
    command: str | None = None,
) -> dict:
    """Train an assistant for main_pair.main on the audio in source; write it to output."""
    main = main_pair.main
    started = time.perf_counter()
    torch.manual_seed(options.seed)
    jobs = collect_jobs(source)
    if not jobs:
        raise ValueError(f"{source}: no audio files")
    held = _split([str(job.path) for job in jobs], options.held_out, options.seed)
    recordings = plan_recordings(jobs, held, options.join, options.seed, options.augment)
    windows = prepare_teacher_cache(main_pair, recordings, cache or default_cache(main), top_k=options.top_k,
                                    seed=options.seed)
    label_seconds = time.perf_counter() - started
    encoder, examples, languages = _load_cache([file for file, _ in windows], options.top_k)
    recording_of = [recording for _, recording in windows]
    train = [e for e in examples if not recording_of[e.window].held_out]
    # held-out acceptance on single files (short clips, padded windows) and on joined recordings' full windows
    valid = [e for e in examples if recording_of[e.window].held_out and len(recording_of[e.window].parts) == 1]
    valid_joined = [e for e in examples if recording_of[e.window].held_out and len(recording_of[e.window].parts) > 1]
    if not train:
        raise ValueError(f"{source}: no training windows left after holding out {options.held_out:.0%}")

    init_layers = list(options.init_layers or spread_layers(main.dims.n_text_layer, options.layers))
    draft_vocab = choose_draft_vocab(main, train, options.draft_vocab)
    to_draft = torch.full((main.dims.n_vocab,), -1, dtype=torch.long)
    to_draft[draft_vocab] = torch.arange(len(draft_vocab))
    student = build_student(main, init_layers, draft_vocab)
    cross = _cross_kv(main, init_layers, encoder)
    eot = main.special.eot

    own = stored_state(student)  # trained; what it shares with the main model stays frozen
    parameters = [p for name, p in student.named_parameters() if name in own]
    optimizer = torch.optim.AdamW(parameters, lr=options.learning_rate, weight_decay=0.0)

    def lr_at(step: int) -> float:
        if step < options.warmup_steps:
            return (step + 1) / options.warmup_steps
        progress = (step - options.warmup_steps) / max(1, options.steps - options.warmup_steps)
        return 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_at)
    order = torch.Generator().manual_seed(options.seed)
    step, log = 0, []
    checkpoint = output / "checkpoint.pt"
    if resume and checkpoint.is_file():
        saved = torch.load(checkpoint, weights_only=False)
        if saved["options"] != asdict(options):
            raise ValueError(f"{checkpoint}: written with other options; remove it or drop --resume")
        student.load_state_dict(saved["student"], strict=False)
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        order.set_state(saved["order"])
        step, log, permutation, cursor = saved["step"], saved["log"], saved["permutation"], saved["cursor"]
    else:
        permutation, cursor = torch.randperm(len(train), generator=order), 0
    def held_out_acceptance() -> dict:
        return {name: agreement(student, sequences, cross, to_draft, eot)
                for name, sequences in (("held_out_acceptance", valid), ("held_out_joined_acceptance", valid_joined))
                if sequences}

    initial = held_out_acceptance() if step == 0 else {}

    train_started = time.perf_counter()
    bar = tqdm(total=options.steps, initial=step, desc="distilling", unit="step")
    while step < options.steps:
        if cursor + options.batch_size > len(permutation):
            permutation, cursor = torch.randperm(len(train), generator=order), 0
        batch = [train[i] for i in permutation[cursor : cursor + options.batch_size].tolist()]
        cursor += options.batch_size
        tokens, labels, top_ids, top_logits, cross_kv = _collate(batch, cross, to_draft, eot)
        loss = distillation_loss(_forward(student, tokens, cross_kv), labels, top_ids, top_logits, options)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(parameters, 1.0)
        optimizer.step()
        scheduler.step()
        step += 1
        postfix = {"loss": f"{loss.item():.3f}"}
        if step % options.eval_every == 0 or step == options.steps:
            entry = {"step": step, "loss": loss.item(), "held_out_acceptance": None, **held_out_acceptance()}
            log.append(entry)
            if entry["held_out_acceptance"] is not None:
                postfix["held-out acceptance"] = f"{entry['held_out_acceptance']:.3f}"
        bar.set_postfix(postfix)
        bar.update()
        if step % options.checkpoint_every == 0 and step < options.steps:
            output.mkdir(parents=True, exist_ok=True)
            torch.save({"options": asdict(options), "student": stored_state(student), "optimizer": optimizer.state_dict(),
                        "scheduler": scheduler.state_dict(), "order": order.get_state(), "step": step, "log": log,
                        "permutation": permutation, "cursor": cursor},
                       checkpoint)
    bar.close()

    coverage = np.mean([float(to_draft[t] >= 0) for e in valid for t in e.tokens[e.start + 1 :].tolist()]) if valid else None
    summary = {
        "recipe": {**asdict(options), "init_layers": init_layers},
        "training_data": {
            "source": source,
            "files": len(jobs),
            "joined_recordings": sum(len(r.parts) > 1 and not r.copy for r in recordings),
            "perturbed_copies": sum(bool(r.copy) for r in recordings),
            "windows": len(encoder),
            "held_out_files": len(held),
            "languages": sorted(set(languages)),
            "train_sequences": len(train),
        },
        "command": command,
        "label_seconds": round(label_seconds, 1),
        "train_seconds": round(time.perf_counter() - train_started, 1),
        "held_out_acceptance_before": initial.get("held_out_acceptance"),
        "held_out_acceptance": log[-1]["held_out_acceptance"] if log else None,
        "held_out_joined_acceptance_before": initial.get("held_out_joined_acceptance"),
        "held_out_joined_acceptance": log[-1].get("held_out_joined_acceptance") if log else None,
        "held_out_draft_vocab_coverage": coverage,
        "log": log,
        "torch": torch.__version__,
        "machine": f"{platform.machine()} ({os.cpu_count()} cores, {main_pair.device}), {torch.get_num_threads()} threads",
    }
    save_assistant(student, main, output, {"training": summary})
    checkpoint.unlink(missing_ok=True)
    return summary
