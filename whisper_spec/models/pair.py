"""A main model and its assistant: the loaded-model types, the pairing rules, and what an assistant
shares with its main model.

Nothing here reads a checkpoint (see load.py): decoding works on these types alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from torch import nn

from ..speech.vad import SpeechDetector
from .draft_head import DraftHead
from .model import Decoder, DraftVocabProjection, Encoder, Linear, ModelDims
from .platform import Platform, onednn_packed, resolve
from .quantize import DynamicInt8Linear, Int8Linear, quantize_per_channel
from .tokenizer import SpecialTokens, Tokenizer


class IncompatiblePair(ValueError):
    """The assistant cannot draft for the main model; the message names the mismatch."""


@dataclass
class Whisper:
    """A loaded model: its network (an assistant may have a decoder only) and its vocabulary."""

    name: str
    path: Path  # the directory its configuration and tokenizer come from
    dims: ModelDims
    special: SpecialTokens
    tokenizer: Tokenizer
    decoder: Decoder
    encoder: Encoder | None  # None for a decoder-only assistant
    # as an assistant: the languages it drafts for (a distilled one: those it was trained on;
    # other rows are decoded by the main model alone); None: every language
    draft_languages: tuple[str, ...] | None = None
    # as an assistant: the tasks it drafts for (a distilled one: those it was trained on, as drafts for
    # another are rejected nearly always); None: every task
    draft_tasks: tuple[str, ...] | None = None
    # as an assistant: cross-attend only to the encoder frames up to the end of the audio plus
    # this many, skipping the padding (half or more of a short clip's window); None: all frames
    audio_frame_margin: int | None = None
    # (layer, head) of the decoder's cross-attention heads that follow the audio in time: word timing
    # reads them (published by OpenAI per model, in generation_config.json); empty: not known
    alignment_heads: tuple[tuple[int, int], ...] = ()

    def drafts_for(self, task: str) -> bool:
        """As an assistant: whether it takes part in decoding this task at all."""
        return self.draft_tasks is None or task in self.draft_tasks

    @property
    def is_draft_head(self) -> bool:
        """An assistant that drafts from the main decoder's hidden states (model.DraftHead)."""
        return isinstance(self.decoder, DraftHead)


# Encoder frames (1 s) a distilled assistant attends past the end of the audio: its acceptance is the
# same as with every frame; full models drafting attend to every frame (decisions, "Assistant frame margin")
DISTILLED_FRAME_MARGIN = 50


@dataclass
class WhisperPair:
    main: Whisper
    assistant: Whisper | None
    device: torch.device
    dtype: torch.dtype
    platform: Platform = field(init=False)  # resolved for these decoders on this device when the pair is made
    _speech_detector: SpeechDetector | None = field(init=False, default=None, repr=False)

    def __post_init__(self):
        self.platform = resolve(self.main.decoder, self.assistant.decoder if self.assistant is not None else None,
                                self.device)

    @property
    def speech_detector(self) -> SpeechDetector:
        """Silero VAD, for long audio and live buffers: loaded at first use (short clips never need it), kept
        with the pair as everything it decodes with is (decisions, "The house by stage")."""
        if self._speech_detector is None:
            self._speech_detector = SpeechDetector()
        return self._speech_detector

    @property
    def shares_encoder(self) -> bool:
        return self.assistant is not None and self.assistant.encoder is None

    @property
    def int8_kernel(self) -> str | None:
        """The int8 matmul the decoders use ('int8pack_mm', 'compiled', 'dequantize'), None if float."""
        if not isinstance(self.main.decoder.proj_out, Int8Linear):
            return None
        return self.main.decoder.proj_out.kernels[self.dtype]


def decoder_precision(model: Whisper) -> str:
    """'float32', 'bfloat16', ... or 'int8/bfloat16' (int8 linears, bfloat16 activations)."""
    decoder = model.decoder
    dtype = str(decoder.dtype).removeprefix("torch.")
    return f"int8/{dtype}" if isinstance(decoder.blocks[0].mlp.fc1, Int8Linear) else dtype


def encoder_precision(model: Whisper) -> str | None:
    """'float32', ... or 'int8' (int8 linears, activations quantized per row at each call); None without an encoder."""
    if model.encoder is None:
        return None
    linear = model.encoder.blocks[0].mlp.fc1
    return "int8" if isinstance(linear, DynamicInt8Linear) else str(model.encoder.conv1.weight.dtype).removeprefix("torch.")


# ---------------------------------------------------------------------------- pairing rules


def check_pair(main: Whisper, assistant: Whisper) -> None:
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


