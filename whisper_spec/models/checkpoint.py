"""Hugging Face Whisper checkpoints: their weight names <-> ours (one table, read both ways), and
reading named tensors from a checkpoint directory without loading the rest."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from .model import ModelDims

# Hugging Face's names -> ours, per part and per block (both weight and bias for block entries).
# Their separate q/k/v projections are one fused matrix in ours: FUSED; k has no bias in Whisper.
PART_NAMES = {
    "encoder": {"conv1.weight": "conv1.weight", "conv1.bias": "conv1.bias", "conv2.weight": "conv2.weight",
                "conv2.bias": "conv2.bias", "embed_positions.weight": "positional_embedding",
                "layer_norm.weight": "ln_post.weight", "layer_norm.bias": "ln_post.bias"},
    "decoder": {"embed_tokens.weight": "token_embedding.weight", "embed_positions.weight": "positional_embedding",
                "layer_norm.weight": "ln.weight", "layer_norm.bias": "ln.bias"},
}
BLOCK_NAMES = {"self_attn_layer_norm": "attn_ln", "final_layer_norm": "mlp_ln", "fc1": "mlp.fc1", "fc2": "mlp.fc2",
               "self_attn.out_proj": "attn.out"}
CROSS_BLOCK_NAMES = {"encoder_attn_layer_norm": "cross_attn_ln", "encoder_attn.q_proj": "cross_attn.q",
                     "encoder_attn.out_proj": "cross_attn.out"}
FUSED = {"self_attn": ("qkv", "attn.qkv"), "encoder_attn": ("kv", "cross_attn.kv")}  # theirs: (letters, ours)


def _names(part: str, n_layers: int) -> dict[str, str]:
    """Their name (within the part) -> ours, for every unfused tensor of a part with n_layers blocks."""
    names = dict(PART_NAMES[part])
    blocks = {**BLOCK_NAMES, **(CROSS_BLOCK_NAMES if part == "decoder" else {})}
    for i in range(n_layers):
        for theirs, ours in blocks.items():
            for kind in ("weight", "bias"):
                names[f"layers.{i}.{theirs}.{kind}"] = f"blocks.{i}.{ours}.{kind}"
    return names


def _fused(part: str, n_layers: int) -> list[tuple[str, str, str]]:
    """(their attention prefix, letters, our fused linear) for every fused projection of a part."""
    kinds = ["self_attn"] + (["encoder_attn"] if part == "decoder" else [])
    return [(f"layers.{i}.{theirs}", FUSED[theirs][0], f"blocks.{i}.{FUSED[theirs][1]}")
            for i in range(n_layers) for theirs in kinds]


def to_ours(get: Callable[[str], torch.Tensor], part: str, n_layers: int) -> dict[str, torch.Tensor]:
    """Our state dict of a part ('encoder' or 'decoder'); get(name) reads their tensor `part.name`."""
    state = {ours: get(f"{part}.{theirs}") for theirs, ours in _names(part, n_layers).items()}
    for theirs, letters, ours in _fused(part, n_layers):
        weights = [get(f"{part}.{theirs}.{c}_proj.weight") for c in letters]
        biases = [torch.zeros(w.shape[0], dtype=w.dtype) if c == "k" else get(f"{part}.{theirs}.{c}_proj.bias")
                  for c, w in zip(letters, weights)]
        state[f"{ours}.weight"], state[f"{ours}.bias"] = torch.cat(weights), torch.cat(biases)
    return state


def to_theirs(state: dict[str, torch.Tensor], part: str, n_layers: int) -> dict[str, torch.Tensor]:
    """Their tensors (`model.part.name`, as WhisperForConditionalGeneration names them) of our state dict."""
    out = {f"model.{part}.{theirs}": state[ours] for theirs, ours in _names(part, n_layers).items()}
    for theirs, letters, ours in _fused(part, n_layers):
        pieces = zip(letters, state[f"{ours}.weight"].chunk(len(letters)), state[f"{ours}.bias"].chunk(len(letters)))
        for c, weight, bias in pieces:
            out[f"model.{part}.{theirs}.{c}_proj.weight"] = weight
            if c != "k":
                out[f"model.{part}.{theirs}.{c}_proj.bias"] = bias
    return out


def read_dims(config: dict) -> ModelDims:
    return ModelDims(
        n_mels=config.get("num_mel_bins", 80),
        n_vocab=config["vocab_size"],
        d_model=config["d_model"],
        n_audio_ctx=config.get("max_source_positions", 1500),
        n_audio_layer=config.get("encoder_layers", 0),
        n_audio_head=config.get("encoder_attention_heads", 0),
        n_audio_ffn=config.get("encoder_ffn_dim", 0),
        n_text_ctx=config.get("max_target_positions", 448),
        n_text_layer=config["decoder_layers"],
        n_text_head=config["decoder_attention_heads"],
        n_text_ffn=config["decoder_ffn_dim"],
    )


class Checkpoint:
    """Reads named tensors from safetensors or PyTorch files without loading the rest."""

    def __init__(self, path: Path):
        self._open: dict[Path, object] = {}
        index = path / "model.safetensors.index.json"
        if index.is_file():
            weight_map = json.loads(index.read_text())["weight_map"]
            self.files = {name: path / file for name, file in weight_map.items()}
        elif (path / "model.safetensors").is_file():
            with safe_open(path / "model.safetensors", "pt") as f:
                self.files = {name: path / "model.safetensors" for name in f.keys()}
        elif (path / "pytorch_model.bin").is_file():
            self._torch = torch.load(path / "pytorch_model.bin", map_location="cpu", mmap=True, weights_only=True)
            self.files = {name: None for name in self._torch}
        else:
            raise FileNotFoundError(f"{path}: no model.safetensors or pytorch_model.bin")
        # the files the tensors are read from
        self.sources = sorted({file for file in self.files.values() if file is not None}) or [path / "pytorch_model.bin"]
        # distil-whisper's WhisperForCausalLM and other exports differ in their top-level prefix
        self.prefix = "model." if any(k.startswith("model.decoder.") for k in self.files) else ""

    def has(self, name: str) -> bool:
        return self.prefix + name in self.files

    def get(self, name: str, prefixed: bool = True) -> torch.Tensor:
        key = self.prefix + name if prefixed else name
        file = self.files[key]
        if file is None:
            return self._torch[key]
        if file not in self._open:
            self._open[file] = safe_open(file, "pt")
        return self._open[file].get_tensor(key)

    def is_decoder_only(self, config: dict) -> bool:
        return "WhisperForCausalLM" in (config.get("architectures") or []) or not self.has("encoder.conv1.weight")


def save_safetensors(tensors: dict[str, torch.Tensor], path: Path, metadata: dict | None = None) -> None:
    """save_file, with the permissions of any other file written here: safetensors creates its
    files readable by their owner only (0600), so a model written for others to use would not be."""
    save_file(tensors, str(path), metadata=metadata)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)
