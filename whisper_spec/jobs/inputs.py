"""What a job is made of: audio files found in a folder, a glob or a manifest, each with the name
its outputs take and, optionally, its language and prompt."""

from __future__ import annotations

import glob
import json
import os
import re
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import soundfile

from ..speech.audio import STDIN

# the files a folder or a glob gives a job: libsndfile's formats, and what people record with phones
# and browsers, audio and video containers alike (audio.load_audio reads them through PyAV)
AUDIO_SUFFIXES = {".wav", ".flac", ".ogg", ".oga", ".opus", ".mp3", ".aiff", ".aif", ".m4a", ".aac", ".mp4",
                  ".m4v", ".mov", ".mkv", ".mka", ".webm", ".wma", ".amr", ".3gp"}


@dataclass(frozen=True)
class Job:
    path: Path
    name: str  # output path relative to the output directory, without suffix
    language: str | None = None
    prompt: str | None = None  # what its windows read before them (DecodingOptions.prompt)


def collect_jobs(sources: str | list[str]) -> list[Job]:
    """The jobs of one or more sources, each a folder (searched recursively), a glob pattern, an
    audio file, or a JSON-lines manifest with `path` (relative to the manifest) and optional
    `language` and `prompt` per line; output names made unique."""
    jobs = []
    for source in [sources] if isinstance(sources, str) else sources:
        if str(source) == STDIN:  # a job is resumed by its files' names, and piped audio has none to find again
            raise ValueError(f"{STDIN}: piped audio is read by whisper-spec transcribe, not by a batch job")
        found = _find_jobs(_local(source))
        if not found:
            raise ValueError(f"{source}: no audio files ({', '.join(sorted(AUDIO_SUFFIXES))})")
        jobs += found
    return unique_names([replace(job, name=_contained(job.name, job.path)) for job in jobs])


def passed_over(sources: list[str], output_dir: Path) -> list[Path]:
    """The files in the folders among sources that a job leaves out: not audio by their suffix
    (hidden files and the job's own outputs aside)."""
    outputs = Path(output_dir).resolve()
    return sorted(p for source in sources if Path(source).is_dir() for p in Path(source).rglob("*")
                  if p.is_file() and p.suffix.lower() not in AUDIO_SUFFIXES and not p.name.startswith(".")
                  and not p.resolve().is_relative_to(outputs))


def _contained(name: str, path: Path) -> str:
    """An output name that stays inside the output folder: no parent steps, no root (a manifest's
    `../audio/clip.wav` writes `audio/clip.*`); the file's stem where nothing else is left."""
    parts = [part for part in Path(name).parts if part not in ("..", ".") and not Path(part).anchor]
    return str(Path(*parts)) if parts else path.resolve().stem


def jobs_of_files(paths: list[str | Path]) -> list[Job]:
    """Jobs for files given one by one, named by their stems (made unique); STDIN is named stdin."""
    return unique_names([Job(Path(_local(p)), "stdin" if str(p) == STDIN else Path(p).stem) for p in paths])


def _local(source: str | Path) -> str | Path:
    """source, refused with one line where it is a URL (a Path would quietly make it a missing file)."""
    if re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*://", str(source)):
        raise ValueError(f"{source}: a URL; whisper-spec reads local files (download it first, or pipe it in as -)")
    return source


def unique_names(jobs: list[Job]) -> list[Job]:
    """Jobs whose outputs would overwrite each other's get longer names: files of one name in other
    folders take their path below the folders' common one (a/x, b/x), files that differ only in
    their audio format keep it (short.mp3, short.ogg). A file listed twice is done once."""
    seen: set[Path] = set()
    jobs = [job for job in jobs if not (job.path.resolve() in seen or seen.add(job.path.resolve()))]
    for rename in (_relative_to_common_folder, lambda job, root: f"{job.name}{job.path.suffix}"):
        groups: dict[str, list[int]] = {}
        for i, job in enumerate(jobs):
            groups.setdefault(job.name, []).append(i)
        for indices in (g for g in groups.values() if len(g) > 1):
            root = Path(os.path.commonpath([jobs[i].path.resolve().parent for i in indices]))
            for i in indices:
                jobs[i] = replace(jobs[i], name=rename(jobs[i], root))
    return jobs


