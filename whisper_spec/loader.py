"""Load a main Whisper model and an assistant into one pair that shares work where it can.

A decoder-only assistant (distil-whisper's `WhisperForCausalLM`, or any checkpoint loaded with
`assistant_encoder="shared"`) never has its encoder weights read: it cross-attends to the main
model's encoder output. A full assistant keeps its own encoder and its own mel settings.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file

from .model import Decoder, DraftVocabProjection, Encoder, Linear, ModelDims
from .models import resolve_model
from .quantize import (
    QUANTIZATION_CONFIG,
    Int8Embedding,
    Int8Linear,
    aligned,
    int8_modules,
    kernel_for,
    quantize_per_channel,
    quantize_decoder_state,
)
from .tokenizer import SpecialTokens, TextDecoder

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def as_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    return DTYPES[dtype]


class IncompatiblePair(ValueError):
    """The assistant cannot draft for the main model; the message names the mismatch."""


@dataclass
class WhisperModel:
    name: str
    path: Path
    dims: ModelDims
    special: SpecialTokens
    text: TextDecoder
    decoder: Decoder
    encoder: Encoder | None  # None for a decoder-only assistant
    # as an assistant: the languages it drafts for (a distilled one: those it was trained on;
    # other rows are decoded by the main model alone); None: every language
    draft_languages: tuple[str, ...] | None = None
    # as an assistant: cross-attend only to the encoder frames up to the end of the audio plus
    # this many, skipping the padding (half or more of a short clip's window); None: all frames
    audio_frame_margin: int | None = None


# Encoder frames (1 s) a distilled assistant attends past the end of the audio. The shipped
# assistant's held-out acceptance (teacher-forced, 25 unlabeled files) is the same with margins of
# 0 to 100 frames as with all 1500: 0.786 (0), 0.781 (25), 0.783 (50, 100), 0.783 (all). A full
# Whisper model drafting for itself does lose acceptance without the padding (base on base: 1.0
# -> 0.9 on one LibriSpeech clip), so other assistants attend to every frame.
DISTILLED_FRAME_MARGIN = 50


@dataclass
class WhisperPair:
    main: WhisperModel
    assistant: WhisperModel | None
    device: torch.device
    dtype: torch.dtype

    @property
    def shares_encoder(self) -> bool:
        return self.assistant is not None and self.assistant.encoder is None

    @property
    def int8_kernel(self) -> str | None:
        """The int8 matmul the decoders use ('int8pack_mm', 'compiled', 'dequantize'), None if float."""
        if not isinstance(self.main.decoder.proj_out, Int8Linear):
            return None
        return kernel_for(self.device.type, self.dtype)


def decoder_precision(model: WhisperModel) -> str:
    """'float32', 'bfloat16', ... or 'int8/bfloat16' (int8 linears, bfloat16 activations)."""
    decoder = model.decoder
    dtype = str(decoder.dtype).removeprefix("torch.")
    return f"int8/{dtype}" if isinstance(decoder.blocks[0].mlp.fc1, Int8Linear) else dtype


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


class _Checkpoint:
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


def _attention_weights(ckpt: _Checkpoint, hf: str, letters: str, out: str) -> dict:
    """Fuse Hugging Face's separate q/k/v projections into one matrix (k has no bias: zeros)."""
    weights = [ckpt.get(f"{hf}.{c}_proj.weight") for c in letters]
    biases = [
        ckpt.get(f"{hf}.{c}_proj.bias") if c != "k" else torch.zeros(w.shape[0], dtype=w.dtype)
        for c, w in zip(letters, weights)
    ]
    return {
        f"{out}.weight": torch.cat(weights),
        f"{out}.bias": torch.cat(biases),
    }


# Hugging Face's names of the per-block weights -> ours (q/k/v are fused separately)
BLOCK_NAMES = [("self_attn_layer_norm", "attn_ln"), ("final_layer_norm", "mlp_ln"), ("fc1", "mlp.fc1"),
               ("fc2", "mlp.fc2"), ("self_attn.out_proj", "attn.out")]
