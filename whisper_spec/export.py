"""Our models -> Hugging Face directories (the inverse of the loader's key mapping), and int8 copies.

A decoder-only export is a standard `WhisperForCausalLM` checkpoint, the form distil-whisper
assistants take, so other tools (transformers' assisted generation) can use it too.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from .loader import (
    ASSISTANT_CONFIG,
    BLOCK_NAMES,
    CROSS_NAMES,
    WhisperModel,
    decoder_precision,
    decoder_state,
    is_distilled_assistant,
    load_model,
    output_weight,
)
from .quantize import BLOCK_LINEARS, INT8_FORMAT, QUANTIZATION_CONFIG, quantize_decoder_state
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
    out["proj_out.weight"] = output_weight(decoder)  # the full vocabulary, also for a draft-vocabulary assistant
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
    if decoder_precision(model).startswith("int8"):
        raise ValueError(f"{model.name}: int8 decoders are written by save_int8; load it float (assistant_int8=False) to export")
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
    _copy_model_files(model.path, output_dir)
    return output_dir


def _copy_model_files(source: Path, output_dir: Path) -> None:
    for name in ("generation_config.json", "tokenizer.json", "tokenizer_config.json", "preprocessor_config.json",
                 "normalizer.json", "vocab.json", "merges.txt", "added_tokens.json", "special_tokens_map.json"):
        if (source / name).is_file():
            shutil.copyfile(source / name, output_dir / name)


def _int8_tensors(state: dict[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """int8 weights as they are, scales in float32, the other float tensors in dtype."""
    def stored(name: str, t: torch.Tensor) -> torch.Tensor:
        t = t.detach().cpu()
        if t.is_floating_point():
            t = t.float() if name.endswith(".scales") else t.to(dtype)
        return t.contiguous()

    return {name: stored(name, t) for name, t in state.items()}


def save_int8(spec: str | Path, output_dir: str | Path, *, dtype: torch.dtype = torch.float16) -> Path:
    """A pre-quantized copy of a model or a distilled assistant: decoder linears int8 with float32
    scales, everything else (the encoder included) in dtype. Loading it never builds float decoder
    weights."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    info = {"format": INT8_FORMAT, "scheme": "int8 weight-only, symmetric, per output channel, float32 scales",
            "quantized": ["decoder " + name for name in BLOCK_LINEARS] + ["token embedding / output projection"]}
    if is_distilled_assistant(Path(spec)):
        state = load_file(Path(spec) / "model.safetensors")
        draft_vocab = state.pop("draft_vocab")
        tensors = _int8_tensors(quantize_decoder_state(state), dtype)
        save_file({**tensors, "draft_vocab": draft_vocab}, str(output_dir / "model.safetensors"))
        config = json.loads((Path(spec) / ASSISTANT_CONFIG).read_text())
        (output_dir / ASSISTANT_CONFIG).write_text(json.dumps({**config, "int8": info}, indent=2) + "\n")
        return output_dir
    model = load_model(spec, int8=True)
    tensors = {f"decoder.{k}": v for k, v in decoder_state(model.decoder).items()}
    if model.encoder is not None:
        tensors.update({f"encoder.{k}": v for k, v in model.encoder.state_dict().items()})
    save_file(_int8_tensors(tensors, dtype), str(output_dir / "model.safetensors"), metadata={"format": "pt"})
    shutil.copyfile(model.path / "config.json", output_dir / "config.json")
    _copy_model_files(model.path, output_dir)
    (output_dir / QUANTIZATION_CONFIG).write_text(json.dumps(info, indent=2) + "\n")
    return output_dir
