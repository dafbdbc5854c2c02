"""Shared fixtures: the real embedded models, real speech, and small random models."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from whisper_spec.models.draft_head import DraftHead
from whisper_spec.models.load import load_pair
from whisper_spec.models.model import Decoder, Encoder, Linear, ModelDims
from whisper_spec.models.pair import Whisper, WhisperPair, share_main_modules
from whisper_spec.models.tokenizer import SpecialTokens
from whisper_spec.options import DecodingOptions
from whisper_spec.speech.audio import load_audio, log_mel_spectrogram, pad_or_trim


def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto` (pyproject's addopts): a worker a core, at most 4 (more copies of the models for little gain)."""
    return max(1, min(4, len(os.sched_getaffinity(0))))


# In a pytest-xdist worker torch's threads are the worker's share of the cores, set before any pair
# loads (platform.use_threads honours OMP_NUM_THREADS) and inherited by the commands tests start:
# two workers' threads on one core make every parallel region wait for a time slice (docs/usage.md).
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    _worker_threads = max(1, len(os.sched_getaffinity(0)) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    os.environ["OMP_NUM_THREADS"] = str(_worker_threads)
    torch.set_num_threads(_worker_threads)

# WHISPER_SPEC_SPEECH: where the shared speech set is not beside the checkout (the GPU machine)
SPEECH = Path(os.environ.get("WHISPER_SPEC_SPEECH") or Path(__file__).resolve().parents[1].parent / "shared" / "data" / "speech")


def speech(relative: str) -> Path:
    path = SPEECH / relative
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the shared speech set is expected beside the repository")
    return path


def manifest() -> list[dict]:
    return [json.loads(line) for line in (SPEECH / "manifest.jsonl").read_text().splitlines() if line.strip()]


def main_alone(options: DecodingOptions) -> DecodingOptions:
    """The same options, decoded by the main model alone."""
    return replace(options, speculation="off")


def mel_of(paths, n_mels: int = 80) -> torch.Tensor:
    audio = torch.stack([pad_or_trim(torch.from_numpy(load_audio(p))) for p in paths])
    return log_mel_spectrogram(audio, n_mels)


@pytest.fixture(scope="session")
def base_pair() -> WhisperPair:
    """Real whisper base (converted from the embedded PyPI package), float32 on CPU, its encoder
    included and float32 too (the default on CPU is bfloat16 or int8, platform.default_encoder_precision)."""
    return load_pair("base", None, int8=False, encoder_precision="float32")


# A small vocabulary laid out like Whisper's: text tokens, then the special tokens, then timestamps
# (<|startofprev|> has no id of its own: the last text token stands in).
RANDOM_SPECIAL = SpecialTokens(
    eot=50, sot=51, transcribe=57, translate=56, no_timestamps=58,
    lang_to_id={"en": 52, "de": 53, "fr": 54, "nl": 55},
    suppress=(1, 2), begin_suppress=(50,),
    max_initial_timestamp_index=10, previous=49,
)
RANDOM_DIMS = ModelDims(n_mels=80, n_vocab=59 + 41, d_model=64, n_audio_ctx=1500, n_audio_layer=1, n_audio_head=2,
                        n_audio_ffn=128, n_text_ctx=64, n_text_layer=2, n_text_head=4, n_text_ffn=128)


def random_model(seed: int, dims: ModelDims = RANDOM_DIMS, with_encoder: bool = True, eot_bias: float = 0.0):
    torch.manual_seed(seed)
    encoder = Encoder(dims) if with_encoder else None
    if encoder is not None:
        encoder.positional_embedding.normal_(0, 0.1)
    decoder = Decoder(dims)
    with torch.no_grad():
        # scaled so that outputs depend on the audio and the prefix rather than repeat one token
        for name, p in decoder.named_parameters():
            if name.endswith("weight") and p.dim() == 2:
                p.mul_(3.0)
        decoder.token_embedding.weight.normal_(0, 0.3)
        decoder.positional_embedding.normal_(0, 0.3)
        decoder.ln.bias.normal_(0, 0.5)
        # the final bias times the EOT embedding is a constant EOT logit: rows end at varied steps
        decoder.token_embedding.weight[RANDOM_SPECIAL.eot] += eot_bias * decoder.ln.bias
    decoder.proj_out = Linear.of(decoder.token_embedding.weight)  # tied, as load.build_decoder makes it
    return Whisper(f"random-{seed}", Path("."), dims, RANDOM_SPECIAL, None, decoder.eval(),
                        encoder.eval() if encoder is not None else None)


def perturbed_decoder(model: Whisper, noise: float, seed: int) -> Whisper:
    """A decoder-only assistant that mostly agrees with model: its weights plus Gaussian noise."""
    torch.manual_seed(seed)
    decoder = Decoder(model.dims)
    decoder.load_state_dict({k: v for k, v in model.decoder.state_dict().items() if not k.startswith("proj_out.")})
    with torch.no_grad():
        for p in decoder.parameters():
            p.add_(torch.randn_like(p) * noise * p.std().clamp(min=1e-3))
    decoder.proj_out = Linear.of(decoder.token_embedding.weight)
    return Whisper(f"{model.name}+noise{noise}", model.path, model.dims, model.special, None, decoder.eval(), None)


def random_head(model: Whisper, seed: int, noise: float = 0.0, feature_layers: tuple[int, ...] = ()) -> Whisper:
    """A one-layer draft head for model (model.DraftHead), its layer model's last one, fusing the
    hidden state before a token (with feature_layers: and those layers' outputs, reduced at random)
    with the token's embedding at random; it shares model's embedding, output rows and last
    cross-attention projection. Untrained: it agrees with model by chance."""
    torch.manual_seed(seed)
    last = model.dims.n_text_layer - 1
    dims = replace(model.dims, n_text_layer=1)
    head = DraftHead(dims, feature_layers)
    with torch.no_grad():
        head.blocks[0].load_state_dict(model.decoder.blocks[last].state_dict())
        head.positional_embedding.copy_(model.decoder.positional_embedding)
        head.ln.load_state_dict(model.decoder.ln.state_dict())
        for p in head.parameters():
            p.add_(torch.randn_like(p) * noise * p.std().clamp(min=1e-3))
    share_main_modules(head, model.decoder, [last], torch.arange(model.dims.n_vocab))
    return Whisper(f"{model.name}+head", model.path, dims, model.special, None, head.eval(), None)
