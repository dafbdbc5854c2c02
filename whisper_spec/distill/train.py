"""Training: distil-whisper's loss on the cached teacher outputs, held-out acceptance, checkpoints."""

from __future__ import annotations

import math
import os
import platform
import random
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

from ..decode.speculative import hidden_before
from ..jobs.inputs import collect_jobs
from ..models.attention import DecoderCaches
from ..models.draft_head import DraftHead
from ..models.load import load_distilled
from ..models.model import Decoder
from ..models.pair import Whisper, WhisperPair, own_state
from ..options import DistillOptions
from .data import Example, default_cache, is_long, load_cache, plan_recordings, prepare_teacher_cache
from .held_out import held_out_figures, held_out_groups
from .losses import distillation_loss, hidden_loss
from .student import build_student, choose_draft_vocab, save_assistant, spread_layers

# a language with fewer of the training sequences is not drafted for (see _draft_languages)
MIN_LANGUAGE_SHARE = 0.02


def _split(sources: list[str], held_out: float, seed: int) -> set[str]:
    """Held-out source files, chosen by a seeded shuffle of the sorted file names."""
    names = sorted(set(sources))
    random.Random(seed).shuffle(names)
    return set(names[: round(len(names) * held_out)])


def _collate(examples: list[Example], cross: list[tuple], to_draft: torch.Tensor, eot: int):
    """Padded tokens, the cross keys/values of each example's window, per predicted position its
    pseudo-label (in draft ids, -100 where outside the draft vocabulary) and teacher top-k, and for
    a draft head the main decoder's hidden states at every position (None otherwise)."""
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
    hidden = None
    if examples[0].hidden is not None:
        hidden = torch.zeros(batch, width, examples[0].hidden.shape[-1])
        for row, e in enumerate(examples):
            hidden[row, : len(e.tokens)] = e.hidden
    return tokens, labels, top_ids.clamp(min=0), top_logits, cross_kv, hidden