CROSS_NAMES = [("encoder_attn_layer_norm", "cross_attn_ln"), ("encoder_attn.q_proj", "cross_attn.q"),
               ("encoder_attn.out_proj", "cross_attn.out")]


def _block_weights(ckpt: _Checkpoint, hf: str, ours: str, cross: bool) -> dict:
    sd = {}
    for theirs, mine in BLOCK_NAMES + (CROSS_NAMES if cross else []):
        sd[f"{ours}.{mine}.weight"] = ckpt.get(f"{hf}.{theirs}.weight")
        sd[f"{ours}.{mine}.bias"] = ckpt.get(f"{hf}.{theirs}.bias")
    sd.update(_attention_weights(ckpt, f"{hf}.self_attn", "qkv", f"{ours}.attn.qkv"))
    if cross:
        sd.update(_attention_weights(ckpt, f"{hf}.encoder_attn", "kv", f"{ours}.cross_attn.kv"))
    return sd


def _build(module_class, dims: ModelDims, state_dict: dict, dtype: torch.dtype, device: torch.device):
    """The module built on the meta device, then given the weights: no float copy is made first."""
    with torch.device("meta"):
        module = module_class(dims)
    _load_module(module, state_dict, dtype, device)
    return module


def _placed(state_dict: dict, dtype: torch.dtype, device) -> dict:
    """Tensors on the device, contiguous and aligned (a tensor read from a file may sit at any
    offset in it, and kernels may read weights with aligned loads); float ones in dtype, int8
    weights left int8."""
    return {k: aligned(v.to(device=device, dtype=dtype if v.is_floating_point() else None))
            for k, v in state_dict.items()}


def _load_module(module: torch.nn.Module, state_dict: dict, dtype: torch.dtype, device: torch.device) -> None:
    state_dict = _placed(state_dict, dtype, device)
    missing, unexpected = module.load_state_dict(state_dict, strict=False, assign=True)
    module.requires_grad_(False)  # loaded models are for inference; distillation builds its own student
    missing = [m for m in missing if "kv_cache" not in m]
    if missing or unexpected:
        raise ValueError(f"weights do not fit the model: missing {missing[:5]}, unexpected {unexpected[:5]}")


def _encoder(ckpt: _Checkpoint, dims: ModelDims, dtype, device) -> Encoder:
    sd = {
        "conv1.weight": ckpt.get("encoder.conv1.weight"),
        "conv1.bias": ckpt.get("encoder.conv1.bias"),
        "conv2.weight": ckpt.get("encoder.conv2.weight"),
        "conv2.bias": ckpt.get("encoder.conv2.bias"),
        "positional_embedding": ckpt.get("encoder.embed_positions.weight"),
        "ln_post.weight": ckpt.get("encoder.layer_norm.weight"),
        "ln_post.bias": ckpt.get("encoder.layer_norm.bias"),
    }
    for i in range(dims.n_audio_layer):
        sd.update(_block_weights(ckpt, f"encoder.layers.{i}", f"blocks.{i}", cross=False))
    return _build(Encoder, dims, sd, dtype, device)


def _decoder(ckpt: _Checkpoint, dims: ModelDims, dtype, device, int8: bool) -> Decoder:
    sd = {
        "token_embedding.weight": ckpt.get("decoder.embed_tokens.weight"),
        "positional_embedding": ckpt.get("decoder.embed_positions.weight"),
        "ln.weight": ckpt.get("decoder.layer_norm.weight"),
        "ln.bias": ckpt.get("decoder.layer_norm.bias"),
    }
    for i in range(dims.n_text_layer):
        sd.update(_block_weights(ckpt, f"decoder.layers.{i}", f"blocks.{i}", cross=True))
    # Whisper ties the output projection to the embedding; an untied export keeps its own
    if "proj_out.weight" in ckpt.files:
        proj_out = ckpt.get("proj_out.weight", prefixed=False)
        if not torch.equal(proj_out, sd["token_embedding.weight"]):
            sd["proj_out.weight"] = proj_out
    return build_decoder(dims, quantize_decoder_state(sd) if int8 else sd, dtype, device)


