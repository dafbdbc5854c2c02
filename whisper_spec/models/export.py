"""Our models -> Hugging Face directories (checkpoint.py's weight names read the other way), and int8 copies.

A decoder-only export is a standard `WhisperForCausalLM` checkpoint, the form distil-whisper
assistants take, so other tools (transformers' assisted generation) can use it too.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file

from .checkpoint import save_safetensors, to_theirs
from .load import load_model
from .model import Decoder
from .pair import (
    ASSISTANT_CONFIG,
    DRAFTING_CONFIG,
    Whisper,
    decoder_precision,
    encoder_precision,
    is_distilled_assistant,
    output_weight,
)
from .quantize import BLOCK_LINEARS, INT8_FORMAT, Int8Embedding, quantize_decoder_state
from .sources import QUANTIZATION_CONFIG


def decoder_state_dict(decoder: Decoder) -> dict[str, torch.Tensor]:
    """The decoder's weights under Hugging Face's names; the output projection over the full
    vocabulary, also for an assistant that drafts from a draft vocabulary."""
    return {**to_theirs(decoder.state_dict(), "decoder", decoder.dims.n_text_layer),
            "proj_out.weight": output_weight(decoder)}


def save_model(model: Whisper, output_dir: str | Path, *, decoder_only: bool = False,
               dtype: torch.dtype | None = None) -> Path:
    """Write model as a Hugging Face directory: WhisperForCausalLM when decoder_only (or when it
    has no encoder), else WhisperForConditionalGeneration. Config files come from model.path."""
    if decoder_precision(model).startswith("int8"):
        raise ValueError(f"{model.name}: int8 decoders are written by save_int8; load it float (assistant_int8=False) to export")
    decoder_only = decoder_only or model.encoder is None
    if not decoder_only and encoder_precision(model) == "int8":
        raise ValueError(f"{model.name}: its encoder's linears are int8; load it with encoder_precision='float32' to export")
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    tensors = decoder_state_dict(model.decoder)
    if not decoder_only:
        tensors.update(to_theirs(model.encoder.state_dict(), "encoder", model.dims.n_audio_layer))
    seen: set[int] = set()
    for name, tensor in list(tensors.items()):
        tensor = tensor.detach().to(device="cpu", dtype=dtype or tensor.dtype)
        # safetensors refuses shared storage: the tied projection is written as its own copy
        tensors[name] = tensor.clone().contiguous() if tensor.data_ptr() in seen else tensor.contiguous()
        seen.add(tensor.data_ptr())
    save_safetensors(tensors, output_dir / "model.safetensors", metadata={"format": "pt"})

    config = json.loads((model.path / "config.json").read_text())
    dims = model.dims
    config.update(decoder_layers=dims.n_text_layer, decoder_attention_heads=dims.n_text_head,
                  decoder_ffn_dim=dims.n_text_ffn, d_model=dims.d_model, vocab_size=dims.n_vocab)
    if decoder_only:
        config["architectures"] = ["WhisperForCausalLM"]
        config["is_encoder_decoder"] = False
    drafting = {"draft_languages": model.draft_languages, "draft_tasks": model.draft_tasks,
                "audio_frame_margin": model.audio_frame_margin}
    config.pop(DRAFTING_CONFIG, None)
    if any(value is not None for value in drafting.values()):
        config[DRAFTING_CONFIG] = {k: list(v) if isinstance(v, tuple) else v for k, v in drafting.items()}
    (output_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    _copy_model_files(model.path, output_dir)
    return output_dir


def _copy_model_files(source: Path, output_dir: Path) -> None:
    for name in ("generation_config.json", "tokenizer.json", "tokenizer_config.json", "preprocessor_config.json",
                 "normalizer.json", "vocab.json", "merges.txt", "added_tokens.json", "special_tokens_map.json"):
        if (source / name).is_file():
            shutil.copyfile(source / name, output_dir / name)


def _int8_decoder_state(decoder: Decoder) -> dict[str, torch.Tensor]:
    """An int8 decoder's weights under our names, the tied projection (the embedding's table) not repeated."""
    state = decoder.state_dict()
    if isinstance(decoder.token_embedding, Int8Embedding) and decoder.proj_out.weight is decoder.token_embedding.weight:
        state = {k: v for k, v in state.items() if not k.startswith("proj_out.")}
    return state


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
        save_safetensors({**tensors, "draft_vocab": draft_vocab}, output_dir / "model.safetensors")
        config = json.loads((Path(spec) / ASSISTANT_CONFIG).read_text())
        (output_dir / ASSISTANT_CONFIG).write_text(json.dumps({**config, "int8": info}, indent=2) + "\n")
        return output_dir
    model = load_model(spec, int8=True, encoder_precision="float32")  # the encoder is stored float
    tensors = {f"decoder.{k}": v for k, v in _int8_decoder_state(model.decoder).items()}
    if model.encoder is not None:
        tensors.update({f"encoder.{k}": v for k, v in model.encoder.state_dict().items()})
    save_safetensors(_int8_tensors(tensors, dtype), output_dir / "model.safetensors", metadata={"format": "pt"})
    shutil.copyfile(model.path / "config.json", output_dir / "config.json")
    _copy_model_files(model.path, output_dir)
    (output_dir / QUANTIZATION_CONFIG).write_text(json.dumps({**info, "source": str(spec)}, indent=2) + "\n")
    return output_dir
