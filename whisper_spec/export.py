"""Our models -> Hugging Face directories (the inverse of the loader's key mapping).

A decoder-only export is a standard `WhisperForCausalLM` checkpoint, the form distil-whisper
assistants take, so other tools (transformers' assisted generation) can use it too.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

from .loader import BLOCK_NAMES, CROSS_NAMES, WhisperModel
from .model import Decoder, Encoder


def _unfuse(weight: torch.Tensor, bias: torch.Tensor, letters: str, hf: str, out: dict) -> None:
    for letter, w, b in zip(letters, weight.chunk(len(letters)), bias.chunk(len(letters))):
        out[f"{hf}.{letter}_proj.weight"] = w
        if letter != "k":
            out[f"{hf}.{letter}_proj.bias"] = b


def _blocks(blocks, hf_prefix: str, cross: bool, out: dict) -> None:
    for i, block in enumerate(blocks):
        sd = block.state_dict()
        hf = f"{hf_prefix}.layers.{i}"
        for theirs, mine in BLOCK_NAMES + (CROSS_NAMES if cross else []):
            out[f"{hf}.{theirs}.weight"] = sd[f"{mine}.weight"]
            out[f"{hf}.{theirs}.bias"] = sd[f"{mine}.bias"]
        _unfuse(sd["attn.qkv.weight"], sd["attn.qkv.bias"], "qkv", f"{hf}.self_attn", out)
        if cross:
            _unfuse(sd["cross_attn.kv.weight"], sd["cross_attn.kv.bias"], "kv", f"{hf}.encoder_attn", out)


def decoder_state_dict(decoder: Decoder) -> dict[str, torch.Tensor]:
    out = {
        "model.decoder.embed_tokens.weight": decoder.token_embedding.weight,
        "model.decoder.embed_positions.weight": decoder.positional_embedding,
        "model.decoder.layer_norm.weight": decoder.ln.weight,
        "model.decoder.layer_norm.bias": decoder.ln.bias,
    }
    _blocks(decoder.blocks, "model.decoder", True, out)
    out["proj_out.weight"] = decoder.proj_out.weight if decoder.proj_out is not None else decoder.token_embedding.weight
    return out


def encoder_state_dict(encoder: Encoder) -> dict[str, torch.Tensor]:
    out = {
        "model.encoder.conv1.weight": encoder.conv1.weight,
        "model.encoder.conv1.bias": encoder.conv1.bias,
        "model.encoder.conv2.weight": encoder.conv2.weight,
        "model.encoder.conv2.bias": encoder.conv2.bias,
        "model.encoder.embed_positions.weight": encoder.positional_embedding,
        "model.encoder.layer_norm.weight": encoder.ln_post.weight,
        "model.encoder.layer_norm.bias": encoder.ln_post.bias,
    }
    _blocks(encoder.blocks, "model.encoder", False, out)
    return out


def save_model(model: WhisperModel, output_dir: str | Path, *, decoder_only: bool = False,
               dtype: torch.dtype | None = None) -> Path:
    """Write model as a Hugging Face directory: WhisperForCausalLM when decoder_only (or when it
    has no encoder), else WhisperForConditionalGeneration. Config files come from model.path."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    decoder_only = decoder_only or model.encoder is None
    tensors = decoder_state_dict(model.decoder)
    if not decoder_only:
        tensors.update(encoder_state_dict(model.encoder))
    seen: set[int] = set()
    for name, tensor in list(tensors.items()):
        tensor = tensor.detach().to(device="cpu", dtype=dtype or tensor.dtype)
        # safetensors refuses shared storage: the tied projection is written as its own copy
        tensors[name] = tensor.clone().contiguous() if tensor.data_ptr() in seen else tensor.contiguous()
        seen.add(tensor.data_ptr())
    save_file(tensors, str(output_dir / "model.safetensors"), metadata={"format": "pt"})

    config = json.loads((model.path / "config.json").read_text())
    dims = model.dims
    config.update(decoder_layers=dims.n_text_layer, decoder_attention_heads=dims.n_text_head,
                  decoder_ffn_dim=dims.n_text_ffn, d_model=dims.d_model, vocab_size=dims.n_vocab)
    if decoder_only:
        config["architectures"] = ["WhisperForCausalLM"]
        config["is_encoder_decoder"] = False
    (output_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    for name in ("generation_config.json", "tokenizer.json", "tokenizer_config.json", "preprocessor_config.json",
                 "normalizer.json", "vocab.json", "merges.txt", "added_tokens.json", "special_tokens_map.json"):
        if (model.path / name).is_file():
            shutil.copyfile(model.path / name, output_dir / name)
    return output_dir
