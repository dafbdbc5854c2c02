"""Batch jobs: many files in, one output per file and format, resumable, failures recorded.

Outputs are written atomically, so an interrupted job leaves only whole files, and a re-run
skips every input whose outputs all exist. A file that fails goes into `failures.jsonl` with its
error and the job goes on; `summary.json` says what the run did.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

from .jobs import AudioProgress, Job
from .options import BATCH_SIZE, ChunkingOptions, DecodingOptions
from .pair import WhisperPair
from .pipeline import Failure, transcribe
from .stats import DecodingStats
from .writers import write_atomic, write_outputs

FAILURES_FILE = "failures.jsonl"
SUMMARY_FILE = "summary.json"


def outputs_exist(job: Job, output_dir: Path, formats: list[str]) -> bool:
    return all((output_dir / f"{job.name}.{fmt}").is_file() for fmt in formats)


def run_batch(
    pair: WhisperPair,
    jobs: list[Job],
    output_dir: Path,
    formats: list[str],
    options: DecodingOptions = DecodingOptions(),
    *,
    batch_size: int = BATCH_SIZE,
    chunking: ChunkingOptions = ChunkingOptions(),
    use_assistant: bool = True,
    progress: bool = True,
    max_words_per_line: int | None = None,
    on_file: Callable[[Job, Path | None], None] | None = None,
) -> dict:
    """Run a batch job; returns the summary (also written to output_dir/summary.json).
    max_words_per_line: as writers.render."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    todo = [job for job in jobs if not outputs_exist(job, output_dir, formats)]
    skipped = len(jobs) - len(todo)
    by_path = {str(job.path): job for job in todo}
    languages = {str(job.path): job.language for job in todo if job.language}
    failures_path = output_dir / FAILURES_FILE
    failures_path.write_text("")

    started = time.perf_counter()
    stats = DecodingStats()
    done = failed = 0
    audio = 0.0
    bar = AudioProgress([job.path for job in todo], enabled=progress)

    def record_failure(job: Job, error: str) -> None:
        with failures_path.open("a") as f:
            f.write(json.dumps({"path": str(job.path), "error": error}) + "\n")
        bar.write(f"error: {error}")

    try:
        results = transcribe(pair, [job.path for job in todo], options, batch_size=batch_size, chunking=chunking,
                             languages=languages, use_assistant=use_assistant, on_window=bar.advance)
        for result in results:
            job, written = by_path[result.path], None
            if isinstance(result, Failure):
                record_failure(job, result.error)
            else:
                try:
                    written = write_outputs(result, output_dir, formats, name=job.name,
                                            max_words_per_line=max_words_per_line)[0]
                except OSError as error:  # a full disk, a name the file system refuses: the job goes on
                    record_failure(job, f"{job.path}: cannot write its output ({error})")
                else:
                    done += 1
                    audio += result.duration
                    stats.add(result.stats)
            failed += written is None
            bar.file_done(result.path, failed=written is None)
            if on_file is not None:
                on_file(job, written)
    finally:
        bar.close()
        wall = time.perf_counter() - started
        totals = stats.as_dict()
        summary = {
            "files": len(jobs), "done": done, "failed": failed, "skipped": skipped,
            "interrupted": done + failed < len(todo),
            "audio_hours": round(audio / 3600, 6), "wall_seconds": round(wall, 3),
            "real_time_factor": round(wall / audio, 4) if audio else None,
            "acceptance": totals["acceptance"], "stats": totals,
            "failures_file": str(failures_path),
        }
        write_atomic(output_dir / SUMMARY_FILE, json.dumps(summary, indent=2) + "\n")
    return summary
