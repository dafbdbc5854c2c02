"""What a job is made of: audio files found in a folder, a glob or a manifest, each with the name
its outputs take and, optionally, its language."""

from __future__ import annotations

import glob
import json
from dataclasses import dataclass
from pathlib import Path

import soundfile

AUDIO_SUFFIXES = {".wav", ".flac", ".ogg", ".mp3", ".opus"}
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
