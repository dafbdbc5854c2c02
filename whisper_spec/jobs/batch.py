"""Batch jobs: many files in, one output per file and format, resumable, failures recorded.

Outputs are written atomically, so an interrupted job leaves only whole files, and a re-run
skips every input whose outputs all exist. A file that fails goes into `failures.jsonl` with its
error and the job goes on; `summary.json` says what the run did.
"""

from __future__ import annotations

import json
import time
from contextlib import suppress
from pathlib import Path
from typing import Callable

from ..decode.stats import DecodingStats
from ..longform.pipeline import transcribe
from ..longform.transcript import Failure, Transcript
from ..models.pair import WhisperPair
from ..options import BATCH_SIZE, ChunkingOptions, DecodingOptions, SubtitleOptions
from ..outputs.writers import segment_line, write_atomic, write_outputs
from .inputs import AudioProgress, Job

FAILURES_FILE = "failures.jsonl"
SUMMARY_FILE = "summary.json"
# the outputs batch jobs wrote in an output folder, one relative path a line: a job rewrites only
# these, never a file it did not create
LEDGER_FILE = ".whisper-spec-outputs"
# held (flock) while a job writes into its output folder: a second job there at once would decode every
# file again and interleave its records with the first's
LOCK_FILE = ".whisper-spec-lock"


def output_names(job: Job, formats: list[str]) -> list[str]:
    """A job's outputs, relative to the output folder (writers.write_outputs writes them there)."""
    return [f"{job.name}.{fmt}" for fmt in formats]


def outputs_exist(job: Job, output_dir: Path, formats: list[str]) -> bool:
    return all((output_dir / name).is_file() for name in output_names(job, formats))


def job_outputs(output_dir: Path) -> dict[str, str | dict]:
    """A job's outputs by name (summary and failures left out): what two runs of one job, here or
    on Ray, must agree on. JSON without its stats, whose times and draft counts depend on the run."""
    found = {}
    for path in sorted(Path(output_dir).rglob("*")):
        if path.is_file() and path.name not in (SUMMARY_FILE, FAILURES_FILE) and not path.name.startswith("."):
            content = path.read_text()
            if path.suffix == ".json":
                content = {k: v for k, v in json.loads(content).items() if k != "stats"}
            found[str(path.relative_to(output_dir))] = content
    return found


class BatchLog:
    """What a batch run has done, wherever its files are transcribed (here or on Ray workers):
    failures appended to failures.jsonl as they happen, totals kept for summary.json, written
    when the run ends, normally or not. Acceptance is also kept per language."""

    def __init__(self, jobs: list[Job], output_dir: Path, formats: list[str], progress: bool):
        self.output_dir, self.formats = Path(output_dir), formats
        self.output_dir.mkdir(parents=True, exist_ok=True)
        self._lock = _hold(self.output_dir)
        ledger = self.output_dir / LEDGER_FILE
        self.written = set(ledger.read_text().splitlines()) if ledger.is_file() else set()
        pending = [job for job in jobs if not outputs_exist(job, self.output_dir, formats)]
        foreign = {job.path: [name for name in output_names(job, formats) if (self.output_dir / name).exists()
                              and name not in self.written] for job in pending}
        self.todo = [job for job in pending if not foreign[job.path]]
        self.files, self.skipped = len(jobs), len(jobs) - len(pending)
        self.failures_path = self.output_dir / FAILURES_FILE
        self.failures_path.write_text("")
        self.started = time.perf_counter()
        self.stats, self.by_language = DecodingStats(), {}
        self.done = self.failed = 0
        self.audio = 0.0
        self.bar = AudioProgress([job.path for job in self.todo], enabled=progress)
        for job in pending:
            if foreign[job.path]:
                self._record_failure(job, f"{job.path}: {self.output_dir / foreign[job.path][0]} exists and no "
                                          f"whisper-spec job wrote it: left alone, not transcribed")

    def _record_failure(self, job: Job, error: str) -> None:
        self.bar.write(f"{self.bar.prog}: error: {error}")
        self.failed += 1
        _append(self.failures_path, json.dumps({"path": str(job.path), "error": error}) + "\n")

    def file_failed(self, job: Job, error: str) -> None:
        self._record_failure(job, error)
        self.bar.file_done(str(job.path), failed=True)

    def file_done(self, job: Job, duration: float, language: str | None, stats: DecodingStats) -> None:
        new = [name for name in output_names(job, self.formats) if name not in self.written]
        if new:
            _append(self.output_dir / LEDGER_FILE, "".join(f"{name}\n" for name in new))
            self.written.update(new)
        self.done += 1
        self.audio += duration
        self.stats.add(stats)
        if language is not None or stats.drafted:  # a file where nobody speaks has neither
            self.by_language.setdefault(language, DecodingStats()).add(stats)
        self.bar.file_done(str(job.path))

    def close(self) -> dict:
        """The summary, also written to summary.json unless this run transcribed and tried nothing (a
        rerun with every file done keeps the summary of the run that did them); the folder let go."""
        self.bar.close()
        wall = time.perf_counter() - self.started
        totals = self.stats.as_dict()
        summary = {
            "files": self.files, "done": self.done, "failed": self.failed, "skipped": self.skipped,
            "interrupted": self.done + self.failed < self.files - self.skipped,
            "audio_hours": round(self.audio / 3600, 6), "wall_seconds": round(wall, 3),
            "real_time_factor": round(wall / self.audio, 4) if self.audio else None,
            "acceptance": totals["acceptance"],
            "acceptance_by_language": {language or "unknown": stats.as_dict()["acceptance"]
                                       for language, stats in sorted(self.by_language.items(), key=lambda item: str(item[0]))},
            "stats": totals,
            "failures_file": str(self.failures_path),
        }
        if self.done or self.failed or not (self.output_dir / SUMMARY_FILE).is_file():
            write_atomic(self.output_dir / SUMMARY_FILE, json.dumps(summary, indent=2) + "\n")
        self._lock.close()
        return summary


