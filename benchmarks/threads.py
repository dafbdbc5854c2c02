"""CPU threads on a shared machine: `whisper-spec transcribe` as a user runs it (a process of its own,
model loading included), on an idle machine and beside a process that keeps one core busy, with
each thread setting of --settings. torch's OpenMP threads busy-wait at every barrier: where one of
them shares its core with another process, each parallel region waits for a time slice.

Runs take turns setting by setting; reports each setting's median wall seconds per file and load.

    python benchmarks/threads.py --output benchmarks/results/threads_epyc_cpu.json
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from _common import SPEECH, parse_args, progress, write_report

from whisper_spec.bench.metrics import machine_info

FILES = ["librispeech/dev-clean/1272-128104-0000.flac", "longform/librispeech-test-other_1688-142285_0000-0009.flac"]
SETTINGS = {  # name: (extra command-line flags, environment)
    "default": ([], {}),
    "--threads 1": (["--threads", "1"], {}),
    "--threads 2": (["--threads", "2"], {}),
    "passive waits": ([], {"OMP_WAIT_POLICY": "PASSIVE"}),  # OpenMP threads sleep at barriers
    # libgomp's threads spin this many times before they sleep (300,000 by default)
    "spin 10000": ([], {"GOMP_SPINCOUNT": "10000"}),
    "spin 1000": ([], {"GOMP_SPINCOUNT": "1000"}),
}


def transcribe_seconds(path: Path, flags: list[str], env: dict) -> float:
    start = time.perf_counter()
    subprocess.run([shutil.which("whisper-spec"), "transcribe", str(path), "--quiet", *flags],
                   check=True, stdout=subprocess.DEVNULL, env={**os.environ, **env})
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--settings", default=",".join(SETTINGS), help="comma-separated names of SETTINGS")
    parser.add_argument("--loads", default="idle,one core busy", help="comma-separated: idle, one core busy")
    parser.add_argument("--output", type=Path, default=None)
    args = parse_args(parser, repeats=1, settings="default", loads="idle")
    settings = args.settings.split(",")
    report = {"machine": machine_info(torch.device("cpu")), "repeats": args.repeats, "results": []}
    for load in args.loads.split(","):
        busy = None
        if load != "idle":
            busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            for relative in FILES:
                path = SPEECH / relative
                transcribe_seconds(path, *SETTINGS["default"])  # warm-up: file caches
                seconds = {name: [] for name in settings}
                for repeat in range(args.repeats):
                    for name in settings[repeat % len(settings):] + settings[:repeat % len(settings)]:
                        seconds[name].append(transcribe_seconds(path, *SETTINGS[name]))
                entry = {"load": load, "file": relative,
                         "median_seconds": {name: round(statistics.median(s), 2) for name, s in seconds.items()},
                         "seconds": {name: [round(x, 2) for x in s] for name, s in seconds.items()}}
                report["results"].append(entry)
                progress(entry)
        finally:
            if busy is not None:
                busy.kill()
    return write_report(report, args.output)


if __name__ == "__main__":
    sys.exit(main())
