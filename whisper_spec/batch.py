"""Batch jobs: many files in, one output per file and format, resumable, failures recorded.

Outputs are written atomically, so an interrupted job leaves only whole files, and a re-run
skips every input whose outputs all exist. A file that fails goes into `failures.jsonl` with its
error and the job goes on; `summary.json` says what the run did.
"""

from __future__ import annotations

import glob
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import soundfile

from .decoding import DecodingOptions, DecodingStats
from .loader import WhisperPair
from .transcribe import ChunkingOptions, Failure, transcribe
from .writers import write_atomic, write_outputs

AUDIO_SUFFIXES = {".wav", ".flac", ".ogg", ".mp3", ".opus"}
FAILURES_FILE = "failures.jsonl"
SUMMARY_FILE = "summary.json"


@dataclass(frozen=True)
class Job:
    path: Path
    name: str  # output path relative to the output directory, without suffix
    language: str | None = None


def collect_jobs(source: str) -> list[Job]:
    """A folder (searched recursively), a glob pattern, or a JSON-lines manifest with `path`
    (relative to the manifest) and optional `language` per line."""
    path = Path(source)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix.lower() in AUDIO_SUFFIXES and p.is_file())
        return [Job(p, str(p.relative_to(path).with_suffix(""))) for p in files]
    if path.is_file() and path.suffix.lower() in (".jsonl", ".json"):
        jobs = []
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                audio = Path(row["path"])
            except (json.JSONDecodeError, KeyError, TypeError):
                raise ValueError(f"{path}:{number}: not a JSON object with a 'path'") from None
            full = audio if audio.is_absolute() else path.parent / audio
            name = audio.with_suffix("") if not audio.is_absolute() else Path(audio.stem)
            jobs.append(Job(full, str(name), row.get("language")))
        return jobs
    if path.is_file():
        return [Job(path, path.stem)]
    matches = sorted(Path(p) for p in glob.glob(source, recursive=True) if Path(p).suffix.lower() in AUDIO_SUFFIXES)
    if not matches:
        raise ValueError(f"{source}: no such folder, manifest or audio file, and no audio files match it")
    root = Path(_fixed_prefix(source))
    return [Job(p, str(p.relative_to(root).with_suffix("")) if p.is_relative_to(root) else p.stem) for p in matches]


def _fixed_prefix(pattern: str) -> str:
    """The folder part of a glob pattern before its first wildcard."""
    parts = []
    for part in Path(pattern).parts:
        if glob.has_magic(part):
            break
        parts.append(part)
    return str(Path(*parts)) if parts else "."


def audio_seconds(path: Path) -> float:
    """Duration from the file header (cheap); 0 where the header cannot be read."""
    try:
        info = soundfile.info(str(path))
        return info.frames / info.samplerate
    except Exception:
        return 0.0


def audio_progress(paths: list[Path], enabled: bool):
    """A progress bar over the audio seconds of paths (totals from the file headers)."""
    from tqdm.auto import tqdm

    total = round(sum(audio_seconds(Path(p)) for p in paths)) if enabled else 0
    return tqdm(total=total, unit="s", unit_scale=True, desc="audio", disable=not enabled or None)


def outputs_exist(job: Job, output_dir: Path, formats: list[str]) -> bool:
    return all((output_dir / f"{job.name}.{fmt}").is_file() for fmt in formats)


def run_batch(
    pair: WhisperPair,
    jobs: list[Job],
    output_dir: Path,
    formats: list[str],
    options: DecodingOptions = DecodingOptions(),
    *,
    batch_size: int = 4,
    chunking: ChunkingOptions = ChunkingOptions(),
    use_assistant: bool = True,
    progress: bool = True,
    on_file: Callable[[Job, Path | None], None] | None = None,
) -> dict:
    """Run a batch job; returns the summary (also written to output_dir/summary.json)."""
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
    bar = audio_progress([job.path for job in todo], progress)
    try:
        results = transcribe(pair, [job.path for job in todo], options, batch_size=batch_size, chunking=chunking,
                             languages=languages, use_assistant=use_assistant, on_window=lambda s: bar.update(round(s)))
        for result in results:
            job = by_path[result.path]
            if isinstance(result, Failure):
                failed += 1
                with failures_path.open("a") as f:
                    f.write(json.dumps({"path": str(job.path), "error": result.error}) + "\n")
                written = None
            else:
                done += 1
                audio += result.duration
                stats.add(result.stats)
                written = write_outputs(result, output_dir, formats, name=job.name)[0]
            bar.set_postfix(files=f"{done + failed}/{len(todo)}", failed=failed)
            if on_file is not None:
                on_file(job, written)
    finally:
        bar.close()
        wall = time.perf_counter() - started
        summary = {
            "files": len(jobs), "done": done, "failed": failed, "skipped": skipped,
            "interrupted": done + failed < len(todo),
            "audio_hours": audio / 3600, "wall_seconds": wall,
            "real_time_factor": wall / audio if audio else None,
            "acceptance": stats.acceptance, "stats": stats.as_dict(),
            "failures_file": str(failures_path),
        }
        write_atomic(output_dir / SUMMARY_FILE, json.dumps(summary, indent=2) + "\n")
    return summary
