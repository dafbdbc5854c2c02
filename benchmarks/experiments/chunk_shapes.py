"""Which shape of long-audio window transcribes best: the experiment behind docs/decisions.md, "Long
audio: VAD chunks".

Main-only, int8 decoders (the CPU default), batch 4, over one set of long recordings
(benchmarks/_common.py: longform, joined, fleurs), one line per variant: WER, seconds, seconds of
audio decoded, windows, and WER per file. Variants: "vad" (speech chunks, the default), "seq"
(--no-vad: windows one after another). At commit e501ee9, where a chunk joined its speech regions
without the pauses between them, the same script also ran "cont" (each chunk the contiguous audio
from its first region to its last, what "vad" is now) and "padP" (regions padded by P seconds).

    python benchmarks/experiments/chunk_shapes.py longform vad,seq
    python benchmarks/experiments/chunk_shapes.py fleurs vad,vad24,vad20
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import long_recordings  # noqa: E402

from whisper_spec.bench.metrics import word_error_rate  # noqa: E402
from whisper_spec.longform.pipeline import transcribe  # noqa: E402
from whisper_spec.models.load import load_pair  # noqa: E402
from whisper_spec.models.platform import default_precision  # noqa: E402
from whisper_spec.models.sources import default_assistant  # noqa: E402
from whisper_spec.options import ChunkingOptions, DecodingOptions  # noqa: E402

VARIANTS = {"vad": ChunkingOptions(vad=True), "seq": ChunkingOptions(vad=False)}


def chunking(variant: str) -> ChunkingOptions:
    if variant.startswith("vad") and variant[3:]:
        return ChunkingOptions(vad=True, chunk_length=float(variant[3:]))
    return VARIANTS[variant]


def main(recordings: str, variants: list[str]) -> None:
    workdir = tempfile.TemporaryDirectory()
    files, paths = long_recordings(recordings, Path(workdir.name))
    int8, dtype = default_precision(torch.device("cpu"), True)
    pair = load_pair("base", default_assistant("base"), int8=int8, dtype=dtype)
    labeled = [i for i, f in enumerate(files) if f["text"]]
    for variant in variants:
        start = time.perf_counter()
        results = [next(transcribe(pair, [path], DecodingOptions(language=f["language"], speculation="off"),
                                   chunking=chunking(variant))) for path, f in zip(paths, files)]
        seconds = time.perf_counter() - start
        wer = word_error_rate([files[i]["text"] for i in labeled], [results[i].text for i in labeled],
                              [files[i]["language"] for i in labeled])
        by_file = [round(word_error_rate([files[i]["text"]], [results[i].text], [files[i]["language"]]), 3)
                   for i in labeled]
        print(variant, "wer", round(wer, 4), "secs", round(seconds, 1),
              "audio", round(sum(r.stats.audio_seconds for r in results), 1),
              "windows", sum(r.stats.windows for r in results), by_file, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2].split(","))
