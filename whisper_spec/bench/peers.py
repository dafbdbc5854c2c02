"""The tools people would use instead, on the same weights: transformers' generate (and its
assisted generation) and faster-whisper."""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import torch

from ..encoding import pair_features
from ..load import load_pair
from ..pair import WhisperPair
from ..sources import ct2_source
from .data import Utterance, batches


@contextlib.contextmanager
def _quiet_transformers():
    """transformers' generate logs a warning per call on this path (max_length from the model's
    generation config beside max_new_tokens, the assistant's own inner generate calls): dozens of
    lines per benchmark that say nothing about the run. Errors still show."""
    from transformers.utils import logging

    level = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(level)


class TransformersPeer:
    """transformers' generate on the same main model (and the assistant exported as WhisperForCausalLM)."""

    def __init__(self, pair: WhisperPair, workdir: Path):
        from transformers import WhisperForCausalLM, WhisperForConditionalGeneration

        from ..export import save_model

        self.pair = pair
        self.model = WhisperForConditionalGeneration.from_pretrained(pair.main.path, dtype=pair.dtype).to(pair.device)
        self.model.eval()
        self.assistant = None
        if pair.assistant is not None and pair.shares_encoder:
            # the assistant as stored (ours may draft in int8): reloaded float for the export
            stored = load_pair(pair.main.path, pair.assistant.name, dtype=pair.dtype, device=pair.device,
                               assistant_int8=False).assistant
            exported = save_model(stored, workdir / "assistant-hf", decoder_only=True)
            self.assistant = WhisperForCausalLM.from_pretrained(exported, dtype=pair.dtype).to(pair.device).eval()

    @torch.inference_mode()
    def run(self, utterances: list[Utterance], batch_size: int, *, speculative: bool, int8: bool, task: str,
            languages: list[str]):
        """Tokens and texts of the utterances (int8: not offered by this peer)."""
        tokens, texts = [], []
        special = self.pair.main.special
        for rows in batches(len(utterances), batch_size):
            mel = pair_features(self.pair, [utterances[i].audio for i in rows])[0].to(self.pair.dtype)
            kwargs = {}
            if special.multilingual:
                # the language is passed: transformers 5.23 repeats one token forever when it detects it itself
                batch_languages = [languages[i] for i in rows]
                same = len(set(batch_languages)) == 1
                kwargs = {"language": batch_languages[0] if same else batch_languages, "task": task}
            if speculative:
                kwargs["assistant_model"] = self.assistant
            # as many tokens as our loop allows (448 with the prompt); transformers may otherwise stop at 20
            kwargs["max_new_tokens"] = self.pair.main.dims.n_text_ctx - len(special.prompt("en", task, False))
            with _quiet_transformers():
                out = self.model.generate(input_features=mel, **kwargs)
            for row in out.tolist():
                row = [t for t in row if t < special.eot]  # drop the prompt's special tokens and EOT padding
                tokens.append(row)
                texts.append(self.pair.main.tokenizer.decode(row))
        return tokens, texts


_GREEDY = dict(beam_size=1, temperature=0.0)  # faster-whisper's settings for greedy decoding, as ours


class FasterWhisperPeer:
    """faster-whisper (CTranslate2) on the same CTranslate2 model the main model was converted from:
    its float model (float16 on CUDA, float32 on CPU) and its int8 one. Batch 1 is its `transcribe`;
    a larger batch is its batched pipeline, given the batch's utterances end to end as clips
    (`clip_timestamps`), so it decodes them together, one 30 s window each, as ours does."""

    def __init__(self, ct2_dir: Path, device: torch.device):
        from faster_whisper import WhisperModel as FasterWhisperModel

        float_type = "float16" if device.type == "cuda" else "float32"
        self.models = {int8: FasterWhisperModel(str(ct2_dir), device=device.type, cpu_threads=torch.get_num_threads(),
                                                compute_type="int8" if int8 else float_type)
                       for int8 in (False, True)}

    def run(self, utterances: list[Utterance], batch_size: int, *, speculative: bool, int8: bool, task: str,
            languages: list[str]):
        """Tokens and texts of the utterances (speculative: not offered by this peer)."""
        from faster_whisper import BatchedInferencePipeline

        model = self.models[int8]
        settings = dict(task=task, without_timestamps=True, vad_filter=False, **_GREEDY)
        tokens, texts = [], []
        for rows in batches(len(utterances), batch_size):
            if len(rows) == 1 or len({languages[i] for i in rows}) > 1:
                outputs = [list(model.transcribe(utterances[i].audio, language=languages[i],
                                                 condition_on_previous_text=False, **settings)[0]) for i in rows]
            else:
                audio = np.concatenate([utterances[i].audio for i in rows])
                ends = np.cumsum([utterances[i].seconds for i in rows]).tolist()
                clips = [{"start": start, "end": end} for start, end in zip([0.0] + ends[:-1], ends)]
                segments = list(BatchedInferencePipeline(model).transcribe(
                    audio, language=languages[rows[0]], clip_timestamps=clips, batch_size=batch_size, **settings)[0])
                outputs = [[s for s in segments if clip["start"] <= s.start < clip["end"]] for clip in clips]
            for segments in outputs:
                tokens.append([t for s in segments for t in s.tokens])
                texts.append("".join(s.text for s in segments))
        return tokens, texts

    def transcribe_long(self, audio: np.ndarray, batch_size: int, *, int8: bool, language: str) -> str:
        """A long recording's text as faster-whisper writes it: at batch 1 its `transcribe`, window
        after window, each not conditioned on the text before (as ours); above, its batched
        pipeline, which cuts the recording at pauses (its VAD) and decodes the pieces together."""
        from faster_whisper import BatchedInferencePipeline

        model = self.models[int8]
        if batch_size == 1:
            segments, _ = model.transcribe(audio, language=language, condition_on_previous_text=False, **_GREEDY)
        else:
            segments, _ = BatchedInferencePipeline(model).transcribe(audio, language=language, batch_size=batch_size,
                                                                     **_GREEDY)
        return "".join(s.text for s in segments)


def load_peers(pair: WhisperPair, model: str, wanted: tuple[str, ...], workdir: Path, note) -> dict:
    peers = {}
    if "transformers" in wanted:
        peers["transformers"] = TransformersPeer(pair, workdir)
    if "faster-whisper" in wanted:
        try:
            import faster_whisper  # noqa: F401
        except ImportError:
            note("faster-whisper is not installed: its row is left out (pip install faster-whisper)")
        else:
            source = ct2_source(model)
            if source is None:
                note(f"{model} did not come from a CTranslate2 model: no faster-whisper row")
            else:
                peers["faster-whisper"] = FasterWhisperPeer(source, pair.device)
    return peers
