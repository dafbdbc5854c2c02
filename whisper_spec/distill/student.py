"""The assistant: its layers, draft vocabulary, what it shares with the main model, and its directory."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path

import torch

from ..models.checkpoint import save_safetensors
from ..models.draft_head import DraftHead
from ..models.model import Decoder
from ..models.pair import (
    ASSISTANT_CONFIG,
    ASSISTANT_FORMAT,
    HEAD_KIND,
    SHARED_WITH_MAIN,
    Whisper,
    own_state,
    share_main_modules,
)
from ..options import LONG_RECORDING_SECONDS
from .data import Example


def spread_layers(n_main: int, n: int, head: bool = False) -> list[int]:
    """n of the main decoder's layers, evenly spread, first and last kept (n = 1: the last); for a
    draft head, which continues from the main decoder's output, the last n."""
    if not 1 <= n <= n_main:
        raise ValueError(f"an assistant of {n} layers cannot start from a decoder of {n_main}")
    if head:
        return list(range(n_main - n, n_main))
    if n == 1:
        return [n_main - 1]
    return sorted({round(i * (n_main - 1) / (n - 1)) for i in range(n)})


def choose_draft_vocab(main: Whisper, examples: list[Example], size: int) -> torch.Tensor:
    """EOT, the timestamps and every token of the training pseudo-labels; then the tokens the main
    model gives the most probability on the training audio (its top-k), each language's probability
    mass counted as a share of its own (a language with less audio is covered as well as one with
    more); then the lowest text ids."""
    special = main.special
    chosen = {special.eot, *range(special.timestamp_begin, main.dims.n_vocab)}
    chosen.update(t for e in examples for t in e.tokens.tolist())
    mass = torch.zeros(main.dims.n_vocab)
    for language in sorted({e.language for e in examples}):
        own = torch.zeros(main.dims.n_vocab)
        for e in (e for e in examples if e.language == language):
            own.index_add_(0, e.top_ids.reshape(-1), torch.softmax(e.top_logits, dim=-1).reshape(-1))
        mass += own / own.sum()
    suppressed = set(special.suppress)
    mass[list(suppressed)] = 0
    order = mass.argsort(descending=True, stable=True)
    fill = order[mass[order] > 0].tolist() + [t for t in range(special.eot) if t not in suppressed]
    for token in fill:
        if len(chosen) >= size:
            break
        chosen.add(token)
    return torch.tensor(sorted(chosen), dtype=torch.long)


def build_student(main: Whisper, init_layers: list[int], draft_vocab: torch.Tensor, head: bool = False,
                  head_features: tuple[int, ...] = (), start: Decoder | None = None) -> Decoder:
    """An assistant decoder (head: a model.DraftHead reading head_features too) initialised from the
    main one's init_layers, or from start, a distilled assistant of the main model whose layers came
    from init_layers. What it shares with the main model (token embedding, output rows,
    cross-attention key/value projections) is the main model's own frozen modules; the rest is a
    trainable float32 copy. A head starts as the layers it was copied from reading its token alone:
    its fusion passes the token's embedding (the hidden state's half zero, the normed state at the
    embedding's scale) and its reduction of the main layers' outputs passes the final hidden state."""
    dims = replace(main.dims, n_text_layer=len(init_layers))
    student = DraftHead(dims, head_features) if head else Decoder(dims)
    if head:
        with torch.no_grad():
            d = dims.d_model
            # the hidden state enters at the token embedding's scale: an optimizer step moves the zero half's
            # weights by about the learning rate, which on unit-scale input would swamp the token's side
            student.feature_ln.weight.fill_(main.decoder.token_embedding.weight.float().pow(2).mean().sqrt().item())
            student.fuse.weight.zero_()
            student.fuse.weight[:, d:].copy_(torch.eye(d))
            student.fuse.bias.zero_()
            if student.reduce is not None:
                student.reduce.weight.zero_()
                student.reduce.weight[:, -d:].copy_(torch.eye(d))
                student.reduce.bias.zero_()
    if start is not None:
        origin, blocks = start, list(start.blocks)
    else:
        origin, blocks = main.decoder, [main.decoder.blocks[layer] for layer in init_layers]
    student.positional_embedding = torch.nn.Parameter(origin.positional_embedding.detach().float().clone())
    student.ln.load_state_dict({k: v.float() for k, v in origin.ln.state_dict().items()})
    for block, source in zip(student.blocks, blocks):
        block.load_state_dict({k: v.float() for k, v in source.state_dict().items()})
    share_main_modules(student, main.decoder, init_layers, draft_vocab)
    return student


