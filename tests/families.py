"""Random-weight copies of the checkpoint families users bring (tests/test_families.py): each family's
real vocabulary, special-token ids, mel bins, generation config (its teacher's alignment heads for a
distilled one) and Hugging Face layout (seq2seq, or WhisperForCausalLM for a decoder-only assistant), at
tiny dimensions. The vocabularies come from the embedded models' tokenizers: base's for the
multilingual families, tiny.en's for the English-only ones, base's with large-v3's <|yue|> inserted
(every special token after it one id later) for large-v3 and turbo."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import WhisperConfig, WhisperForCausalLM, WhisperForConditionalGeneration

from whisper_spec.models import sources

YUE = 50358  # large-v3's <|yue|>: the languages' last, before <|translate|>
# large-v3's published alignment heads: a distilled copy lists them though its decoder has two layers
LARGE_V3_HEADS = [[7, 0], [10, 17], [12, 18], [13, 12], [16, 1], [17, 14], [19, 11], [21, 4], [24, 1], [25, 6]]


@dataclass(frozen=True)
class Family:
    vocabulary: str  # "multilingual" (51865), "v3" (51866) or "english" (51864)
    mels: int
    decoder_layers: int
    causal: bool = False  # a decoder-only WhisperForCausalLM checkpoint (distil-whisper's assistants)
    teacher: str | None = None  # the family whose decoder its layers are copied from (a distilled one)


FAMILIES = {
    "large-v2": Family("multilingual", 80, 2),
    "large-v3": Family("v3", 128, 2),
    "large-v3-turbo": Family("v3", 128, 2),
    "distil-large-v2": Family("multilingual", 80, 2, causal=True, teacher="large-v2"),
    "distil-large-v3": Family("v3", 128, 2, causal=True, teacher="large-v3"),
    "distil-large-v3-seq2seq": Family("v3", 128, 2, teacher="large-v3"),
    "small.en": Family("english", 80, 2),
    "distil-small.en": Family("english", 80, 2, teacher="small.en"),
}
# main model, assistant: the pairs of the Hugging Face blog and its successors
PAIRS = [("large-v2", "distil-large-v2"), ("large-v3", "distil-large-v3"), ("large-v3-turbo", "distil-large-v3"),
         ("large-v3", "distil-large-v3-seq2seq"), ("small.en", "distil-small.en")]
# feed-forward 4x the width, as every Whisper (whisper.cpp reads no other)
DIMS = dict(d_model=64, encoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=256,
            decoder_ffn_dim=256, max_source_positions=1500, max_target_positions=448)


def build_families(folder: Path) -> dict[str, Path]:
    """Every family's checkpoint under folder, by name; a distilled one's decoder layers copied from its
    teacher's first and last (as distil-whisper initialises them) and perturbed, so that its drafts are
    right often but not always."""
    built: dict[str, Path] = {}
    for name, family in sorted(FAMILIES.items(), key=lambda item: item[1].teacher is not None):
        built[name] = _build(name, family, folder / name, built.get(family.teacher))
    return built


def _build(name: str, family: Family, path: Path, teacher: Path | None) -> Path:
    tokenizer, generation = _vocabulary(family.vocabulary)
    special = {k: generation[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")}
    ids = [*tokenizer["model"]["vocab"].values(), *(token["id"] for token in tokenizer["added_tokens"])]
    config = WhisperConfig(vocab_size=max(ids) + 1,  # <|endoftext|> is in both lists
                           num_mel_bins=family.mels, decoder_layers=family.decoder_layers, **DIMS, **special)
    torch.manual_seed(sum(map(ord, name)))
    model = (WhisperForCausalLM if family.causal else WhisperForConditionalGeneration)(config).eval()
    with torch.no_grad():  # larger logits than the default initialisation: texts that end
        for parameter in model.parameters():
            parameter.mul_(8.0 if parameter.dim() > 1 else 1.0)
    if teacher is not None:
        _copy_teacher(model, WhisperForConditionalGeneration.from_pretrained(teacher), family.decoder_layers)
    model.save_pretrained(path)
    if family.teacher is not None or name.startswith("large-v3"):
        generation = {**generation, "alignment_heads": LARGE_V3_HEADS}
    (path / "generation_config.json").write_text(json.dumps(generation, indent=2))
    (path / "tokenizer.json").write_text(json.dumps(tokenizer))
    preprocessor = json.loads((sources.resolve_model("base") / "preprocessor_config.json").read_text())
    (path / "preprocessor_config.json").write_text(json.dumps({**preprocessor, "feature_size": family.mels}))
    return path


def _copy_teacher(model, teacher, layers: int) -> None:
    """The teacher's embeddings and its decoder's first and last layers (and its encoder, where the
    model has one)."""
    source = teacher.state_dict()
    last = teacher.config.decoder_layers - 1
    picked = [0, last] if layers == 2 else list(range(layers))
    state = {}
    for key in model.state_dict():
        theirs = key
        if ".decoder.layers." in key:
            index = int(key.split(".decoder.layers.")[1].split(".")[0])
            theirs = key.replace(f".decoder.layers.{index}.", f".decoder.layers.{picked[index]}.")
        if theirs in source:
            state[key] = source[theirs]
    model.load_state_dict(state, strict=False)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if ".decoder.layers." in name and parameter.dim() > 1:
                parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.1 * parameter.std())


def _vocabulary(kind: str) -> tuple[dict, dict]:
    """tokenizer.json and generation_config.json of a vocabulary."""
    folder = sources.resolve_model("tiny.en" if kind == "english" else "base")
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    generation = json.loads((folder / "generation_config.json").read_text())
    generation.pop("alignment_heads", None)
    if kind != "v3":
        return tokenizer, generation

    def moved(token_id: int) -> int:
        return token_id + 1 if token_id >= YUE else token_id

    added = [{**token, "id": moved(token["id"])} for token in tokenizer["added_tokens"]]
    yue = {**next(t for t in added if t["content"] == "<|su|>"), "id": YUE, "content": "<|yue|>"}
    tokenizer = {**tokenizer, "added_tokens": sorted(added + [yue], key=lambda t: t["id"])}
    generation = {
        **generation,
        "lang_to_id": {**generation["lang_to_id"], "<|yue|>": YUE},
        "task_to_id": {task: moved(i) for task, i in generation["task_to_id"].items()},
        "no_timestamps_token_id": moved(generation["no_timestamps_token_id"]),
        "prev_sot_token_id": moved(generation["prev_sot_token_id"]),
        "suppress_tokens": [moved(i) for i in generation["suppress_tokens"]],
        "begin_suppress_tokens": [moved(i) for i in generation["begin_suppress_tokens"]],
    }
    return tokenizer, generation