def _forward(student: Decoder, tokens: torch.Tensor, cross_kv, hidden: torch.Tensor | None = None
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """Compact logits and final hidden states at every position; a draft head reads hidden (its
    head_input of the main decoder's features, or its own predictions) at the position before each."""
    positions = torch.arange(tokens.shape[1]).expand_as(tokens)
    caches = DecoderCaches(cross_kv)
    if hidden is None:
        out = student.features(tokens, positions, caches)
    else:
        out = student.features(tokens, positions, caches, before=hidden_before(hidden, positions))
    return student.proj_out.compact(out), out


@torch.inference_mode()
def teacher_hidden(main: Whisper, examples: list[Example], encoder: torch.Tensor, taps: tuple[int, ...] = ()) -> None:
    """Each example's main-decoder features at every position (teacher forcing on its tokens; taps:
    Decoder.through_blocks'), what a draft head reads and regresses onto; float16, set on the examples."""
    by_window: dict[int, list[Example]] = {}
    for example in examples:
        by_window.setdefault(example.window, []).append(example)
    for window, group in tqdm(by_window.items(), desc="teacher hidden states", unit="window", leave=False):
        # whole sequences at once: no self-attention caches
        caches = DecoderCaches(main.decoder.cross_states(encoder[window : window + 1].float().expand(len(group), -1, -1)))
        width = max(len(e.tokens) for e in group)
        tokens = torch.stack([F.pad(e.tokens, (0, width - len(e.tokens)), value=main.special.eot) for e in group])
        hidden = main.decoder.features(tokens, torch.arange(width).expand_as(tokens), caches, taps=taps).half()
        for row, e in enumerate(group):
            e.hidden = hidden[row, : len(e.tokens)].clone()


@torch.no_grad()
def agreement_counts(student: Decoder, examples: list[Example], cross, to_draft, eot: int, batch_size: int = 32
                     ) -> list[tuple[int, int]]:
    """Teacher-forced acceptance per example: (positions where the assistant's argmax is the main
    model's greedy token, positions)."""
    counts = []
    for first in range(0, len(examples), batch_size):
        tokens, labels, _, _, cross_kv, hidden = _collate(examples[first : first + batch_size], cross, to_draft, eot)
        target = torch.full_like(labels, -1)
        for row, e in enumerate(examples[first : first + batch_size]):
            target[row, e.start : len(e.tokens) - 1] = e.tokens[e.start + 1 :]
        logits, _ = _forward(student, tokens, cross_kv, None if hidden is None else student.head_input(hidden))
        predicted = student.proj_out.token_ids[logits.argmax(dim=-1)]
        hits = ((predicted == target) & (target >= 0)).sum(dim=1)
        counts += list(zip(hits.tolist(), (target >= 0).sum(dim=1).tolist()))
    return counts


def _fraction(counts: list[tuple[int, int]]) -> float:
    return sum(h for h, _ in counts) / max(sum(n for _, n in counts), 1)


def _cross_kv(main: Whisper, init_layers: list[int], encoder: torch.Tensor) -> list[tuple]:
    """The frozen cross-attention keys and values of every cached window, per assistant layer."""
    out = []
    with torch.inference_mode():
        for layer in init_layers:
            attention = main.decoder.blocks[layer].cross_attn
            keys = values = None  # filled in place: lists and a concatenation would hold them twice
            for first in range(0, len(encoder), 8):
                k, v = attention.cross_states(encoder[first : first + 8].float(), torch.float32)
                if keys is None:
                    keys, values = (torch.empty((len(encoder), *t.shape[1:]), dtype=torch.float16) for t in (k, v))
                keys[first : first + len(k)] = k
                values[first : first + len(v)] = v
            out.append((keys, values))
    return out


def distill(
    main_pair: WhisperPair,
    source: str | list[str],
    output: Path,
    options: DistillOptions = DistillOptions(),
    *,
    cache: Path | None = None,
    resume: bool = False,
    command: str | None = None,
) -> dict:
    """Train an assistant for main_pair.main on the audio in source (one or several folders, globs or
    manifests); write it to output."""
    main = main_pair.main
    start = _start_assistant(options, main_pair)  # before the labels: a wrong one fails at once
    started = time.perf_counter()
    torch.manual_seed(options.seed)
    sources = [source] if isinstance(source, str) else list(source)
    jobs = [job for one in sources for job in collect_jobs(one)]
    held = _split([str(job.path) for job in jobs if not is_long(job)], options.held_out, options.seed)
    recordings = plan_recordings(jobs, held, options.join, options.seed, options.augment,
                                 held_out_fraction=options.held_out, shifts=options.shifts)
    windows = prepare_teacher_cache(main_pair, recordings, cache or default_cache(main), top_k=options.top_k,
                                    seed=options.seed, tasks=options.tasks)
    label_seconds = time.perf_counter() - started
    encoder, examples, languages = load_cache([file for file, _ in windows], options.top_k)
    recording_of = [recording for _, recording in windows]
    train = [e for e in examples if not recording_of[e.window].held_out]
    held_out = [e for e in examples if recording_of[e.window].held_out]
    if not train:
        raise ValueError(f"{', '.join(sources)}: no training windows left after holding out {options.held_out:.0%}")
    draft_languages = _draft_languages(train, held_out)
    held_out_by_language, groups = held_out_groups(held_out, recording_of)

    init_layers, draft_vocab, to_draft = _layers_and_vocab(main, options, train, start)
    student = build_student(main, init_layers, draft_vocab, options.head, options.head_features, start)
    if options.head:
        teacher_hidden(main, examples, encoder, options.head_features)
    data = _Data(train, groups, _cross_kv(main, init_layers, encoder), to_draft, main.special.eot, options.balance)
    del encoder  # the cross-attention states are what training reads
    train_started = time.perf_counter()
    initial, log = _train(student, data, options, output / "checkpoint.pt", resume)

    summary = {
        "recipe": {**asdict(options), "init_layers": init_layers},
        "training_data": _training_data(sources, jobs, recordings, len(windows), held, languages, train),
        "command": command,
        "label_seconds": round(label_seconds, 1),
        "train_seconds": round(time.perf_counter() - train_started, 1),
        **held_out_figures(initial, log, options.tasks, held_out, held_out_by_language, to_draft),
        "log": log,
        "torch": torch.__version__,
        "machine": f"{platform.machine()} ({os.cpu_count()} cores, {main_pair.device}), {torch.get_num_threads()} threads",
    }
    save_assistant(student, main, output, {"draft_languages": draft_languages, "draft_tasks": list(options.tasks),
                                           "training": summary})
    (output / "checkpoint.pt").unlink(missing_ok=True)
    return summary


def _layers_and_vocab(main: Whisper, options: DistillOptions, train: list[Example], start: Decoder | None
                      ) -> tuple[list[int], torch.Tensor, torch.Tensor]:
    """The main layers the student starts from, its draft vocabulary, and each token's column in it
    (-1: not drafted): a starting assistant's, else spread layers and the vocabulary the labels need."""
    if start is not None:
        init_layers, draft_vocab = list(start.cross_source), start.draft_vocab.cpu()
    else:
        init_layers = list(options.init_layers or spread_layers(main.dims.n_text_layer, options.layers, options.head))
        draft_vocab = choose_draft_vocab(main, train, options.draft_vocab)
    to_draft = torch.full((main.dims.n_vocab,), -1, dtype=torch.long)
    to_draft[draft_vocab] = torch.arange(len(draft_vocab))
    return init_layers, draft_vocab, to_draft


def _start_assistant(options: DistillOptions, main_pair: WhisperPair) -> Decoder | None:
    """The decoder of options.init_assistant, a distilled assistant of the main model with
    options.layers layers (None where training starts from the main decoder's layers)."""
    if options.init_assistant is None:
        return None
    path = Path(options.init_assistant)
    start = load_distilled(path, main_pair.main, torch.float32, main_pair.device).decoder
    if isinstance(start, DraftHead):
        raise ValueError(f"{path}: a draft head; training starts from a decoder assistant's layers")
    if len(start.blocks) != options.layers:
        raise ValueError(f"{path}: an assistant of {len(start.blocks)} layers, where layers is {options.layers}")
    return start


def _training_data(sources: list[str], jobs: list, recordings: list, windows: int, held: set, languages: list[str],
                   train: list[Example]) -> dict:
    """What the assistant was trained on, for its model card."""
    return {
        "source": " ".join(sources),
        "files": len(jobs),
        "joined_recordings": sum(len(r.parts) > 1 and not r.copy for r in recordings),
        "perturbed_copies": sum(bool(r.copy) for r in recordings),
        "windows": windows,
        "held_out_files": len(held),
        "held_out_ends": sum(r.held_out and r.span != (0.0, 1.0) for r in recordings),
        "languages": sorted(set(languages)),
        "train_sequences": len(train),
        "train_sequences_by_language": dict(sorted(Counter(e.language for e in train).items())),
    }


def _draft_languages(train: list[Example], held_out: list[Example]) -> list[str]:
    """The languages the assistant was trained and measured on: a few windows the main model took
    for another language do not make it draft there."""
    counts = Counter(e.language for e in train)
    measured = {e.language for e in held_out}
    return sorted(language for language, n in counts.items()
                  if n >= MIN_LANGUAGE_SHARE * len(train) and (language in measured or not held_out))


@dataclass(frozen=True)
class _Data:
    train: list[Example]
    held_out: dict[str, list[Example]]  # by the name of its acceptance figure
    cross: list[tuple]  # per assistant layer: every window's frozen cross-attention keys and values
    to_draft: torch.Tensor  # full-vocabulary id -> draft-vocabulary id (-1: not in it)
    eot: int
    balance: float

    def held_out_acceptance(self, student: Decoder) -> dict[str, float]:
        """Every figure from one pass over the held-out examples (the groups overlap)."""
        examples = {id(e): e for group in self.held_out.values() for e in group}
        counts = dict(zip(examples, agreement_counts(student, list(examples.values()), self.cross, self.to_draft,
                                                     self.eot)))
        return {name: _fraction([counts[id(e)] for e in group]) for name, group in self.held_out.items() if group}

    def sampling_weights(self) -> torch.Tensor:
        """Per training sequence: a language is drawn with probability proportional to its number of
        sequences to the power `balance` (1: as the data has them; 0: every language equally often)."""
        counts = Counter(e.language for e in self.train)
        total = sum(n**self.balance for n in counts.values())
        return torch.tensor([counts[e.language] ** self.balance / total / counts[e.language] for e in self.train],
                            dtype=torch.float64)


def _learning_rate(options: DistillOptions):
    """Linear warm-up, then cosine decay to 0 at the last step (a LambdaLR factor)."""
    def factor(step: int) -> float:
        if step < options.warmup_steps:
            return (step + 1) / options.warmup_steps
        progress = (step - options.warmup_steps) / max(1, options.steps - options.warmup_steps)
        return 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))

    return factor


