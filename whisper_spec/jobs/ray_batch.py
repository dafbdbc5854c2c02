"""Batch jobs on Ray: the job `batch.run_batch` runs, spread over the workers of a Ray cluster.

Ray Data streams it: CPU tasks decode each file's audio (any format, resampled to 16 kHz), and a
pool of actors, each holding one loaded pair (one per GPU on a GPU cluster), transcribes the
decoded audio with the local pipeline (`pipeline.transcribe`: the same chunks and rules, so the
same transcripts) and writes each file's outputs atomically into the output
folder as soon as the file is done. The driver records failures and the summary (`batch.BatchLog`)
as results stream back. However a run ends, only whole files are left, and a re-run skips the
files whose outputs exist. Ray is an optional extra (`pip install -e '.[ray]'`); only this module
imports it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from pathlib import Path

import numpy as np

from ..decode.stats import DecodingStats
from ..longform.pipeline import Failure, transcribe
from ..options import BATCH_SIZE, ChunkingOptions, DecodingOptions, RayOptions, SubtitleOptions
from ..speech.audio import AudioError, load_audio
from .batch import BatchLog, write_result
from .inputs import Job

FILES_PER_CALL = 4  # files an actor takes per call; their windows fill batches together
DECODE_TASKS = 2  # audio-decoding tasks at once


def _decode(row: dict) -> dict:
    """A CPU task: the file's samples, or the one-line error why there are none."""
    try:
        return {**row, "audio": load_audio(row["path"]), "error": ""}
    except AudioError as error:
        return {**row, "audio": np.zeros(0, np.float32), "error": str(error)}


class _Transcriber:
    """A Ray actor: one loaded pair; transcribes decoded files and writes their outputs."""

    def __init__(self, pair_args: dict, options: DecodingOptions, chunking: ChunkingOptions, batch_size: int,
                 output_dir: str, formats: list[str], layout: SubtitleOptions, threads: int):
        from ..models.load import load_pair

        self.pair = load_pair(**pair_args, threads=threads)
        self.options, self.chunking, self.batch_size = options, chunking, batch_size
        self.output_dir, self.formats, self.layout = Path(output_dir), formats, layout

    def __call__(self, batch: dict) -> dict:
        paths = [str(p) for p in batch["path"]]
        audio, errors = dict(zip(paths, batch["audio"])), dict(zip(paths, batch["error"]))
        names = dict(zip(paths, batch["name"]))

        def load(path: str) -> np.ndarray:
            if errors[path]:
                raise AudioError(str(errors[path]))
            return np.asarray(audio[path], dtype=np.float32)

        languages = {p: str(language) for p, language in zip(paths, batch["language"]) if language}
        prompts = {p: str(prompt) for p, prompt in zip(paths, batch["prompt"]) if prompt}
        rows = {"path": [], "error": [], "duration": [], "language": [], "stats": []}
        for result in transcribe(self.pair, paths, self.options, batch_size=self.batch_size, chunking=self.chunking,
                                 languages=languages, prompts=prompts, load=load):
            written = write_result(result, self.output_dir, self.formats, names[result.path], self.layout)
            failed = isinstance(written, str)
            rows["path"].append(result.path)
            rows["error"].append(written if failed else "")
            rows["duration"].append(0.0 if isinstance(result, Failure) else result.duration)
            rows["language"].append("" if isinstance(result, Failure) else result.language or "")
            rows["stats"].append("{}" if isinstance(result, Failure) else json.dumps(dataclasses.asdict(result.stats)))
        return rows


def run_batch_ray(
    pair_args: dict,
    jobs: list[Job],
    output_dir: Path,
    formats: list[str],
    options: DecodingOptions = DecodingOptions(),
    *,
    ray_options: RayOptions = RayOptions(),
    batch_size: int = BATCH_SIZE,
    chunking: ChunkingOptions = ChunkingOptions(),
    progress: bool = True,
    layout: SubtitleOptions = SubtitleOptions(),
) -> dict:
    """Run a batch job on Ray; returns the summary (also written to output_dir/summary.json).

    pair_args: load_pair's arguments, for every actor to load its pair with (`main` first);
    the model weights must be where each worker looks for them, and output_dir writable by all."""
    os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "fatal")  # Ray's own notes would bury ours
    import ray

    logging.getLogger("ray").setLevel(logging.ERROR)
    log = BatchLog(jobs, output_dir, formats, progress)
    try:
        if log.todo:
            if not ray.is_initialized():
                ray.init(address=ray_options.address, include_dashboard=False, logging_level="ERROR",
                         log_to_driver=False)
            ray.data.DataContext.get_current().enable_progress_bars = False
            by_path = {str(job.path): job for job in log.todo}
            items = [{"path": str(job.path), "name": job.name, "language": job.language or "", "prompt": job.prompt or ""}
                     for job in log.todo]
            gpus = 1 if str(pair_args.get("device", "cpu")).startswith("cuda") else 0
            actor_args = dict(pair_args=pair_args, options=options, chunking=chunking, batch_size=batch_size,
                              output_dir=str(log.output_dir), formats=formats, layout=layout,
                              threads=ray_options.threads)
            # decoding audio must not wait for the CPUs the actors hold (it takes no Ray CPU), and
            # a few tasks at a time keep ahead of the actors without crowding them
            outcomes = (ray.data.from_items(items, override_num_blocks=len(items))
                        .map(_decode, num_cpus=0, compute=ray.data.TaskPoolStrategy(size=DECODE_TASKS))
                        .map_batches(_Transcriber, fn_constructor_kwargs=actor_args, batch_size=FILES_PER_CALL,
                                     compute=ray.data.ActorPoolStrategy(size=ray_options.actors),
                                     num_cpus=ray_options.threads, num_gpus=gpus))
            for row in outcomes.iter_rows():
                job = by_path[str(row["path"])]
                if row["error"]:
                    log.file_failed(job, str(row["error"]))
                else:
                    log.bar.advance(float(row["duration"]))
                    log.file_done(job, float(row["duration"]), str(row["language"]) or None,
                                  DecodingStats(**json.loads(row["stats"])))
    finally:
        summary = log.close()
    return summary