def save_assistant(student: Decoder, main: Whisper, output: Path, meta: dict) -> None:
    output.mkdir(parents=True, exist_ok=True)
    tensors = {name: t.detach().to(torch.float16).contiguous() for name, t in own_state(student).items()}
    tensors["draft_vocab"] = student.proj_out.token_ids.to(torch.int32).cpu()
    save_safetensors(tensors, output / "model.safetensors")
    config = {
        "format": ASSISTANT_FORMAT,
        "main_model": main.name,
        "main_dims": asdict(main.dims),
        "main_fingerprint": main.special.fingerprint(),
        "kind": HEAD_KIND if isinstance(student, DraftHead) else "decoder",
        **({"feature_layers": list(student.feature_layers)} if isinstance(student, DraftHead) else {}),
        "layers_from_main": student.cross_source,
        "draft_vocab_size": len(student.proj_out.token_ids),
        "shared_with_main": list(SHARED_WITH_MAIN),
        **meta,
    }
    (output / ASSISTANT_CONFIG).write_text(json.dumps(config, indent=2) + "\n")
    (output / "README.md").write_text(model_card(config))


def _data_description(recipe: dict, data: dict) -> tuple[str, str]:
    """The model card's words on the training recordings beyond the files, and on the held-out ends."""
    joined_files = (f" and {data.get('joined_recordings')} recordings of {recipe.get('join')} of them joined end to end"
                    " (full 30 s windows, as in long-form transcription; held-out files joined only with each other)"
                    if recipe.get("join") else "")
    joined_files += (f"; {data.get('perturbed_copies')} perturbed copies of the training recordings ({recipe.get('augment')}"
                     " each: speed changed by up to 10%, white noise at 10-30 dB SNR)" if recipe.get("augment") else "")
    joined_files += (f"; recordings of {LONG_RECORDING_SECONDS} s or more cut into windows {recipe.get('shifts')} ways"
                     if (recipe.get("shifts") or 1) > 1 else "")
    ends = (f", and the last {recipe.get('held_out'):.0%} of each of {data['held_out_ends']} recordings of"
            f" {LONG_RECORDING_SECONDS} s or more (its speech never trained on)" if data.get("held_out_ends") else "")
    return joined_files, ends


def _rate(entry: dict, name: str) -> str:
    return "n/a" if entry.get(name) is None else f"{entry[name]:.3f}"


def _log_table(training: dict) -> str:
    """The held-out figures at each evaluation while training, as a table."""
    figures = [name for name in (training.get("log") or [{}])[-1] if name.startswith("held_out_")]
    header = "| step | loss |" + "".join(f" {name.removeprefix('held_out_').replace('_', ' ')} |" for name in figures)
    log = "\n".join(f"| {e['step']} | {e['loss']:.3f} |" + "".join(f" {_rate(e, name)} |" for name in figures)
                    for e in training.get("log", []))
    return f"{header}\n|---:|---:|{'---:|' * len(figures)}\n{log}"


def _languages_table(training: dict, data: dict) -> str:
    """Per language, its training sequences, held-out acceptance and draft-vocabulary coverage (two
    languages or more)."""
    by_language = training.get("held_out_acceptance_by_language") or {}
    coverage = training.get("held_out_draft_vocab_coverage_by_language") or {}
    return "" if len(coverage) < 2 else (
        "\n| language | training sequences | held-out acceptance | held-out tokens in the draft vocabulary |\n"
        "|---|---:|---:|---:|\n" + "\n".join(
            f"| {language} | {(data.get('train_sequences_by_language') or {}).get(language, 0)} | "
            f"{_rate(by_language, language)} | {_rate(coverage, language)} |" for language in coverage) + "\n")


def _kind(config: dict, recipe: dict) -> tuple[str, str, str, str]:
    """What the card says the assistant is: its kind, what it started from, a draft head's extra
    losses, and how it exports."""
    is_head = config.get("kind") == HEAD_KIND
    started = (f" (through the distilled assistant `{recipe['init_assistant']}`, whose layers and draft vocabulary it"
               " started from)" if recipe.get("init_assistant") else "")
    head_losses = ("" if not is_head else
                   f", plus smooth-L1 regression (weight {recipe.get('hidden_weight')}) onto the main decoder's final"
                   f" hidden states; the same losses again on {recipe.get('head_test_depth', 1)} more pass(es), each"
                   " reading the last one's predicted hidden states, as it does drafting past the verified tokens")
    export = "" if is_head else "; `whisper-spec export` writes a standard `WhisperForCausalLM`"
    tapped = f", the outputs of its layers {config['feature_layers']}," if config.get("feature_layers") else ""
    kind = (f"{len(config['layers_from_main'])}-layer draft head (EAGLE: it reads the main decoder's final hidden"
            f" states{tapped} and its token's embedding)" if is_head
            else f"{len(config['layers_from_main'])}-layer assistant decoder")
    return kind, started, head_losses, export