# Sequences padded together per forward pass. A step's sequences go through in groups of similar
# length (and gradients add up), because one 30 s window's 200 tokens would pad fifteen short clips.
GROUP_SIZE = 4


def _accumulate(student: Decoder, batch: list[Example], data: _Data, options: DistillOptions) -> float:
    """Backpropagate the loss of a step's sequences (sorted by length), a group at a time, each
    group's loss weighted by its share of the predicted positions; the step's loss."""
    predicted = [len(e.tokens) - 1 - e.start for e in batch]
    total = 0.0
    for first in range(0, len(batch), GROUP_SIZE):
        group = batch[first : first + GROUP_SIZE]
        tokens, labels, top_ids, top_logits, cross_kv, hidden = _collate(group, data.cross, data.to_draft, data.eot)
        logits, guess = _forward(student, tokens, cross_kv, None if hidden is None else student.head_input(hidden))
        loss = distillation_loss(logits, labels, top_ids, top_logits, options)
        if hidden is not None:
            loss = loss + options.hidden_weight * hidden_loss(guess, hidden, tokens, data.eot)
            # and as it drafts past the verified tokens, reading its own predictions, each generation
            # the last one's (EAGLE-3's training-time test)
            for _ in range(options.head_test_depth):
                own_logits, guess = _forward(student, tokens, cross_kv, guess.detach())
                loss = (loss + distillation_loss(own_logits, labels, top_ids, top_logits, options)
                        + options.hidden_weight * hidden_loss(guess, hidden, tokens, data.eot))
        weight = sum(predicted[first : first + GROUP_SIZE]) / sum(predicted)
        (loss * weight).backward()
        total += loss.item() * weight
    return total


