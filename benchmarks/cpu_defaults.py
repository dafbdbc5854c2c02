"""Which exact configuration is fastest on this CPU, whole process: what the loaders' defaults per CPU
kind are chosen from (docs/decisions.md, "Defaults by CPU kind").

Each configuration is one `whisper-spec transcribe` process over the same LibriSpeech clips (model
loading, decoding and writing included), at each batch size; configurations alternate within a
round and rounds repeat, so a slow phase of the machine falls on all of them; medians are reported,
with each configuration's WER and whether its transcripts equal those of the configuration with the
same decoder precision that decodes with the main model alone (speculation must not change a token).
The kernels a process may use follow the environment: under `ATEN_CPU_CAPABILITY=avx2
ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 FBGEMM_ENABLE_INSTRUCTIONS=AVX2` an AVX-512 CPU runs AVX2's (the report records
what each process ran with).

    python benchmarks/cpu_defaults.py --clips 30 --batch-sizes 1,4 --rounds 2 \\
        --output benchmarks/results/cpu_defaults_avx2_emulated.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import SPEECH, manifest_rows, parse_args, progress, write_report

from whisper_spec.bench.metrics import cpu_description, word_error_rate

# name -> flags; "default" is what a user gets. Transcripts are compared within a decoder precision.
CONFIGS = {
    "default": [],
    "main-only": ["--assistant", "none"],
    "float32 decoders": ["--no-int8"],
    "float32 decoders + main-only": ["--no-int8", "--assistant", "none"],
    "int8 decoders in float32": ["--int8", "--dtype", "float32"],
    "int8 decoders in float32 + main-only": ["--int8", "--dtype", "float32", "--assistant", "none"],
    "float32 encoder": ["--encoder-precision", "float32"],
    "float32 encoder + main-only": ["--encoder-precision", "float32", "--assistant", "none"],
}
KERNEL_VARIABLES = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "FBGEMM_ENABLE_INSTRUCTIONS")


def run(flags: list[str], clips: list[Path], batch_size: int, folder: Path) -> dict:
    """One whole process: wall seconds, and the texts it wrote (one JSON per clip)."""
    folder.mkdir(parents=True, exist_ok=True)
    command = ["whisper-spec", "transcribe", *map(str, clips), "--batch-size", str(batch_size), "-f", "json",
               "-o", str(folder), "--quiet", *flags]
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seconds = time.perf_counter() - start
    texts = [json.loads((folder / f"{clip.stem}.json").read_text())["text"] for clip in clips]
    return {"seconds": seconds, "texts": texts}


def precision_of(flags: list[str]) -> str:
    """What decides the tokens: the decoders' and the encoder's precision (not the assistant)."""
    return " ".join(f for f in flags if f not in ("--assistant", "none"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clips", type=int, default=30, help="the first N LibriSpeech clips of the manifest")
    parser.add_argument("--batch-sizes", default="1,4")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--configs", default=",".join(CONFIGS), help="names of CONFIGS, comma-separated")
    parser.add_argument("--output", type=Path)
    args = parse_args(parser, clips=2, batch_sizes="2", rounds=1, configs="default,main-only")
    rows = [r for r in manifest_rows() if r["set"] == "librispeech"][: args.clips]
    clips = [SPEECH / r["path"] for r in rows]
    names = args.configs.split(",")
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    seconds: dict[str, list[float]] = {}
    texts: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for round_index in range(args.rounds):
            for batch_size in batch_sizes:
                # rotated each round: no configuration always runs first, when the page cache is coldest
                order = names[round_index % len(names):] + names[: round_index % len(names)]
                for name in order:
                    key = f"{name} | b{batch_size}"
                    result = run(CONFIGS[name], clips, batch_size, Path(scratch) / f"{round_index}-{batch_size}-{name}")
                    seconds.setdefault(key, []).append(round(result["seconds"], 2))
                    texts[key] = result["texts"]
                    progress({"round": round_index, "config": key, "seconds": round(result["seconds"], 2)})
    references, languages = [r["text"] for r in rows], [r["language"] for r in rows]
    results = {}
    for key, times in seconds.items():
        name, batch = key.split(" | ")
        alone = next((n for n in names if precision_of(CONFIGS[n]) == precision_of(CONFIGS[name])
                      and "none" in CONFIGS[n]), None)
        results[key] = {"flags": CONFIGS[name], "seconds": times, "median_seconds": statistics.median(times),
                        "wer": round(100 * word_error_rate(references, texts[key], languages), 2),
                        "same_as_main_only": None if alone is None else texts[key] == texts[f"{alone} | {batch}"]}
    fastest = {f"b{b}": min((k for k in results if k.endswith(f"| b{b}")), key=lambda k: results[k]["median_seconds"])
               for b in batch_sizes}
    report = {"machine": cpu_description(), "kernel_variables": {v: os.environ.get(v) for v in KERNEL_VARIABLES},
              "python": sys.version.split()[0], "clips": len(clips), "rounds": args.rounds,
              "results": results, "fastest": fastest}
    return write_report(report, args.output)


if __name__ == "__main__":
    sys.exit(main())
