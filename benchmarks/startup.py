"""Start-up: one short file through `whisper-spec transcribe`, from process start to exit.

Runs the installed command under /usr/bin/time (wall seconds, peak resident memory) several
times on the README's clip (5.9 s of LibriSpeech) with the defaults, after one unmeasured run
that warms the model cache and the page cache, and reports each run and the median. Also
times `import torch` alone in a fresh interpreter, the part of start-up that is not ours.
--compare FLAGS times the same command with FLAGS added, alternating run by run with the default.
--rate HZ: the clip written at that sample rate first (most recordings are 44.1 or 48 kHz), so that
the command resamples it.

    python benchmarks/startup.py --runs 5 --compare=--no-int8 --output benchmarks/results/startup_cpu.json
    python benchmarks/startup.py --runs 5 --rate 44100 --output benchmarks/results/startup_44k_epyc_cpu.json
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import soundfile
import soxr
import torch
from _common import SPEECH, parse_args, write_report

from whisper_spec.bench.metrics import machine_info

CLIP = "librispeech/dev-clean/1272-128104-0000.flac"


def timed(command: list[str]) -> dict:
    """Wall seconds and peak resident memory of one run, from /usr/bin/time."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as times:
        subprocess.run(["/usr/bin/time", "-o", times.name, "-f", "%e %M", *command], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall, kilobytes = times.read().split()
    return {"seconds": float(wall), "peak_rss_mb": round(int(kilobytes) / 1024, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--compare", default="", help="command-line flags to time beside the default")
    parser.add_argument("--rate", type=int, default=None, help="write the clip at this sample rate first")
    parser.add_argument("--output", type=Path)
    args = parse_args(parser, runs=1)
    source = clip = SPEECH / CLIP
    compare = args.compare.split()
    with tempfile.TemporaryDirectory() as out:
        if args.rate:
            audio, rate = soundfile.read(str(source), dtype="float32")
            clip = Path(out) / f"{clip.stem}_{args.rate}.wav"
            soundfile.write(clip, soxr.resample(audio, rate, args.rate, quality="HQ"), args.rate)
        command = ["whisper-spec", "transcribe", str(clip), "--output-dir", out]
        timed(command)  # warm-up: model conversion cache, page cache
        runs, compared = [], []
        for _ in range(args.runs):
            runs.append(timed(command))
            if compare:
                compared.append(timed(command + compare))
        text = (Path(out) / f"{clip.stem}.txt").read_text().strip()
    info = soundfile.info(str(source))
    torch_import = [timed([sys.executable, "-c", "import torch"]) for _ in range(args.runs)]
    report = {
        "machine": machine_info(torch.device("cpu")),
        "command": " ".join(["whisper-spec", "transcribe", CLIP, "--output-dir", "DIR"]),
        "clip_sample_rate": args.rate or info.samplerate,
        "clip_seconds": round(info.duration, 3),
        "text": text,
        "runs": runs,
        "median_seconds": statistics.median(run["seconds"] for run in runs),
        "import_torch_median_seconds": statistics.median(run["seconds"] for run in torch_import),
    }
    if compare:
        report["compared"] = {"flags": args.compare, "runs": compared,
                              "median_seconds": statistics.median(run["seconds"] for run in compared)}
    return write_report(report, args.output)


if __name__ == "__main__":
    raise SystemExit(main())
