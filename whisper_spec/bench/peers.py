"""The tools people would use instead, on the same weights: transformers' generate (and its
assisted generation), faster-whisper and whisper.cpp."""

from __future__ import annotations

import contextlib
import importlib.util
from pathlib import Path

import numpy as np
import torch

from ..decode.decoding import previous_tokens
from ..decode.encoding import pair_features
from ..models.load import load_pair
from ..models.pair import WhisperPair
from ..models.platform import counts_allocator_memory, device_type
from ..models.sources import ct2_source
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

    peak_memory_bytes = None  # runs in the benchmark's process: measured there, as ours

    def __init__(self, pair: WhisperPair, workdir: Path):
        from transformers import WhisperForCausalLM, WhisperForConditionalGeneration
        from transformers.utils.logging import disable_progress_bar

        from ..models.export import save_model

        disable_progress_bar()  # its "Loading weights" bars among the bench's own lines: local files, no wait

        self.pair = pair
        self.model = WhisperForConditionalGeneration.from_pretrained(pair.main.path, dtype=pair.dtype).to(pair.device)
        self.model.eval()
        self.assistant = None
        if pair.assistant is not None and pair.shares_encoder:
            # the assistant as stored (ours may draft in int8): reloaded float for the export
            stored = load_pair(pair.main.path, pair.assistant.name, dtype=pair.dtype, device=pair.device,
                               int8=False, assistant_int8=False).assistant
            exported = save_model(stored, workdir / "assistant-hf", decoder_only=True)
            self.assistant = WhisperForCausalLM.from_pretrained(exported, dtype=pair.dtype).to(pair.device).eval()

    @torch.inference_mode()
    def run(self, utterances: list[Utterance], batch_size: int, *, speculative: bool, int8: bool, task: str,
            languages: list[str], prompt: str | None = None):
        """Tokens and texts of the utterances (int8: not offered by this peer)."""
        tokens, texts = [], []
        special = self.pair.main.special
        prompt_ids = [special.previous, *previous_tokens(self.pair.main, prompt.strip())] if prompt else []
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
            if prompt_ids:
                kwargs["prompt_ids"] = torch.tensor(prompt_ids, device=self.pair.device)
            # as many tokens as our loop allows (448 with the prompt); transformers may otherwise stop at 20
            kwargs["max_new_tokens"] = self.pair.main.dims.n_text_ctx - len(prompt_ids) - len(special.prompt("en", task, False))
            with _quiet_transformers():
                out = self.model.generate(input_features=mel, **kwargs)
            for row in out.tolist():
                row = [t for t in row if t < special.eot]  # drop the prompt's special tokens and EOT padding
                tokens.append(row)
                texts.append(self.pair.main.tokenizer.decode(row))
        return tokens, texts

    def close(self) -> None:
        self.model = self.assistant = None


class PeerProcess:
    """The parent's end of a peer engine running in a process of its own (peer_process.serve)."""

    name = ""

    def __init__(self, engine: str, settings: dict, device: torch.device):
        import multiprocessing

        from . import peer_process

        context = multiprocessing.get_context("spawn")  # a fresh interpreter: no torch, no threads of ours
        self._connection, child = context.Pipe()
        self._process = context.Process(target=peer_process.serve, daemon=True, args=(child, engine, settings))
        self._process.start()
        child.close()
        self._cpu = not counts_allocator_memory(device)
        self.peak_memory_bytes = None  # on CPU, the child's peak resident set size so far
        self._reply()

    def _reply(self):
        try:
            reply = self._connection.recv()
        except EOFError:
            raise RuntimeError(f"the {self.name} process ended (exit code {self._process.exitcode})") from None
        if reply[0] == "error":
            raise RuntimeError(f"{self.name}: {reply[1]}")
        _, result, peak = reply
        if self._cpu:
            self.peak_memory_bytes = peak
        return result

    def _request(self, name: str, **arguments):
        self._connection.send((name, arguments))
        return self._reply()

    def run(self, utterances: list[Utterance], batch_size: int, *, speculative: bool, int8: bool, task: str,
            languages: list[str], prompt: str | None = None):
        """Tokens and texts of the utterances (speculative: not offered by the peers)."""
        groups = [[(utterances[i].audio, utterances[i].seconds, languages[i]) for i in rows]
                  for rows in batches(len(utterances), batch_size)]
        return self._request("clips", groups=groups, batch_size=batch_size, int8=int8, task=task, prompt=prompt)

    def transcribe_long(self, audio: np.ndarray, batch_size: int, *, int8: bool, language: str | None) -> str:
        """A long recording's text as the peer writes it (its engine's _long)."""
        return self._request("long", audio=audio, batch_size=batch_size, int8=int8, language=language)

    def close(self) -> None:
        if self._process.is_alive():
            self._connection.send(None)
            self._process.join(timeout=30)
        self._connection.close()


