"""faster-whisper, the engine of the benchmarks' faster-whisper peer, in a process of its own
(peer_process: why, and the loop that answers the requests here).
"""

from __future__ import annotations

import time

import numpy as np

_GREEDY = dict(beam_size=1, temperature=0.0)  # faster-whisper's settings for greedy decoding, as ours


def _clips(models: dict, groups: list[list[tuple[np.ndarray, float, str]]], batch_size: int, int8: bool,
           task: str, prompt: str | None = None) -> tuple[list[list[int]], list[str]]:
    """Tokens and texts of clips given in groups of up to batch_size (audio, seconds, language): a group
    of one, or of mixed languages, through `transcribe` clip by clip; else the batched pipeline,
    given the group end to end as clips (`clip_timestamps`), so it decodes them together, one 30 s
    window each, as ours does. prompt: its initial_prompt, before every clip."""
    from faster_whisper import BatchedInferencePipeline

    model = models[int8]
    settings = dict(task=task, without_timestamps=True, vad_filter=False, initial_prompt=prompt, **_GREEDY)
    tokens, texts = [], []
    for group in groups:
        if len(group) == 1 or len({language for _, _, language in group}) > 1:
            outputs = [list(model.transcribe(audio, language=language, condition_on_previous_text=False,
                                             **settings)[0]) for audio, _, language in group]
        else:
            ends = np.cumsum([seconds for _, seconds, _ in group]).tolist()
            clips = [{"start": start, "end": end} for start, end in zip([0.0] + ends[:-1], ends)]
            segments = list(BatchedInferencePipeline(model).transcribe(
                np.concatenate([audio for audio, _, _ in group]), language=group[0][2], clip_timestamps=clips,
                batch_size=batch_size, **settings)[0])
            outputs = [[s for s in segments if clip["start"] <= s.start < clip["end"]] for clip in clips]
        for segments in outputs:
            tokens.append([t for s in segments for t in s.tokens])
            texts.append("".join(s.text for s in segments))
    return tokens, texts


def _long(models: dict, audio: np.ndarray, batch_size: int, int8: bool, language: str) -> str:
    """A long recording's text as faster-whisper writes it: at batch 1 its `transcribe`, window
    after window, each not conditioned on the text before (as ours); above, its batched
    pipeline, which cuts the recording at pauses (its VAD) and decodes the pieces together."""
    from faster_whisper import BatchedInferencePipeline

    model = models[int8]
    if batch_size == 1:
        segments, _ = model.transcribe(audio, language=language, condition_on_previous_text=False, **_GREEDY)
    else:
        segments, _ = BatchedInferencePipeline(model).transcribe(audio, language=language, batch_size=batch_size,
                                                                 **_GREEDY)
    return "".join(s.text for s in segments)


def _long_timed(models: dict, audio: np.ndarray, batch_size: int, int8: bool, language: str | None,
                multilingual: bool = False) -> dict:
    """A long recording as faster-whisper's batched pipeline (its VAD) segments it, with word times:
    {"language", "segments": [{"start", "end", "text", "words": [[start, end], ...]}]}. multilingual:
    its language detected again on every segment (faster-whisper's option for speech that changes language)."""
    from faster_whisper import BatchedInferencePipeline

    segments, info = BatchedInferencePipeline(models[int8]).transcribe(
        audio, language=language, batch_size=batch_size, word_timestamps=True, multilingual=multilingual, **_GREEDY)
    return {"language": info.language,
            "segments": [{"start": s.start, "end": s.end, "text": s.text,
                          "words": [[w.start, w.end] for w in s.words or []]} for s in segments]}


def _encoder_seconds(models: dict, features: np.ndarray, int8: bool) -> float:
    """Seconds of CTranslate2's encoder on log-mel features [batch, n_mels, 3000]."""
    import ctranslate2

    view = ctranslate2.StorageView.from_array(np.ascontiguousarray(features, dtype=np.float32))
    start = time.perf_counter()
    models[int8].model.encode(view)
    return time.perf_counter() - start


REQUESTS = {"clips": _clips, "long": _long, "long_timed": _long_timed, "encoder_seconds": _encoder_seconds}


def load(ct2_dir: str, device: str, threads: int) -> dict:
    """The float and int8 models, by int8."""
    from faster_whisper import WhisperModel

    float_type = "float16" if device == "cuda" else "float32"
    return {int8: WhisperModel(ct2_dir, device=device, cpu_threads=threads, compute_type="int8" if int8 else float_type)
            for int8 in (False, True)}
