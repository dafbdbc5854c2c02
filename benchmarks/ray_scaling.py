"""Batch jobs here against on Ray: overhead on this machine, and what scaling out would give.

The same batch job (the shared LibriSpeech clips, base with its shipped assistant, txt + json)
runs locally (`run_batch`, all CPU threads), then on a local Ray instance with 1 actor of all
threads and with 2 actors of one thread each (`run_batch_ray`, Ray started inside the timing,
each actor loading its own pair). Every run starts from an empty output folder; the report has
wall seconds, real-time factors, whether every output equals the local run's (JSON without its
stats), and an estimate for N actors from the measured throughput per actor: a cluster runs
N actors in parallel, so its time is about the start-up plus the audio over N times one actor's
rate, as long as the driver keeps up (it only reads rows of a few numbers per file).

    python benchmarks/ray_scaling.py --output benchmarks/results/ray_scaling_cpu.json
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch
from _common import SPEECH, manifest_rows, parse_args, progress, write_report

from whisper_spec.bench.metrics import machine_info
from whisper_spec.jobs.batch import job_outputs, run_batch
from whisper_spec.jobs.inputs import Job
from whisper_spec.models.load import load_pair
from whisper_spec.options import DecodingOptions, RayOptions

FORMATS = ["txt", "json"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=None, help="clips (default: all 78)")
    parser.add_argument("--output", type=Path, default=None)
    args = parse_args(parser, limit=2)
    import ray

    from whisper_spec.jobs.ray_batch import run_batch_ray

    rows = [r for r in manifest_rows() if r["set"] == "librispeech"][: args.limit]
    jobs = [Job(SPEECH / r["path"], str(Path(r["path"]).with_suffix("")), r["language"]) for r in rows]
    options = DecodingOptions()
    threads = torch.get_num_threads()
    report = {"machine": machine_info(torch.device("cpu")), "files": len(jobs), "formats": FORMATS, "runs": []}
    with tempfile.TemporaryDirectory() as scratch:
        start = time.perf_counter()
        local_out = Path(scratch) / "local"
        summary = run_batch(load_pair("base"), jobs, local_out, FORMATS, options, progress=False)
        local_seconds = time.perf_counter() - start
        audio = summary["audio_hours"] * 3600
        report["audio_seconds"] = audio
        report["runs"].append({"run": f"local, {threads} threads", "wall_seconds": local_seconds,
                               "real_time_factor": local_seconds / audio, "model_load_included": True})
        progress(report["runs"][-1])
        expected = job_outputs(local_out)
        for actors, per_actor in ((1, threads), (2, max(threads // 2, 1))):
            out = Path(scratch) / f"ray{actors}"
            start = time.perf_counter()
            try:
                summary = run_batch_ray({"main": "base"}, jobs, out, FORMATS, options,
                                        ray_options=RayOptions(actors=actors, threads=per_actor), progress=False)
            finally:
                ray.shutdown()
            seconds = time.perf_counter() - start
            report["runs"].append({"run": f"ray, {actors} actor(s) x {per_actor} thread(s)", "wall_seconds": seconds,
                                   "real_time_factor": seconds / audio, "overhead_vs_local": seconds / local_seconds,
                                   "outputs_equal_local": job_outputs(out) == expected, "done": summary["done"]})
            progress(report["runs"][-1])
            shutil.rmtree(out)
    one_actor = report["runs"][1]["wall_seconds"]
    report["estimate"] = {
        "note": "N actors of the measured 1-actor rate; start-up (Ray, model load) is not divided",
        "audio_seconds_per_wall_second_one_actor": audio / one_actor,
        "audio_seconds_per_wall_second_by_actors": {n: audio * n / one_actor for n in (1, 2, 4, 8, 16)},
    }
    return write_report(report, args.output)


if __name__ == "__main__":
    sys.exit(main())