def _train(student: Decoder, data: _Data, options: DistillOptions, checkpoint: Path, resume: bool
           ) -> tuple[dict, list[dict]]:
    """The training loop, resumable from its checkpoint; held-out acceptance before training (a
    fresh start only) and the log of evaluations."""
    own = own_state(student)  # trained; what it shares with the main model stays frozen
    parameters = [p for name, p in student.named_parameters() if name in own]
    optimizer = torch.optim.AdamW(parameters, lr=options.learning_rate, weight_decay=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _learning_rate(options))
    order = torch.Generator().manual_seed(options.seed)
    weights = data.sampling_weights()
    step, log = 0, []
    if resume and checkpoint.is_file():
        saved = torch.load(checkpoint, weights_only=False)
        if saved["options"] != asdict(options):
            raise ValueError(f"{checkpoint}: written with other options; remove it or drop --resume")
        student.load_state_dict(saved["student"], strict=False)
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        order.set_state(saved["order"])
        step, log = saved["step"], saved["log"]
    initial = data.held_out_acceptance(student) if step == 0 else {}

    bar = tqdm(total=options.steps, initial=step, desc="distilling", unit="step")
    while step < options.steps:
        picked = torch.multinomial(weights, min(options.batch_size, len(weights)), generator=order)
        batch = sorted((data.train[i] for i in picked.tolist()), key=lambda e: len(e.tokens))
        optimizer.zero_grad(set_to_none=True)
        loss = _accumulate(student, batch, data, options)
        torch.nn.utils.clip_grad_norm_(parameters, 1.0)
        optimizer.step()
        scheduler.step()
        step += 1
        postfix = {"loss": f"{loss:.3f}"}
        if step % options.eval_every == 0 or step == options.steps:
            entry = {"step": step, "loss": loss, "held_out_acceptance": None,
                     **data.held_out_acceptance(student)}
            log.append(entry)
            if entry["held_out_acceptance"] is not None:
                postfix["held-out acceptance"] = f"{entry['held_out_acceptance']:.3f}"
        bar.set_postfix(postfix)
        bar.update()
        if step % options.checkpoint_every == 0 and step < options.steps:
            checkpoint.parent.mkdir(parents=True, exist_ok=True)
            torch.save({"options": asdict(options), "student": own_state(student), "optimizer": optimizer.state_dict(),
                        "scheduler": scheduler.state_dict(), "order": order.get_state(), "step": step, "log": log},
                       checkpoint)
    bar.close()
    return initial, log