def build_decoder(dims: ModelDims, state: dict, dtype, device) -> Decoder:
    """A decoder from its state dict, built on the meta device. int8 weights (with `.scales`) get
    int8 modules, so their float form is never allocated on the device."""
    with torch.device("meta"):
        decoder = Decoder(dims)
        if "proj_out.weight" in state:
            decoder.proj_out = Linear(dims.d_model, dims.n_vocab, bias=False)
    int8_modules(decoder, state)
    _load_module(decoder, state, dtype, device)
    if isinstance(decoder.token_embedding, Int8Embedding) and decoder.proj_out is None:
        decoder.proj_out = decoder.token_embedding.as_projection()
    elif decoder.proj_out is None:
        decoder.proj_out = Linear.of(decoder.token_embedding.weight)
    decoder.pack()
    return decoder


def decoder_state(decoder: Decoder) -> dict[str, torch.Tensor]:
    """The decoder's weights under our names, a tied projection not repeated."""
    state = decoder.state_dict()
    if isinstance(decoder.token_embedding, Int8Embedding) and decoder.proj_out.weight is decoder.token_embedding.weight:
        state = {k: v for k, v in state.items() if not k.startswith("proj_out.")}
    return state


def load_model(spec: str | Path, *, with_encoder: bool = True, dtype="float32", device="cpu",
               int8: bool = False) -> WhisperModel:
    """One Whisper model; with_encoder=False reads the decoder only. int8: decoder linears in
    int8 (always so for a directory written by `whisper-spec quantize`); the encoder stays float."""
    dtype = as_dtype(dtype)
    device = torch.device(device)
    path = resolve_model(str(spec))
    config = json.loads((path / "config.json").read_text())
    dims = read_dims(config)
    special = SpecialTokens.from_model_dir(path)
    prequantized = (path / QUANTIZATION_CONFIG).is_file()
    # the encoder is one pass per window: on CPU it runs float32, as half-precision convolutions
    # and matmuls without hardware support are several times slower there
    encoder_dtype = torch.float32 if device.type == "cpu" else dtype
    if prequantized:
        state = load_file(path / "model.safetensors")
        part = {name: {k.removeprefix(name + "."): v for k, v in state.items() if k.startswith(name + ".")}
                for name in ("encoder", "decoder")}
        encoder = _build(Encoder, dims, part["encoder"], encoder_dtype, device) if with_encoder else None
        decoder = build_decoder(dims, part["decoder"], dtype, device)
    else:
        ckpt = _Checkpoint(path)
        encoder = _encoder(ckpt, dims, encoder_dtype, device) if with_encoder else None
        decoder = _decoder(ckpt, dims, dtype, device, int8)
    return WhisperModel(str(spec), path, dims, special, TextDecoder(path, special), decoder, encoder)


ASSISTANT_CONFIG = "assistant.json"  # marks a distilled assistant directory (see distill.py)
ASSISTANT_FORMAT = "whisper-spec-assistant/1"


def is_distilled_assistant(path: Path) -> bool:
    return (Path(path) / ASSISTANT_CONFIG).is_file()


def output_weight(decoder: Decoder) -> torch.Tensor:
    """The float weight of the decoder's full-vocabulary logits: its projection or the tied embedding."""
    if isinstance(decoder.proj_out, Linear):
        return decoder.proj_out.weight
    return decoder.token_embedding.weight


def assistant_precision(dtype: torch.dtype, int8: bool, assistant_int8: bool | None, device: torch.device
                        ) -> tuple[torch.dtype, bool]:
    """The assistant's activation dtype and whether its decoder is int8.

    Its tokens are only proposals, every one verified by the main model, so its precision changes
    speed and acceptance, never the transcript. None (auto): int8 where the main model is, and on
    CPU wherever the fused int8 kernel runs (a 3-4x cheaper draft step there). int8 decoders
    compute in half precision: the CPU kernel is slow with float32 activations.
    """
    if assistant_int8 is None:
        assistant_int8 = int8 or (device.type == "cpu" and kernel_for("cpu", torch.bfloat16) == "int8pack_mm")
    if assistant_int8 and dtype == torch.float32:
        return torch.bfloat16, True
    return dtype, assistant_int8


