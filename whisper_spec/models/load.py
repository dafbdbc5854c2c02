"""Checkpoints -> a main model and an assistant paired so that they share work where they can.

A decoder-only assistant (distil-whisper's `WhisperForCausalLM`, or any checkpoint loaded with
`assistant_encoder="shared"`) never has its encoder weights read: it cross-attends to the main
model's encoder output. A full assistant keeps its own encoder and its own mel settings. A
distilled assistant (whisper-spec distill) is its own layers from disk plus the modules it shares
with the main model (pair.share_main_modules).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
from dataclasses import replace
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from ..options import DTYPES, ENCODER_PRECISIONS
from . import quantize
from .checkpoint import Checkpoint, read_dims, save_safetensors, to_ours
from .draft_head import DraftHead
from .model import Decoder, Encoder, Linear, ModelDims
from .pair import (
    ASSISTANT_CONFIG,
    DISTILLED_FRAME_MARGIN,
    DRAFTING_CONFIG,
    HEAD_KIND,
    IncompatiblePair,
    Whisper,
    WhisperPair,
    check_distilled,
    check_pair,
    is_distilled_assistant,
    share_main_modules,
)
from .platform import (
    check_device,
    default_device,
    default_encoder_precision,
    default_int8,
    default_precision,
    dynamic_int8_runs,
    int8_assistant_in_bfloat16,
    prepare,
    prepare_assistant,
    use_threads,
)
from .quantize import (
    Int8Embedding,
    aligned,
    dynamic_int8_weights,
    int8_modules,
    quantize_decoder_state,
    quantize_dynamic_linears,
)
from .sources import QUANTIZATION_CONFIG, ModelNotFound, cache_dir, default_assistant, resolve_model
from .tokenizer import SpecialTokens, Tokenizer, read_vocabulary


def as_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    return getattr(torch, dtype)


def _build(module_class, dims: ModelDims, state_dict: dict, dtype: torch.dtype, device: torch.device):
    """The module built on the meta device, then given the weights (no float copy is made first),
    prepared for the device."""
    with torch.device("meta"):
        module = module_class(dims)
    _load_module(module, state_dict, dtype, device)
    prepare(module, torch.device(device))
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
    if missing or unexpected:
        raise ValueError(f"weights do not fit the model: missing {missing[:5]}, unexpected {unexpected[:5]}")


def _encoder(ckpt: Checkpoint, dims: ModelDims, dtype, device) -> Encoder:
    return _build(Encoder, dims, to_ours(ckpt.get, "encoder", dims.n_audio_layer), dtype, device)


def _decoder(ckpt: Checkpoint, dims: ModelDims, dtype, device, int8: bool) -> Decoder:
    def state() -> dict:
        state = to_ours(ckpt.get, "decoder", dims.n_text_layer)
        # Whisper ties the output projection to the embedding; an untied export keeps its own
        if "proj_out.weight" in ckpt.files:
            proj_out = ckpt.get("proj_out.weight", prefixed=False)
            if not torch.equal(proj_out, state["token_embedding.weight"]):
                state["proj_out.weight"] = proj_out
        return state

    if not int8:
        return build_decoder(dims, state(), dtype, device)
    return build_decoder(dims, cached_int8("decoder", ckpt.sources, lambda: quantize_decoder_state(state())), dtype,
                         device)


INT8_CACHE_ENTRIES = 8  # cached_int8 keeps the files used last, so that old models and edits do not pile up


@functools.cache
def _quantizer_identity() -> str:
    return hashlib.sha256(Path(quantize.__file__).read_bytes()).hexdigest()


def cached_int8(kind: str, sources: list[Path], quantize_now) -> dict[str, torch.Tensor]:
    """quantize_now()'s tensors (int8 weights and their scales), kept in the cache under the
    identity of the source files (path, size, modification time), of the quantizer (quantize.py's
    text) and of kind, so that a warm start reads them rather than quantizing again (about 0.5 s of
    every start for base and its assistant). A cache file that cannot be written or read only
    costs that time again; the INT8_CACHE_ENTRIES files used last are kept."""
    identity = [kind, _quantizer_identity()]
    identity += [[str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns] for p in sources]
    folder = cache_dir() / "int8"
    cached = folder / f"{hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:24]}.safetensors"
    tensors = None
    if cached.is_file():
        try:
            tensors = load_file(cached)
        except (OSError, SafetensorError):
            pass
    if tensors is not None:
        with contextlib.suppress(OSError):  # its modification time says when it was used last
            os.utime(cached)
        return tensors
    tensors = quantize_now()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        partial = cached.with_name(f"{cached.name}.{os.getpid()}.partial")
        save_safetensors({k: v.contiguous() for k, v in tensors.items()}, partial)
        partial.replace(cached)
        by_use = sorted(folder.glob("*.safetensors"), key=lambda f: f.stat().st_mtime_ns, reverse=True)
        for stale in by_use[INT8_CACHE_ENTRIES:]:
            stale.unlink(missing_ok=True)
    except OSError:
        pass
    return tensors


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
    prepare(decoder, torch.device(device))
    return decoder


def _alignment_heads(listed, dims) -> tuple[tuple[int, int], ...]:
    """The generation config's alignment heads that this decoder has: a distilled checkpoint may list
    its teacher's, naming layers it lacks (the rest time words; with none left, timing.alignment_heads
    falls back to the later half's heads)."""
    heads = ((int(layer), int(head)) for layer, head in listed)
    return tuple((layer, head) for layer, head in heads if 0 <= layer < dims.n_text_layer and 0 <= head < dims.n_text_head)