ASSISTANT_CONFIG = "assistant.json"  # marks a distilled assistant directory (see distill/)
# config.json's entry for an exported assistant's drafting limits (Whisper.draft_languages, draft_tasks,
# audio_frame_margin), which transformers keeps as an unknown config attribute and ignores
DRAFTING_CONFIG = "whisper_spec_drafting"
ASSISTANT_FORMAT = "whisper-spec-assistant/1"
HEAD_KIND = "head"  # assistant.json's "kind" of a draft head (model.DraftHead); others are decoders


def is_distilled_assistant(path: str | Path) -> bool:
    return (Path(path) / ASSISTANT_CONFIG).is_file()


def check_distilled(config: dict, path: Path, main: Whisper) -> None:
    """A distilled assistant drafts only for the main model it was distilled from: same special
    tokens, same dimensions (it reads that model's encoder output and shares its modules)."""
    name = f"assistant {path} cannot draft for {main.name}"
    if config.get("format") != ASSISTANT_FORMAT:
        raise IncompatiblePair(f"{name}: unknown assistant format {config.get('format')!r}")
    theirs = config["main_fingerprint"]
    for key, value in main.special.fingerprint().items():
        if json.loads(json.dumps(value)) != theirs.get(key):
            raise IncompatiblePair(f"{name}: it was distilled for other special tokens ({key} differs)")
    if config["main_dims"] != json.loads(json.dumps(main.dims.__dict__)):
        raise IncompatiblePair(f"{name}: it was distilled for a model of other dimensions ({config['main_dims']})")


# ---------------------------------------------------------------------------- what an assistant shares

# A distilled assistant uses these main-model modules as they are: they are never trained, never
# stored in its directory, and the main decoder's cross keys/values serve both decoders.
SHARED_WITH_MAIN = ("token embedding and output projection rows",
                    "cross-attention key/value projections of layers_from_main")


def _is_shared(name: str) -> bool:
    return name.startswith(("token_embedding.", "proj_out.")) or ".cross_attn.kv." in name


def share_main_modules(decoder: Decoder, main: Decoder, sources: list[int], draft_vocab: torch.Tensor,
                       int8: bool = False) -> None:
    """Make decoder a distilled assistant of main: its blocks take the cross-attention key/value
    projections of the main layers they started from (sources), its embedding is main's, and it
    projects onto the draft vocabulary's rows of main's output projection (int8: quantized)."""
    decoder.token_embedding = main.token_embedding
    for block, source in zip(decoder.blocks, sources):
        block.cross_attn.kv = main.blocks[source].cross_attn.kv
    decoder.cross_source = list(sources)
    rows = output_rows(main, draft_vocab, int8, scales_dtype=decoder.dtype)
    decoder.proj_out = DraftVocabProjection(rows, draft_vocab, decoder.dims.n_vocab)


def own_state(decoder: Decoder) -> dict[str, torch.Tensor]:
    """A distilled assistant's own weights: what its directory stores and distillation trains."""
    return {name: tensor for name, tensor in decoder.state_dict().items() if not _is_shared(name)}


def output_weight(decoder: Decoder) -> torch.Tensor:
    """The float weight of the decoder's full-vocabulary logits: its projection or the tied embedding."""
    if isinstance(decoder.proj_out, Linear):
        return decoder.proj_out.weight
    return decoder.token_embedding.weight


def output_rows(decoder: Decoder, token_ids: torch.Tensor, int8: bool = False,
                scales_dtype: torch.dtype = torch.float32) -> nn.Module:
    """A projection onto some tokens only: those rows of the decoder's output projection (int8:
    quantized, where the decoder's own projection is float, with scales in scales_dtype: the
    activation dtype of the decoder they serve, as the compiled int8 matmul wants them)."""
    if isinstance(decoder.proj_out, Int8Linear):
        return decoder.proj_out.rows(token_ids)
    if int8:
        rows = Int8Linear(decoder.dims.d_model, len(token_ids), bias=False, device="meta")
        weight, scales = quantize_per_channel(output_weight(decoder)[token_ids])
        rows.weight, rows.scales = weight, scales.to(device=weight.device, dtype=scales_dtype)
        rows.int8_activations = True
        return rows
    rows = Linear.of(output_weight(decoder)[token_ids])
    rows.packed = onednn_packed(rows.weight)  # frozen: its packed copy stays right while a student trains
    return rows


def decoder_subset(model: Whisper, layers: list[int], name: str | None = None) -> Whisper:
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
        for module_name, mine in decoder.blocks[new].named_modules():
            if isinstance(mine, Linear):
                mine.packed = model.decoder.blocks[old].get_submodule(module_name).packed
    decoder.proj_out = model.decoder.proj_out
    decoder.cross_source = list(layers)
    label = name or f"{model.name}[decoder layers {','.join(map(str, layers))}]"
    return Whisper(label, model.path, dims, model.special, model.tokenizer, decoder, None)
