"""What a benchmark measures besides time: WER after Whisper's normalizers, peak memory, and the machine."""

from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import platform
import re
import sys
import threading
from importlib import resources
from pathlib import Path

import jiwer
import torch

from ..models.platform import counts_allocator_memory, gpu_name


@functools.cache
def _english_normalizer():
    from transformers.models.whisper.english_normalizer import EnglishTextNormalizer

    spelling = json.loads(resources.files("whisper_spec").joinpath("data/english_spelling.json").read_text())
    return EnglishTextNormalizer(spelling)


@functools.cache
def _basic_normalizer():
    from transformers.models.whisper.english_normalizer import BasicTextNormalizer

    return BasicTextNormalizer()


def normalize(text: str, language: str | None) -> str:
    """Whisper's normalizers: the English one (with its spelling table) for English, else the basic one."""
    return (_english_normalizer() if language in (None, "en") else _basic_normalizer())(text)


def word_errors(references: list[str | None], hypotheses: list[str], languages: list[str | None]) -> dict | None:
    """Corpus word errors after normalization, by kind (substitutions, deletions, insertions) and
    the reference's word count; pairs without a reference, or whose reference normalizes to nothing,
    are left out (as in Whisper's evaluations). None where no pair is left."""
    refs, hyps = [], []
    for ref, hyp, language in zip(references, hypotheses, languages):
        if ref is None:
            continue
        ref = normalize(ref, language)
        if ref.strip():
            refs.append(ref)
            hyps.append(normalize(hyp, language))
    if not refs:
        return None
    alignment = jiwer.process_words(refs, hyps)
    return {"substitutions": alignment.substitutions, "deletions": alignment.deletions,
            "insertions": alignment.insertions,
            "reference_words": alignment.substitutions + alignment.deletions + alignment.hits}


def word_error_rate(references: list[str | None], hypotheses: list[str], languages: list[str | None]) -> float | None:
    """Corpus WER after normalization (see word_errors)."""
    errors = word_errors(references, hypotheses, languages)
    if errors is None:
        return None
    return (errors["substitutions"] + errors["deletions"] + errors["insertions"]) / errors["reference_words"]


class PeakMemory:
    """Peak CUDA memory allocated, or peak resident set size sampled every 5 ms on CPU."""

    def __init__(self, device: torch.device):
        self.device = device
        self.peak = 0
        self._stop = threading.Event()

    @staticmethod
    def rss() -> int:
        try:
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            import resource

            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self.rss())

    def __enter__(self):
        if counts_allocator_memory(self.device):
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            self.peak = self.rss()
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if counts_allocator_memory(self.device):
            self.peak = torch.cuda.max_memory_allocated(self.device)
        else:
            self._stop.set()
            self._thread.join()
            self.peak = max(self.peak, self.rss())


def longest_repeat(text: str, max_words: int = 8) -> tuple[str, int]:
    """The word or phrase (of up to max_words words, case and punctuation aside) that the text
    repeats most times in a row, and how many times: a decoding loop shows as a high count."""
    words = re.findall(r"\w+(?:'\w+)?", text.lower())
    best = (words[0], 1) if words else ("", 0)
    for n in range(1, max_words + 1):
        for start in range(len(words) - 2 * n + 1):
            phrase, times = words[start : start + n], 1
            while words[start + times * n : start + (times + 1) * n] == phrase:
                times += 1
            if times > best[1]:
                best = (" ".join(phrase), times)
    return best


def cpu_description() -> dict:
    """The CPU's model name and the instruction-set flags that decide which kernels run (Linux)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    fields = {key.strip(): value.strip() for key, value in fields.items()}
    flags = fields.get("flags", "").split()
    kernel_flags = [f for f in flags if f in ("avx", "avx2", "fma", "f16c") or f.startswith(("avx512", "amx"))
                    or "vnni" in f]
    return {"cpu_model": fields.get("model name"), "cpu_flags": kernel_flags}


def machine_info(device: torch.device) -> dict:
    import transformers

    info = {
        "platform": platform.platform(), "processor": platform.machine(), "cpu_count": os.cpu_count(),
        **cpu_description(),
        "torch_threads": torch.get_num_threads(), "device": str(device), "python": sys.version.split()[0],
        "torch": torch.__version__, "transformers": transformers.__version__,
    }
    if gpu_name(device) is not None:
        info["gpu"] = gpu_name(device)
    try:
        import ctranslate2
        import faster_whisper

        info["faster_whisper"], info["ctranslate2"] = faster_whisper.__version__, ctranslate2.__version__
    except ImportError:
        pass
    try:
        info["pywhispercpp"] = importlib.metadata.version("pywhispercpp")  # its version names the whisper.cpp it bundles
    except importlib.metadata.PackageNotFoundError:
        pass
    return info
