"""A batch of windows -> features -> encoder states -> each decoder's cross-attention keys and values
(Encoded), run once per window; and the main model's language detection on them."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import Tensor

from ..models.attention import CrossStates, DecoderCaches
from ..models.pair import Whisper, WhisperPair
from ..models.platform import synchronize
from ..speech.audio import batch_features, signal_frames
from .stats import DecodingStats


@dataclass(frozen=True)
class Encoded:
    """A batch of windows as the decoders read it: each one's cross-attention keys and values of
    the batch's audio (model.Decoder.cross_states); the assistant's where it takes part."""

    main: CrossStates
    assistant: CrossStates | None = None

    @property
    def batch(self) -> int:
        return self.main[0][0].shape[0]

    def rows(self, keep: list[int]) -> "Encoded":
        """These windows only, in this order."""
        def take(cross: CrossStates | None) -> CrossStates | None:
            return cross and [(k[keep], v[keep]) for k, v in cross]
        return Encoded(take(self.main), take(self.assistant))


def encoder_states(model: Whisper, mel: Tensor, known: list[Tensor | None] | None = None) -> Tensor:
    """The model's encoder states of a batch of windows, [batch, frames, d_model]; one window a
    call where the platform says so (CPU: a window's states then do not depend on the windows
    beside it, and batching never changes a transcript; decisions, "One encoder window a call on CPU").
    known: per row, the window's states where already computed ([1, frames, d_model]; the file's
    language detection, chunk_languages.file_language): those rows are not encoded again."""
    if known is not None and any(k is not None for k in known):
        missing = [i for i, k in enumerate(known) if k is None]
        fresh = iter(encoder_states(model, mel[missing]).split(1) if missing else ())
        return torch.cat([next(fresh) if k is None else k for k in known])
    mel = mel.to(model.decoder.positional_embedding.device)
    if model.encoder.one_window_a_call and len(mel) > 1:
        return torch.cat([model.encoder(window) for window in mel.split(1)])
    return model.encoder(mel)


def sot_logits(model: Whisper, caches: DecoderCaches) -> Tensor:
    """The main model's logits after <|startoftranscript|> alone, per row of the caches: what
    language detection and the no-speech probability read."""
    device = model.decoder.token_embedding.weight.device
    sot = torch.full((caches.cross[0][0].shape[0], 1), model.special.sot, device=device)
    return model.decoder(sot, torch.zeros_like(sot), caches, n_logits=1)[:, 0]


def language_probabilities(model: Whisper, logits: Tensor, candidates: tuple[str, ...] | None = None
                           ) -> tuple[list[str], Tensor]:
    """The languages detection picks from (candidates, codes or names, where given:
    DecodingOptions.language_candidates; else all the model knows) and each row's probabilities
    over them, from sot_logits."""
    special = model.special
    codes = list(special.lang_to_id) if candidates is None else [special.language_code(c) for c in candidates]
    language_ids = torch.tensor([special.lang_to_id[code] for code in codes], device=logits.device)
    return codes, torch.softmax(logits[:, language_ids].float(), dim=-1)


def most_likely(codes: list[str], probabilities: Tensor) -> tuple[list[str], list[float]]:
    """Each row's most likely language and its probability."""
    best_probabilities, best = probabilities.max(dim=-1)
    return [codes[int(i)] for i in best], best_probabilities.tolist()


def detect_language(model: Whisper, logits: Tensor, candidates: tuple[str, ...] | None = None
                    ) -> tuple[list[str], list[float]]:
    """Each row's most likely language and its probability (language_probabilities)."""
    return most_likely(*language_probabilities(model, logits, candidates))


@torch.inference_mode()
def states_language_probabilities(pair: WhisperPair, states: Tensor, candidates: tuple[str, ...] | None = None
                                  ) -> tuple[list[str], Tensor]:
    """language_probabilities of each window of the main encoder's states (one main decoder step)."""
    return cross_language_probabilities(pair.main, pair.main.decoder.cross_states(states), candidates)


@torch.inference_mode()
def cross_language_probabilities(model: Whisper, cross: CrossStates, candidates: tuple[str, ...] | None = None
                                 ) -> tuple[list[str], Tensor]:
    """language_probabilities of each window of a batch already encoded for the main decoder
    (Encoded.main): one decoder step, the cross-attention states reused."""
    caches = DecoderCaches(cross, model.decoder.new_caches(cross[0][0].shape[0], 1))
    return language_probabilities(model, sot_logits(model, caches), candidates)


@torch.inference_mode()
def window_language_probabilities(pair: WhisperPair, mel: Tensor, candidates: tuple[str, ...] | None = None
                                  ) -> tuple[list[str], Tensor]:
    """language_probabilities of each window, from the main model alone (encoder and one decoder step)."""
    return states_language_probabilities(pair, encoder_states(pair.main, mel), candidates)


def detect_languages(pair: WhisperPair, mel: Tensor, candidates: tuple[str, ...] | None = None
                     ) -> tuple[list[str], list[float]]:
    """Each window's most likely language and its probability (window_language_probabilities)."""
    return most_likely(*window_language_probabilities(pair, mel, candidates))


def assistant_frames(pair: WhisperPair, mel: Tensor) -> int | None:
    """The encoder frames the assistant attends to for this batch (None: all): up to the end of
    the longest audio plus its margin, where the platform skips the padding (CPU: its drafts need
    not be exact, and after short audio that halves the bytes its cross-attention reads; on GPUs
    one shape for every batch's CUDA graphs counts for more)."""
    assistant = pair.assistant
    if assistant.audio_frame_margin is None or not pair.platform.assistant_skips_padding:
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


def encode(pair: WhisperPair, mel: Tensor, assistant_mel: Tensor | None, stats: DecodingStats,
           with_assistant: bool = True, known_states: list[Tensor | None] | None = None) -> Encoded:
    """Run the encoder(s) once for the batch; the decoders' cross-attention states of it (the main
    decoder's only, without the assistant). known_states: see encoder_states."""
    synchronize(pair.device)
    start = time.perf_counter()
    with torch.inference_mode():
        states = encoder_states(pair.main, mel, known_states)
        main = pair.main.decoder.cross_states(states)
        assistant = None
        if pair.assistant is not None and with_assistant:
            n_frames = assistant_frames(pair, mel)
            if pair.shares_encoder:
                assistant = pair.assistant.decoder.cross_states(states, main=main, n_frames=n_frames)
            else:
                own_mel = mel if assistant_mel is None else assistant_mel
                assistant = pair.assistant.decoder.cross_states(encoder_states(pair.assistant, own_mel), n_frames=n_frames)
    synchronize(pair.device)
    stats.encoder_seconds += time.perf_counter() - start
    return Encoded(main, assistant)
