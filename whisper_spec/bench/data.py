"""The utterances a benchmark runs on: a manifest with references, an audio folder or glob, or a
Hugging Face dataset."""

from __future__ import annotations

import contextlib
import json
import socket
import tempfile
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..jobs.inputs import collect_jobs
from ..speech.audio import SAMPLE_RATE, load_audio


@dataclass(frozen=True)
class Utterance:
    id: str
    audio: np.ndarray  # 16 kHz mono float32
    text: str | None  # reference transcript; None: no WER
    language: str | None

    @property
    def seconds(self) -> float:
        return len(self.audio) / SAMPLE_RATE


def _decode_bytes(data: bytes, name: str) -> np.ndarray:
    with tempfile.NamedTemporaryFile(suffix=Path(name).suffix or ".wav") as tmp:
        tmp.write(data)
        tmp.flush()
        return load_audio(tmp.name)


def load_utterances(source: str, *, config: str | None = None, split: str = "test", sets: list[str] | None = None,
                    limit: int | None = None, language: str | None = None) -> list[Utterance]:
    """Utterances from a JSON-lines manifest (path, text, language; filtered by `set`), an audio
    folder or glob (no references), or a Hugging Face dataset with config and split: its hub id, or a
    folder of its repository's files (Parquet, as `huggingface-cli download --repo-type dataset` writes it)."""
    path = Path(source)
    if not path.exists() and (source.startswith((".", "/", "~")) or path.suffix):
        raise ValueError(f"{source}: no such file or folder")
    if path.suffix == ".jsonl" and path.is_file():
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        if sets:
            rows = [r for r in rows if r.get("set") in sets]
        rows = rows[:limit] if limit else rows
        return [Utterance(r.get("utt_id") or r["path"], load_audio(path.parent / r["path"]), r.get("text"),
                          language or r.get("language")) for r in rows]
    if path.is_dir() and any(path.rglob("*.parquet")):  # a dataset repository's files, as the hub holds them
        return _hub_utterances(source, config, split, limit, language)
    if path.is_dir() or any(c in source for c in "*?["):
        jobs = collect_jobs(source)[:limit] if limit else collect_jobs(source)
        return [Utterance(job.name, load_audio(job.path), None, language) for job in jobs]
    return _hub_utterances(source, config, split, limit, language)


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face hub's host answers at all: offline, datasets would retry for tens of
    seconds before failing."""
    from huggingface_hub import constants

    host = urllib.parse.urlparse(constants.ENDPOINT).hostname
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


@contextlib.contextmanager
def _offline():
    """The hub libraries' offline mode for one call: datasets in the local cache load, others fail at once."""
    import datasets
    from huggingface_hub import constants

    saved = constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = datasets.config.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE = saved


def _hub_utterances(dataset_id: str, config: str | None, split: str, limit: int | None, language: str | None):
    import datasets

    online = Path(dataset_id).is_dir() or hub_reachable()
    try:
        with contextlib.nullcontext() if online else _offline():
            try:
                data = datasets.load_dataset(dataset_id, config, split=split, streaming=limit is not None)
            except RuntimeError as error:
                if "scripts are no longer supported" not in str(error):
                    raise
                # datasets >= 4 runs no loading script (facebook/voxpopuli has one): the hub's Parquet export
                data = datasets.load_dataset(dataset_id, config, split=split, streaming=limit is not None,
                                             revision="refs/convert/parquet")
    except Exception as error:  # noqa: BLE001 - any hub or network failure: one clear line
        reason = str(error).splitlines()[0] if online else "the Hugging Face hub is not reachable and the dataset is not cached"
        raise ValueError(f"{dataset_id}: cannot load the dataset ({reason})") from None
    data = data.cast_column("audio", datasets.Audio(decode=False))
    language = language or (config if config and len(config) == 2 else None)
    out = []
    for i, row in enumerate(data):
        if limit is not None and i >= limit:
            break
        audio = row["audio"]
        if audio.get("bytes"):
            samples = _decode_bytes(audio["bytes"], audio.get("path") or "audio.wav")
        else:
            samples = load_audio(audio["path"])
        text = next((row[k] for k in ("text", "normalized_text", "sentence", "raw_text", "transcription") if k in row), None)
        name = next((row[k] for k in ("id", "audio_id") if row.get(k) is not None), i)
        spoken = row.get("language") if isinstance(row.get("language"), str) else None  # VoxPopuli's is a class index
        out.append(Utterance(str(name), samples, text, language or spoken))
    return out


def batches(n: int, size: int) -> list[range]:
    """Indices 0..n-1 in consecutive batches of at most size."""
    return [range(i, min(i + size, n)) for i in range(0, n, size)]
