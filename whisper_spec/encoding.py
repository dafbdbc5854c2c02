"""A batch of windows -> features -> encoder states in the decoders' cross-attention, run once per
window; and the main model's language detection on them."""

from __future__ import annotations

import time

import torch
from torch import Tensor

from .audio import batch_features, signal_frames
from .pair import Whisper, WhisperPair
from .stats import DecodingStats


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work, so a timer read after it measures that work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def encoder_states(model: Whisper, mel: Tensor) -> Tensor:
    """The model's encoder states of a batch of windows, [batch, frames, d_model]. On CPU one
    window at a time: a batched pass's activations (50 MB a matrix at 4 windows) are past the sizes
    glibc's allocator keeps mapped, so every such pass page-faults gigabytes of fresh pages (10% of
    its time at batch 4, measured: benchmarks/cpu_costs.py), and a window's states then do not
    depend on the windows beside it (float32 GEMMs are not row-invariant, and the int8 encoder
    takes its activation range per call): on CPU, batching never changes a transcript."""
    mel = mel.to(model.decoder.positional_embedding.device)
    if mel.device.type == "cpu" and len(mel) > 1:
        return torch.cat([model.encoder(window) for window in mel.split(1)])
    return model.encoder(mel)


def sot_logits(model: Whisper, n_rows: int) -> Tensor:
    """The main model's logits after <|startoftranscript|> alone, per row of the decoder's cross
    state: what language detection and the no-speech probability read."""
    device = model.decoder.token_embedding.weight.device
    sot = torch.full((n_rows, 1), model.special.sot, device=device)
    return model.decoder(sot, torch.zeros_like(sot), n_logits=1)[:, 0]


def detect_language(model: Whisper, logits: Tensor) -> list[str]:
    """The most likely language token in sot_logits, per row."""
    special = model.special
    language_ids = torch.tensor(list(special.lang_to_id.values()), device=logits.device)
    best = language_ids[logits[:, language_ids].argmax(dim=-1)]
    return [special.id_to_lang[int(i)] for i in best]


@torch.inference_mode()
def detect_languages(pair: WhisperPair, mel: Tensor) -> list[str]:
    """The language of each window, from the main model alone (encoder and one decoder step)."""
    pair.main.decoder.ensure_caches(mel.shape[0], 1)
    pair.main.decoder.set_cross(encoder_states(pair.main, mel))
    return detect_language(pair.main, sot_logits(pair.main, mel.shape[0]))


def assistant_frames(assistant: Whisper, mel: Tensor) -> int | None:
    """The encoder frames the assistant attends to for this batch (None: all): up to the end of
    the longest audio plus its margin. Its drafts need not be exact, and skipping the padding
    after short audio halves the bytes its cross-attention reads on CPU. On GPUs, where steps are
    captured as CUDA graphs, one shape for every batch counts for more: all frames."""
    if assistant.audio_frame_margin is None or assistant.decoder.positional_embedding.device.type != "cpu":
        return None
    n_audio_ctx = assistant.dims.n_audio_ctx
    frames = -(-int(signal_frames(mel).max()) * n_audio_ctx // mel.shape[-1])
    return min(n_audio_ctx, frames + assistant.audio_frame_margin)


def pair_features(pair: WhisperPair, audio: list) -> tuple[Tensor, Tensor | None]:
    """Features of clips of at most one window each for the main model, and for an assistant with
    its own encoder and other mel settings (else None: it reads the main features)."""
    mel = batch_features(audio, pair.main.dims.n_mels, pair.device)
    assistant = pair.assistant
    if assistant is not None and assistant.encoder is not None and assistant.dims.n_mels != pair.main.dims.n_mels:
        return mel, batch_features(audio, assistant.dims.n_mels, pair.device)
    return mel, None


def encode(pair: WhisperPair, mel: Tensor, assistant_mel: Tensor | None, stats: DecodingStats) -> None:
    """Run the encoder(s) once for the batch and hand their states to the decoders' cross-attention."""
    synchronize(pair.device)
    start = time.perf_counter()
    with torch.inference_mode():
        states = encoder_states(pair.main, mel)
        pair.main.decoder.set_cross(states)
        if pair.assistant is not None:
            n_frames = assistant_frames(pair.assistant, mel)
            if pair.shares_encoder:
                pair.assistant.decoder.set_cross(states, main=pair.main.decoder, n_frames=n_frames)
            else:
                own_mel = mel if assistant_mel is None else assistant_mel
                pair.assistant.decoder.set_cross(encoder_states(pair.assistant, own_mel), n_frames=n_frames)
    synchronize(pair.device)
    stats.encoder_seconds += time.perf_counter() - start