def load_model(spec: str | Path, *, with_encoder: bool = True, dtype="float32", device="cpu",
               int8: bool = False, encoder_precision: str | None = None) -> Whisper:
    """One Whisper model; with_encoder=False reads the decoder only. int8: decoder linears in
    int8 (always so for a directory written by `whisper-spec quantize`). encoder_precision: one of
    ENCODER_PRECISIONS, None for default_encoder_precision; "int8": the products of a window's 1500
    frames in int8, weights and activations (CPU only, see DynamicInt8Linear): the encoder's linears
    and the decoder's cross-attention keys and values, the rest float32."""
    dtype = as_dtype(dtype)
    device = torch.device(device)
    encoder_precision = encoder_precision or default_encoder_precision(device, dtype)
    if encoder_precision not in ENCODER_PRECISIONS:
        raise ValueError(f"encoder precision must be one of {', '.join(ENCODER_PRECISIONS)}, not {encoder_precision!r}")
    int8_encoder = encoder_precision == "int8"
    path = resolve_model(str(spec))
    prequantized = (path / QUANTIZATION_CONFIG).is_file()
    encoder_dtype = torch.float32 if int8_encoder else as_dtype(encoder_precision)
    with _reading(path):
        config = json.loads((path / "config.json").read_text())
        dims = read_dims(config)
        vocabulary = read_vocabulary(path)
        special = SpecialTokens.from_model_dir(path, vocabulary)
        if prequantized:
            state = load_file(path / "model.safetensors")
            part = {name: {k.removeprefix(name + "."): v for k, v in state.items() if k.startswith(name + ".")}
                    for name in ("encoder", "decoder")}
            encoder = _build(Encoder, dims, part["encoder"], encoder_dtype, device) if with_encoder else None
            decoder = build_decoder(dims, part["decoder"], dtype, device)
        else:
            ckpt = Checkpoint(path)
            encoder = _encoder(ckpt, dims, encoder_dtype, device) if with_encoder else None
            decoder = _decoder(ckpt, dims, dtype, device, int8)
        generation = json.loads((path / "generation_config.json").read_text())
    if int8_encoder:
        if not dynamic_int8_runs(device):
            raise ValueError(f"int8 encoder linears run on CPU with torch's oneDNN engine only, not on {device}")
        # the decoder's weights (int8 or not, and their dtype) are what its key/value projections quantize from
        kind = f"dynamic encoder={encoder is not None} int8 decoder={int8 or prequantized} {dtype}"
        sources = [path / "model.safetensors"] if prequantized else ckpt.sources
        quantized = cached_int8(kind, sources, lambda: dynamic_int8_weights(encoder, decoder))
        quantize_dynamic_linears(encoder, decoder, quantized)
    heads = _alignment_heads(generation.get("alignment_heads") or (), dims)
    drafting = config.get(DRAFTING_CONFIG) or {}  # an exported distilled assistant's (export.save_model)
    languages, tasks = drafting.get("draft_languages"), drafting.get("draft_tasks")
    return Whisper(str(spec), path, dims, special, Tokenizer(vocabulary, special), decoder, encoder, alignment_heads=heads,
                   draft_languages=tuple(languages) if languages is not None else None,
                   draft_tasks=tuple(tasks) if tasks is not None else None,
                   audio_frame_margin=drafting.get("audio_frame_margin"))