def _making_of(training: dict, head_losses: str) -> str:
    """The card's recipe, data and training sections."""
    recipe, data = training.get("recipe", {}), training.get("training_data", {})

    def rate(name: str) -> str:
        return _rate(training, name)

    joined = training.get("held_out_joined_acceptance") is not None
    joined_line = (f" (on the held-out joined recordings' windows {rate('held_out_joined_acceptance_before')}"
                   f" before, {rate('held_out_joined_acceptance')} after)") if joined else ""
    joined_files, ends = _data_description(recipe, data)
    languages_table = _languages_table(training, data)
    return f"""## Recipe

`{training.get('command')}`

Distil-whisper style: cross-entropy (weight {recipe.get('ce_weight')}) on the main model's greedy
transcripts, with and without timestamps, plus KL divergence (weight {recipe.get('kl_weight')}, temperature
{recipe.get('kl_temperature')}) to its top-{recipe.get('top_k')} logits{head_losses}; AdamW, peak learning rate
{recipe.get('learning_rate')}, {recipe.get('warmup_steps')} warm-up steps then cosine decay,
{recipe.get('steps')} steps of {recipe.get('batch_size')} sequences, seed {recipe.get('seed')}, languages drawn
in proportion to their sequences to the power {recipe.get('balance', 1.0)}; token
embedding and cross-attention key/value projections frozen (shared).

## Data

`{data.get('source')}`: {data.get('files')} files{joined_files}, {data.get('windows')} windows, languages
{', '.join(data.get('languages') or [])} (given, or as the main model detected them window by window); {data.get('held_out_files')} files held out for the acceptance below{ends}; {data.get('train_sequences')}
training sequences.
{languages_table}
## Training

Teacher labels {training.get('label_seconds')} s (0 when cached), training {training.get('train_seconds')} s
on {training.get('machine')}, torch {training.get('torch')}. Held-out acceptance (teacher-forced: the
assistant's argmax equals the main model's greedy token) {rate('held_out_acceptance_before')} before,
{rate('held_out_acceptance')} after{joined_line}; {rate('held_out_draft_vocab_coverage')} of
held-out tokens are in the draft vocabulary.

{_log_table(training)}
"""


def model_card(config: dict) -> str:
    """The assistant's model card: what it is, how it was made, what it reached while training."""
    training = config.get("training", {})
    recipe = training.get("recipe", {})
    tasks = config["draft_tasks"]
    by_task = training.get("held_out_acceptance_by_task") or {}
    by_task = "; held-out acceptance " + ", ".join(f"{task} {_rate(by_task, task)}" for task in by_task) if by_task else ""
    kind, started, head_losses, export = _kind(config, recipe)
    is_head = config.get("kind") == HEAD_KIND
    return f"""# Distilled assistant for {config['main_model']}

A {kind} for speculative decoding with `{config['main_model']}`
(whisper-spec format: load it with `load_pair("{config['main_model']}", "<this folder>")` or
`whisper-spec transcribe --model {config['main_model']} --assistant <this folder>`{export}). Greedy output
with it is the main model's own, token for token.

- Initialised from the main decoder's layers {config['layers_from_main']}{started}; it cross-attends to the main
  encoder's output. Shared with the main model and not stored here: {'; '.join(config['shared_with_main'])}.
- Drafts from {config['draft_vocab_size']} tokens of the vocabulary (EOT, timestamps, every pseudo-label
  token, then the tokens the main model puts probability on, each language's counted as a share of
  its own); the main model still scores all.
- Drafts for rows in {', '.join(config.get('draft_languages') or ['every language'])} (the languages it was trained
  and measured on; the main model's language detection decides a row's); other rows are decoded by
  the main model alone.
- Drafts for the {' and '.join(tasks)} task{'s' * (len(tasks) > 1)} (its training labels'{by_task}); for another the
  main model decodes alone.
- Stored: its own layers, positional embedding and final layer norm{" and its fusion layers" if is_head else ""}, float16.

""" + _making_of(training, head_losses)