class FasterWhisperPeer(PeerProcess):
    """faster-whisper (CTranslate2) on the same CTranslate2 model the main model was converted from:
    its float model (float16 on CUDA, float32 on CPU) and its int8 one (faster_whisper_process).
    Batch 1 is its `transcribe`; a larger batch is its batched pipeline."""

    name = "faster-whisper"
    long_precision = "int8"  # its precision in the long-form benchmark

    def __init__(self, ct2_dir: Path, device: torch.device):
        super().__init__("whisper_spec.bench.faster_whisper_process",
                         dict(ct2_dir=str(ct2_dir), device=device_type(device), threads=torch.get_num_threads()), device)

    def transcribe_long_timed(self, audio: np.ndarray, batch_size: int, *, int8: bool, language: str | None,
                              multilingual: bool = False) -> dict:
        """A long recording's segments with word times, faster-whisper's batched pipeline (_long_timed)."""
        return self._request("long_timed", audio=audio, batch_size=batch_size, int8=int8, language=language,
                             multilingual=multilingual)

    def encoder_seconds(self, features: np.ndarray, *, int8: bool) -> float:
        """Seconds of CTranslate2's encoder on log-mel features [batch, n_mels, 3000], timed in its process."""
        return self._request("encoder_seconds", features=features, int8=int8)


class WhisperCppPeer(PeerProcess):
    """whisper.cpp (pywhispercpp's build) on a ggml file written from the main model's own weights
    (whisper_spec.models.ggml, float16 matrices as whisper.cpp's own files), on CPU with our thread count
    (whisper_cpp_process). One recording a call: it has no batch of recordings."""

    name = "whisper.cpp"
    long_precision = "float16"

    def __init__(self, model_dir: Path, workdir: Path):
        from ..models.ggml import write_ggml

        ggml = write_ggml(model_dir, workdir / "ggml-model-f16.bin")
        super().__init__("whisper_spec.bench.whisper_cpp_process",
                         dict(ggml_path=str(ggml), threads=torch.get_num_threads()), torch.device("cpu"))


def load_peers(pair: WhisperPair, model: str, wanted: tuple[str, ...], workdir: Path, note) -> tuple[dict, dict]:
    """The wanted peers that run here, and why each other one is left out (also noted)."""
    peers, left_out = {}, {}
    if "transformers" in wanted:
        peers["transformers"] = TransformersPeer(pair, workdir)
    if "faster-whisper" in wanted:
        source = ct2_source(model)
        if importlib.util.find_spec("faster_whisper") is None:
            left_out["faster-whisper"] = "not installed (pip install faster-whisper)"
        elif source is None:
            left_out["faster-whisper"] = f"{model} did not come from a CTranslate2 model"
        else:
            try:
                peers["faster-whisper"] = FasterWhisperPeer(source, pair.device)
            except RuntimeError as error:  # its models would not load here (a GPU without the CUDA libraries it needs)
                left_out["faster-whisper"] = str(error)
    if "whisper.cpp" in wanted:
        if pair.device.type != "cpu":
            left_out["whisper.cpp"] = "runs on CPU here (pywhispercpp's wheel is a CPU build)"
        elif importlib.util.find_spec("pywhispercpp") is None:
            left_out["whisper.cpp"] = "not installed (pip install pywhispercpp)"
        else:
            try:
                peers["whisper.cpp"] = WhisperCppPeer(pair.main.path, workdir)
            except (RuntimeError, ValueError) as error:  # a checkpoint it cannot take (no encoder of its own)
                left_out["whisper.cpp"] = str(error)
    for name, reason in left_out.items():
        note(f"{name} is left out: {reason}")
    return peers, left_out