def _append(path: Path, text: str) -> None:
    """text added to the job's record at path; an OSError naming it where it cannot be (a full disk: the
    job stops there, its outputs so far kept)."""
    try:
        with path.open("a") as record:
            record.write(text)
    except OSError as error:
        raise OSError(error.errno, f"cannot add to the job's record ({error.strerror})", str(path)) from None


def _hold(output_dir: Path):
    """The output folder's lock, taken (LOCK_FILE); ValueError where another job holds it. Released when
    the handle closes or the process ends."""
    handle = (output_dir / LOCK_FILE).open("a")
    with suppress(ImportError):  # fcntl: POSIX; elsewhere jobs are not kept apart
        import fcntl

        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise ValueError(f"{output_dir}: another whisper-spec batch job is writing there; wait for it to end "
                             "or give another --output-dir") from None
    return handle


def run_batch(
    pair: WhisperPair,
    jobs: list[Job],
    output_dir: Path,
    formats: list[str],
    options: DecodingOptions = DecodingOptions(),
    *,
    batch_size: int = BATCH_SIZE,
    chunking: ChunkingOptions = ChunkingOptions(),
    progress: bool = True,
    layout: SubtitleOptions = SubtitleOptions(),
    on_file: Callable[[Job, Path | None], None] | None = None,
    verbose: bool = False,
) -> dict:
    """Run a batch job here; returns the summary (also written to output_dir/summary.json).
    layout: srt and vtt cues (writers.cues). on_file(job, first output written or None) after each file.
    verbose: each segment on stderr as it is decoded, after its file's path."""
    log = BatchLog(jobs, output_dir, formats, progress)
    by_path = {str(job.path): job for job in log.todo}
    languages = {str(job.path): job.language for job in log.todo if job.language}
    prompts = {str(job.path): job.prompt for job in log.todo if job.prompt}
    def show(path: str, segments) -> None:
        for segment in segments:
            log.bar.write(f"{path}: {segment_line(segment)}")

    try:
        results = transcribe(pair, [job.path for job in log.todo], options, batch_size=batch_size, chunking=chunking,
                             languages=languages, prompts=prompts, on_window=log.bar.advance,
                             on_segments=show if verbose else None)
        for result in results:
            job = by_path[result.path]
            written = write_result(result, log.output_dir, formats, job.name, layout)
            if isinstance(written, str):
                log.file_failed(job, written)
            else:
                log.file_done(job, result.duration, result.language, result.stats)
            if on_file is not None:
                on_file(job, None if isinstance(written, str) else written)
    finally:
        summary = log.close()
    return summary


def write_result(result: Transcript | Failure, output_dir: Path, formats: list[str], name: str,
                 layout: SubtitleOptions) -> Path | str:
    """A file's outputs written (the first one's path), or the one-line error why there are none."""
    if isinstance(result, Failure):
        return result.error
    try:
        return write_outputs(result, output_dir, formats, name=name, layout=layout)[0]
    except OSError as error:  # a full disk, a name the file system refuses: the job goes on
        return f"{result.path}: cannot write its output ({error})"