def load_distilled(path: Path, main: WhisperModel, dtype, device, int8: bool = False) -> WhisperModel:
    """A distilled assistant: its own layers from disk, everything it shares from the main model.

    Shared as the main model's own modules, never stored: the token embedding (and with it the
    draft vocabulary's projection rows) and the cross-attention key/value projections of the main
    layers it was initialised from, whose cross keys and values the main decoder already computes.
    """
    path = Path(path)
    config = json.loads((path / ASSISTANT_CONFIG).read_text())
    name = f"assistant {path} cannot draft for {main.name}"
    if config.get("format") != ASSISTANT_FORMAT:
        raise IncompatiblePair(f"{name}: unknown assistant format {config.get('format')!r}")
    theirs = config["main_fingerprint"]
    for key, value in main.special.fingerprint().items():
        if json.loads(json.dumps(value)) != theirs.get(key):
            raise IncompatiblePair(f"{name}: it was distilled for other special tokens ({key} differs)")
    if config["main_dims"] != json.loads(json.dumps(main.dims.__dict__)):
        raise IncompatiblePair(f"{name}: it was distilled for a model of other dimensions ({config['main_dims']})")
    sources = config["layers_from_main"]
    dims = replace(main.dims, n_text_layer=len(sources))
    state = load_file(path / "model.safetensors")
    draft_vocab = state.pop("draft_vocab").long().to(device)
    if int8 and not any(k.endswith(".scales") for k in state):
        state = quantize_decoder_state(state)
    with torch.device("meta"):
        decoder = Decoder(dims)
    int8_modules(decoder, state)
    decoder.load_state_dict(_placed(state, dtype, device), strict=False, assign=True)
    decoder.requires_grad_(False)
    decoder.token_embedding = main.decoder.token_embedding
    for block, source in zip(decoder.blocks, sources):
        block.cross_attn.kv = main.decoder.blocks[source].cross_attn.kv
    decoder.cross_source = list(sources)
    decoder.proj_out = DraftVocabProjection(output_rows(main.decoder, draft_vocab, int8), draft_vocab, dims.n_vocab)
    decoder.pack()
    left = [n for n, t in decoder.state_dict().items() if t.is_meta]
    if left:
        raise ValueError(f"{path}: weights missing from model.safetensors: {left[:5]}")
    # its configuration and tokenizer files are the main model's
    languages = config.get("training", {}).get("training_data", {}).get("languages")
    return WhisperModel(str(path), main.path, dims, main.special, main.text, decoder, None,
                        tuple(languages) if languages else None, DISTILLED_FRAME_MARGIN)


def output_rows(decoder: Decoder, token_ids: torch.Tensor, int8: bool = False) -> torch.nn.Module:
    """A projection onto some tokens only: those rows of the decoder's output projection (int8:
    quantized, where the decoder's own projection is float)."""
    if isinstance(decoder.proj_out, Int8Linear):
        return decoder.proj_out.rows(token_ids)
    if int8:
        rows = Int8Linear(decoder.dims.d_model, len(token_ids), bias=False, device="meta")
        weight, scales = quantize_per_channel(output_weight(decoder)[token_ids])
        rows.weight, rows.scales = weight, scales.to(weight.device)
        return rows
    return Linear.of(output_weight(decoder)[token_ids])


def _is_decoder_only(path: Path) -> bool:
    config = json.loads((path / "config.json").read_text())
    if "WhisperForCausalLM" in (config.get("architectures") or []):
        return True
    return not _Checkpoint(path).has("encoder.conv1.weight")


def check_pair(main: WhisperModel, assistant: WhisperModel) -> None:
    """Raise IncompatiblePair naming the first mismatch that would make drafting wrong or impossible."""
    name = f"assistant {assistant.name} cannot draft for {main.name}"
    if main.dims.n_vocab != assistant.dims.n_vocab:
        raise IncompatiblePair(
            f"{name}: vocabulary sizes differ ({main.dims.n_vocab} vs {assistant.dims.n_vocab} tokens)"
        )
    mine, theirs = main.special.fingerprint(), assistant.special.fingerprint()
    for key in mine:
        if mine[key] != theirs[key]:
            raise IncompatiblePair(f"{name}: special token ids differ ({key}: {mine[key]} vs {theirs[key]})")
    if assistant.encoder is None:
        cross_in = assistant.decoder.blocks[0].cross_attn.kv.weight.shape[1]
        if cross_in != main.dims.d_model:
            raise IncompatiblePair(
                f"{name}: a shared encoder needs the assistant's cross-attention to read d_model={main.dims.d_model}, "
                f"it reads {cross_in}"
            )
        if assistant.dims.n_audio_ctx != main.dims.n_audio_ctx:
            raise IncompatiblePair(
                f"{name}: encoder lengths differ ({main.dims.n_audio_ctx} vs {assistant.dims.n_audio_ctx} frames)"
            )


