"""whisper.cpp (the build pywhispercpp bundles), the engine of the benchmarks' whisper.cpp peer, in
a process of its own (peer_process: why, and the loop that answers the requests here), on a ggml
file written from our own weights (whisper_spec.models.ggml).

Decoded as ours and faster-whisper's peer are: greedy at temperature 0 without fallback
(temperature_inc 0), each 30 s window not conditioned on the text before it (no_context), the
non-speech symbols suppressed (openai-whisper's default suppress_tokens, which ours and
faster-whisper apply; whisper.cpp's suppress_nst). Clips without timestamps; long recordings with
them, as whisper.cpp moves from window to window by its last timestamp. It has no batch of several
recordings: a batch size is ignored.
"""

from __future__ import annotations

import numpy as np

_GREEDY = dict(temperature=0.0, temperature_inc=0.0, no_context=True, suppress_nst=True)


def load(ggml_path: str, threads: int):
    from pywhispercpp.model import Model

    return Model(ggml_path, n_threads=threads, print_progress=False, print_realtime=False,
                 redirect_whispercpp_logs_to=None, **_GREEDY)


def _tokens(model) -> list[int]:
    """The ordinary tokens (below end-of-text) of the model's last transcription."""
    import _pywhispercpp as whisper

    context = model._ctx
    eot = whisper.whisper_token_eot(context)
    tokens = (whisper.whisper_full_get_token_id(context, segment, index)
              for segment in range(whisper.whisper_full_n_segments(context))
              for index in range(whisper.whisper_full_n_tokens(context, segment)))
    return [token for token in tokens if token < eot]


def _clips(model, groups: list[list[tuple[np.ndarray, float, str]]], batch_size: int, int8: bool, task: str,
           prompt: str | None = None) -> tuple[list[list[int]], list[str]]:
    """Tokens and texts of clips given in groups (audio, seconds, language), one clip a call."""
    settings = dict(translate=task == "translate", no_timestamps=True)
    if prompt is not None:
        settings["initial_prompt"] = prompt
    tokens, texts = [], []
    for group in groups:
        for audio, _, language in group:
            segments = model.transcribe(audio, language=language, **settings)
            tokens.append(_tokens(model))
            texts.append("".join(s.text for s in segments))
    return tokens, texts


def _long(model, audio: np.ndarray, batch_size: int, int8: bool, language: str | None) -> str:
    """A long recording's text as whisper.cpp writes it, window after window (its language
    detected on the first where not given)."""
    segments = model.transcribe(audio, language=language or "auto", detect_language=False, no_timestamps=False)
    return "".join(s.text for s in segments)


REQUESTS = {"clips": _clips, "long": _long}