def _relative_to_common_folder(job: Job, root: Path) -> str:
    path = job.path.resolve()
    return str(path.relative_to(root).with_suffix("")) if path.parent != root else job.name


def _find_jobs(source: str) -> list[Job]:
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
            if not isinstance(row.get("prompt", ""), (str, type(None))):
                raise ValueError(f"{path}:{number}: 'prompt' is a text")
            # normalised as a user would write it (manifest/../audio/x.wav is audio/x.wav), links left alone
            full = Path(os.path.normpath(audio if audio.is_absolute() else path.parent / audio))
            name = audio.with_suffix("") if not audio.is_absolute() else Path(audio.stem)
            jobs.append(Job(full, str(name), row.get("language"), row.get("prompt")))
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
    """Duration from the file header (cheap; a container's through PyAV); 0 where it cannot be read
    (STDIN: reading it would use it up)."""
    if str(path) == STDIN:
        return 0.0
    try:
        info = soundfile.info(str(path))
        return info.frames / info.samplerate
    except Exception:
        pass
    try:
        import av

        with av.open(str(path)) as container:
            return float(container.duration or 0) / av.time_base
    except Exception:
        return 0.0


LOG_EVERY_SECONDS = 30.0  # where stderr is a log: a progress line at most this often within a file


class AudioProgress:
    """Progress over the audio seconds of some files: a bar where stderr is a terminal, a line per
    finished file where it is not (a log), and in a log every LOG_EVERY_SECONDS a line of the audio
    seconds done, so a long file shows it moves. Totals come from the file headers, grown where
    decoding finds more audio than a header said; a file that fails leaves the total, so the bar
    ends at 100%. Lines written through it never land on the bar."""

    def __init__(self, paths: list[Path], enabled: bool, prog: str = "whisper-spec"):
        from tqdm.auto import tqdm

        self.prog, self.enabled = prog, enabled
        self.seconds = {str(p): audio_seconds(Path(p)) for p in paths} if enabled else {}
        self.files, self.finished = len(paths), 0
        self.bar = tqdm(total=round(sum(self.seconds.values()), 3), unit="s", unit_scale=True, desc="audio",
                        disable=not (enabled and sys.stderr.isatty()))
        self.done_seconds, self.logged = 0.0, time.monotonic()
        if enabled and self.bar.disable:  # a log's first line: what the job holds, before any of it is done
            print(f"{prog}: {self.files} file{'s' * (self.files != 1)}, {self.bar.total:.0f} s of audio to transcribe",
                  file=sys.stderr, flush=True)
        elif enabled:  # the first windows take a while (speech found, encoded): say so rather than sit at 0%
            self.bar.set_postfix_str("finding speech, decoding the first windows")

    def advance(self, seconds: float) -> None:
        if not self.done_seconds:
            self.bar.set_postfix_str("")
        self.done_seconds += seconds
        # the bar shows the rounded seconds done, never past its total (tqdm clamps and warns past it)
        shown = round(self.done_seconds, 3)
        if shown > self.bar.total:  # a header that undercounts: the total grows instead
            self.bar.total = shown
        self.bar.update(shown - self.bar.n)
        self.bar.n = shown  # the steps' float sum drifts
        if self.enabled and self.bar.disable and time.monotonic() - self.logged >= LOG_EVERY_SECONDS:
            self.logged = time.monotonic()
            print(f"{self.prog}: {self.done_seconds:.0f} of {self.bar.total:.0f} s of audio transcribed",
                  file=sys.stderr, flush=True)

    def file_done(self, path: str, failed: bool = False) -> None:
        self.finished += 1
        if failed and self.seconds.get(path):
            self.bar.total = max(round(self.bar.total - self.seconds[path], 3), self.bar.n)
            self.bar.refresh()
        if self.enabled and self.bar.disable and not failed:
            print(f"{self.prog}: [{self.finished}/{self.files}] {path}: done", file=sys.stderr, flush=True)

    def write(self, line: str, file=None) -> None:
        """A line (a note, an error, a transcript) above the bar rather than on it."""
        self.bar.write(line, file=file or sys.stderr)

    def close(self) -> None:
        self.bar.close()