def load_pair(
    main: str | Path,
    assistant: str | Path | None = None,
    *,
    assistant_encoder: str = "auto",
    dtype: str | torch.dtype = "float32",
    device: str | torch.device = "cpu",
    int8: bool = False,
    assistant_int8: bool | None = None,
) -> WhisperPair:
    """Load a main model and an optional assistant.

    assistant_encoder: "shared" (cross-attend to the main encoder; the assistant's encoder is never
    read), "own" (run the assistant's encoder on its own features), or "auto" (shared for
    decoder-only checkpoints, own otherwise). int8: the main decoder's linears in int8 (see
    quantize.py). assistant_int8: the assistant's, independently (see assistant_precision).
    """
    if assistant_encoder not in ("auto", "shared", "own"):
        raise ValueError(f"assistant_encoder must be auto, shared or own, not {assistant_encoder!r}")
    dtype = as_dtype(dtype)
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device cuda asked for, but torch sees no CUDA device")
    main_model = load_model(main, dtype=dtype, device=device, int8=int8)
    assistant_model = None
    assistant_dtype, assistant_int8 = assistant_precision(dtype, int8, assistant_int8, device)
    if assistant is not None and is_distilled_assistant(Path(assistant)):
        assistant_model = load_distilled(Path(assistant), main_model, assistant_dtype, device, assistant_int8)
    elif assistant is not None:
        path = resolve_model(str(assistant))
        decoder_only = _is_decoder_only(path)
        if assistant_encoder == "own" and decoder_only:
            raise IncompatiblePair(f"assistant {assistant}: has no encoder weights; use assistant_encoder='shared'")
        share = assistant_encoder == "shared" or (assistant_encoder == "auto" and decoder_only)
        assistant_model = load_model(path, with_encoder=not share, dtype=assistant_dtype, device=device,
                                     int8=assistant_int8)
        assistant_model.name = str(assistant)
        check_pair(main_model, assistant_model)
    return WhisperPair(main_model, assistant_model, device, dtype)


def decoder_subset(model: WhisperModel, layers: list[int], name: str | None = None) -> WhisperModel:
    """A decoder-only assistant made of some of model's decoder layers, sharing their weights.

    It has its own module objects (and so its own KV caches) but no weight copies.
    """
    if not layers or any(not 0 <= i < model.dims.n_text_layer for i in layers):
        raise ValueError(f"layers must be a non-empty subset of 0..{model.dims.n_text_layer - 1}")
    dims = replace(model.dims, n_text_layer=len(layers))
    source = model.decoder.state_dict()
    state = {k: v for k, v in source.items() if not k.startswith(("blocks.", "proj_out."))}
    for new, old in enumerate(layers):
        prefix = f"blocks.{old}."
        state.update({f"blocks.{new}.{k[len(prefix):]}": v for k, v in source.items() if k.startswith(prefix)})
    with torch.device("meta"):
        decoder = Decoder(dims)
    decoder.load_state_dict(state, assign=True)
    for new, old in enumerate(layers):  # packed copies are not in the state dict: share them too
        for name, mine in decoder.blocks[new].named_modules():
            if isinstance(mine, Linear):
                mine.packed = model.decoder.blocks[old].get_submodule(name).packed
    decoder.proj_out = model.decoder.proj_out
    decoder.cross_source = list(layers)
    label = name or f"{model.name}[decoder layers {','.join(map(str, layers))}]"
    return WhisperModel(label, model.path, dims, model.special, model.text, decoder, None)
