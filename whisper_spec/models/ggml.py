"""A Whisper checkpoint directory -> whisper.cpp's ggml model file, so whisper.cpp runs on the very
weights we do (the benchmarks' whisper.cpp peer).

The format, as whisper.cpp's converters write it and its loader reads it (little-endian int32
unless said): the magic "ggml"; the hyperparameters (vocabulary, audio context, width, heads,
layers, text context, width, heads, layers, mel bins, file type: 0 float32, 1 float16); the mel
filterbank (bins, FFT bins, float32 values); the vocabulary's ordinary tokens in id order, each as
its length and bytes (whisper.cpp adds the special tokens itself from the vocabulary's size); then
each tensor: dimensions, name length, type, the shape innermost first, the name, the data. Tensors
carry openai-whisper's names; biases, norms, the conv biases (stored [n, 1]) and positional
embeddings stay float32 in a float16 file.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import torch

from ..speech.audio import mel_filters
from .checkpoint import Checkpoint, read_dims, to_ours
from .tokenizer import SpecialTokens

GGML_MAGIC = 0x67676D6C
_FLOAT32_NAMES = ("encoder.conv1.bias", "encoder.conv2.bias", "encoder.positional_embedding",
                  "decoder.positional_embedding")
# our names -> openai-whisper's, where they differ (our fused projections are split in _openai_state)
_RENAMES = ((".mlp.fc1.", ".mlp.0."), (".mlp.fc2.", ".mlp.2."), (".cross_attn.q.", ".cross_attn.query."))
_SPLITS = {"attn.qkv": ("query", "key", "value"), "cross_attn.kv": ("key", "value")}


def _openai_state(checkpoint: Checkpoint, dims) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors under openai-whisper's names (keys without biases, as Whisper has none)."""
    state = {}
    for part, n_layers in (("encoder", dims.n_audio_layer), ("decoder", dims.n_text_layer)):
        for name, tensor in to_ours(checkpoint.get, part, n_layers).items():
            block, _, kind = name.rpartition(".")
            fused = next((f for f in _SPLITS if block.endswith(f)), None)
            if fused is None:
                for ours, theirs in _RENAMES:
                    name = name.replace(ours, theirs)
                state[f"{part}.{name}"] = tensor
            else:
                prefix = block.removesuffix(fused.rpartition(".")[2])
                for letter, piece in zip(_SPLITS[fused], tensor.chunk(len(_SPLITS[fused]))):
                    if not (letter == "key" and kind == "bias"):
                        state[f"{part}.{prefix}{letter}.{kind}"] = piece
    return state


def _vocabulary(model_dir: Path, eot: int) -> list[bytes]:
    """The ordinary tokens (ids below end-of-text) as bytes, from tokenizer.json's byte-level BPE."""
    # GPT-2's byte <-> printable character table: printable bytes stand for themselves, the rest
    # for the characters from U+0100 up, in byte order
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    byte_of = {chr(b): b for b in printable} | {chr(256 + i): b for i, b in enumerate(others)}
    vocab = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
    by_id = {token_id: token for token, token_id in vocab.items() if token_id < eot}
    if sorted(by_id) != list(range(eot)):
        raise ValueError(f"{model_dir / 'tokenizer.json'}: the ids below end-of-text ({eot}) are not 0..{eot - 1}")
    return [bytes(byte_of[c] for c in by_id[i]) for i in range(eot)]


def write_ggml(model_dir: str | Path, output: str | Path, *, float16: bool = True) -> Path:
    """Write the Whisper checkpoint in model_dir (a Hugging Face directory, as the loader keeps
    converted models) as a ggml file for whisper.cpp: float16 matrices (whisper.cpp's own files'
    precision) or float32 throughout."""
    model_dir, output = Path(model_dir), Path(output)
    config = json.loads((model_dir / "config.json").read_text())
    dims = read_dims(config)
    if dims.n_audio_layer == 0:
        raise ValueError(f"{model_dir}: a decoder without an encoder; whisper.cpp runs whole models")
    if dims.n_audio_ffn != 4 * dims.d_model or dims.n_text_ffn != 4 * dims.d_model:
        raise ValueError(f"{model_dir}: feed-forward layers of {dims.n_audio_ffn}/{dims.n_text_ffn} for a width of "
                         f"{dims.d_model}; whisper.cpp reads only Whisper's 4x")
    eot = SpecialTokens.from_model_dir(model_dir).eot
    state = _openai_state(Checkpoint(model_dir), dims)
    filters = mel_filters(dims.n_mels)
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(output.name + ".partial")
    with partial.open("wb") as out:
        out.write(struct.pack("<12i", GGML_MAGIC, dims.n_vocab, dims.n_audio_ctx, dims.d_model, dims.n_audio_head,
                              dims.n_audio_layer, dims.n_text_ctx, dims.d_model, dims.n_text_head, dims.n_text_layer,
                              dims.n_mels, int(float16)))
        out.write(struct.pack("<2i", *filters.shape))
        out.write(filters.astype("<f4").tobytes())
        tokens = _vocabulary(model_dir, eot)
        out.write(struct.pack("<i", len(tokens)))
        for token in tokens:
            out.write(struct.pack("<i", len(token)) + token)
        for name, tensor in state.items():
            data = tensor.detach().float().numpy()
            if name in ("encoder.conv1.bias", "encoder.conv2.bias"):
                data = data.reshape(-1, 1)
            half = float16 and data.ndim >= 2 and name not in _FLOAT32_NAMES
            encoded = name.encode()
            out.write(struct.pack(f"<3i{data.ndim}i", data.ndim, len(encoded), int(half), *reversed(data.shape)))
            out.write(encoded)
            out.write(np.ascontiguousarray(data, dtype="<f2" if half else "<f4").tobytes())
    partial.replace(output)
    return output