@contextlib.contextmanager
def _reading(path: Path):
    """A model directory whose files cannot be used (truncated weights, a config of another model
    type, a missing file) as one line naming it; a pair that does not fit stays its own error."""
    try:
        yield
    except (ModelNotFound, IncompatiblePair):
        raise
    except Exception as error:  # noqa: BLE001 - whatever a broken file raises, it is the directory's problem
        message = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise ModelNotFound(f"{path}: cannot read the model ({type(error).__name__}: {message})") from error


def assistant_precision(dtype: torch.dtype, int8: bool, assistant_int8: bool | None, device: torch.device
                        ) -> tuple[torch.dtype, bool]:
    """The assistant's activation dtype and whether its decoder is int8.

    Its tokens are only proposals, every one verified by the main model, so its precision changes
    speed and acceptance, never the transcript. None (auto): int8 where the main model is, and on
    CPU wherever a fast int8 kernel runs (a 3-4x cheaper draft step there). An int8 assistant of a
    float32 main model computes in bfloat16 wherever aten's fused int8-weight kernel runs: its
    steps are one row a call, where that kernel beats the row-int8 one the main model's float32
    verification passes take (quantize.ROW_INT8_SCALE).
    """
    if assistant_int8 is None:
        assistant_int8 = int8 or default_int8(device)
    if assistant_int8 and dtype == torch.float32 and int8_assistant_in_bfloat16(device):
        return torch.bfloat16, True
    return dtype, assistant_int8


def load_distilled(path: Path, main: Whisper, dtype, device, int8: bool = False) -> Whisper:
    """A distilled assistant: its own layers from disk, everything it shares from the main model.

    Shared as the main model's own modules, never stored: the token embedding (and with it the
    draft vocabulary's projection rows) and the cross-attention key/value projections of the main
    layers it was initialised from, whose cross keys and values the main decoder already computes.
    """
    path = Path(path)
    with _reading(path):
        config = json.loads((path / ASSISTANT_CONFIG).read_text())
        check_distilled(config, path, main)
        sources = config["layers_from_main"]
        dims = replace(main.dims, n_text_layer=len(sources))
        weights = path / "model.safetensors"
        state = load_file(weights)
        draft_vocab = state.pop("draft_vocab").long().to(device)
    if int8 and not any(k.endswith(".scales") for k in state):
        float_state = state
        state = cached_int8("decoder", [weights], lambda: quantize_decoder_state(float_state))
    with torch.device("meta"):
        decoder = (DraftHead(dims, tuple(config.get("feature_layers", ()))) if config.get("kind") == HEAD_KIND
                   else Decoder(dims))
    int8_modules(decoder, state)
    decoder.load_state_dict(_placed(state, dtype, device), strict=False, assign=True)
    decoder.requires_grad_(False)
    share_main_modules(decoder, main.decoder, sources, draft_vocab, int8)
    prepare(decoder, torch.device(device))
    prepare_assistant(decoder, main.decoder, torch.device(device))
    left = [n for n, t in decoder.state_dict().items() if t.is_meta]
    if left:
        raise ValueError(f"{path}: weights missing from model.safetensors: {left[:5]}")
    # its configuration and tokenizer files are the main model's
    # assistants written before draft_languages was stored drafted for every language they were trained on
    languages = config.get("draft_languages", config.get("training", {}).get("training_data", {}).get("languages"))
    # and those written before draft_tasks was stored were distilled on transcripts only
    tasks = config.get("draft_tasks", ("transcribe",))
    return Whisper(str(path), main.path, dims, main.special, main.tokenizer, decoder, None,
                   draft_languages=tuple(languages) if languages else None, draft_tasks=tuple(tasks),
                   audio_frame_margin=DISTILLED_FRAME_MARGIN)


DEFAULT_ASSISTANT = "default"  # load_pair's assistant: the main model's shipped distilled one, where it has one


def load_pair(
    main: str | Path,
    assistant: str | Path | None = DEFAULT_ASSISTANT,
    *,
    assistant_encoder: str = "auto",
    dtype: str | torch.dtype | None = None,
    device: str | torch.device | None = None,
    int8: bool | None = None,
    assistant_int8: bool | None = None,
    encoder_precision: str | None = None,
    threads: int | None = None,
) -> WhisperPair:
    """Load a main model and an optional assistant, as the command line does where not told otherwise.

    assistant: a model or assistant directory (any form `main` takes), DEFAULT_ASSISTANT (the
    main model's shipped distilled assistant, as the command line uses; none for a model without
    one), or None (the main model alone).
    assistant_encoder: "shared" (cross-attend to the main encoder; the assistant's encoder is never
    read), "own" (run the assistant's encoder on its own features), or "auto" (shared for
    decoder-only checkpoints, own otherwise). int8: the main decoder's linears in int8 (see
    quantize.py); dtype: the decoders' activations; None: the device's default (platform.default_precision:
    int8 on CPU where a fast int8 kernel runs). assistant_int8: the assistant's, independently (see
    assistant_precision).
    encoder_precision: the encoders' (see load_model; None: default_encoder_precision). device: None:
    the command line's default (platform.default_device: CUDA where there is one). threads: torch's
    CPU threads, which are the process's (platform.use_threads): None sets the cores no other process
    keeps busy on the first load, as the command line does, and keeps the count after that.
    """
    if assistant_encoder not in ("auto", "shared", "own"):
        raise ValueError(f"assistant_encoder must be auto, shared or own, not {assistant_encoder!r}")
    if isinstance(assistant, str) and assistant == DEFAULT_ASSISTANT:
        assistant = default_assistant(str(main))
    device = torch.device(device) if device is not None else default_device()
    check_device(device)
    use_threads(threads)
    int8, dtype = default_precision(device, int8, dtype)
    dtype = as_dtype(dtype)
    main_model = load_model(main, dtype=dtype, device=device, int8=int8, encoder_precision=encoder_precision)
    assistant_model = None
    assistant_dtype, assistant_int8 = assistant_precision(dtype, int8, assistant_int8, device)
    if assistant is not None and is_distilled_assistant(Path(assistant)):
        assistant_model = load_distilled(Path(assistant), main_model, assistant_dtype, device, assistant_int8)
    elif assistant is not None:
        path = resolve_model(str(assistant))
        with _reading(path):
            decoder_only = Checkpoint(path).is_decoder_only(json.loads((path / "config.json").read_text()))
        if assistant_encoder == "own" and decoder_only:
            raise IncompatiblePair(f"assistant {assistant}: has no encoder weights; let it read the main model's "
                                   "(--assistant-encoder shared; in Python assistant_encoder='shared')")
        share = assistant_encoder == "shared" or (assistant_encoder == "auto" and decoder_only)
        assistant_model = load_model(path, with_encoder=not share, dtype=assistant_dtype, device=device,
                                     int8=assistant_int8, encoder_precision=encoder_precision)
        assistant_model.name = str(assistant)
        check_pair(main_model, assistant_model)
    return WhisperPair(main_model, assistant_model, device, dtype)
