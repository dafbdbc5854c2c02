"""Batch jobs on a local Ray instance: the same outputs as a local run, failures recorded, and a
job killed mid-run finished by a re-run with whole files only."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from conftest import SPEECH, manifest

from whisper_spec.jobs.batch import FAILURES_FILE, SUMMARY_FILE, job_outputs, run_batch
from whisper_spec.jobs.inputs import collect_jobs
from whisper_spec.models.load import load_pair
from whisper_spec.options import DecodingOptions, RayOptions

pytest.importorskip("ray")
FORMATS = ["txt", "srt", "json"]


@pytest.fixture(scope="module")
def job_manifest(tmp_path_factory):
    """Eight shared clips in three languages, one with a prompt, and a corrupt file among them."""
    folder = tmp_path_factory.mktemp("job")
    rows = ([r for r in manifest() if r["set"] == "librispeech"][:4] + [r for r in manifest() if r["set"] == "fleurs_de"][:2]
            + [r for r in manifest() if r["set"] == "fleurs_es"][:2])
    lines = [{"path": str(SPEECH / r["path"]), "language": r["language"]} for r in rows]
    lines[-2]["prompt"] = "Se recomienda enfáticamente a los viajeros."  # fleurs-es-000: its accents change
    corrupt = folder / "broken.flac"
    corrupt.write_bytes(np.random.default_rng(2).bytes(3000))
    lines.insert(3, {"path": str(corrupt)})
    path = folder / "jobs.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


# drafting in every batch, so that acceptance is reported: speculation auto may leave a batch of
# clips to the main model alone (platform.AUTO_MAX_DRAFT_FRAMES), the text the same either way
DRAFTING = DecodingOptions(timestamps=True, speculation="on")


def command_line_pair() -> dict:
    """load_pair's arguments as `whisper-spec batch` gives them without flags (int8 decoders on CPU)."""
    from whisper_spec.cli.common import pair_args
    from whisper_spec.cli.parser import build_parser

    return pair_args(build_parser().parse_args(["batch", "x", "-o", "y"]))


@pytest.fixture(scope="module")
def local_run(job_manifest, tmp_path_factory):
    """The job run locally with the thread count of a Ray actor (RayOptions.threads): oneDNN's
    bfloat16 GEMMs, the encoder's on a CPU with AMX, sum in an order that depends on it."""
    out = tmp_path_factory.mktemp("local")
    threads = torch.get_num_threads()
    try:
        summary = run_batch(load_pair(**command_line_pair(), threads=RayOptions().threads), collect_jobs(str(job_manifest)), out, FORMATS,
                            DRAFTING, progress=False)
    finally:
        torch.set_num_threads(threads)
    return out, summary


@pytest.mark.slow
def test_ray_outputs_equal_a_local_run(job_manifest, local_run, tmp_path):
    import ray

    from whisper_spec.jobs.ray_batch import run_batch_ray

    local_out, local_summary = local_run
    out = tmp_path / "ray"
    try:
        summary = run_batch_ray(command_line_pair(), collect_jobs(str(job_manifest)), out, FORMATS,
                                DRAFTING, ray_options=RayOptions(actors=2), progress=False)
    finally:
        ray.shutdown()
    expected = job_outputs(local_out)
    assert len(expected) == 3 * 8 and job_outputs(out) == expected
    assert (summary["done"], summary["failed"]) == (local_summary["done"], local_summary["failed"]) == (8, 1)
    failures = [json.loads(line) for line in (out / FAILURES_FILE).read_text().splitlines()]
    assert len(failures) == 1 and failures[0]["path"].endswith("broken.flac") and "cannot decode" in failures[0]["error"]
    assert summary["audio_hours"] == pytest.approx(local_summary["audio_hours"], abs=1e-6)
    assert set(summary["acceptance_by_language"]) == {"en", "de", "es"} and summary["acceptance_by_language"]["en"] > 0
    assert json.loads((out / SUMMARY_FILE).read_text())["done"] == 8


@pytest.mark.slow
def test_a_killed_ray_job_is_finished_by_a_rerun(job_manifest, local_run, tmp_path):
    out = tmp_path / "killed"
    command = [sys.executable, "-m", "whisper_spec.cli.main", "batch", str(job_manifest), "-o", str(out), "-q",
               "--timestamps", *sum((["-f", f] for f in FORMATS), []), "--ray", "--ray-actors", "1"]
    job = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while len(list(out.glob("**/*.txt"))) < 3 and time.time() < deadline and job.poll() is None:
        time.sleep(0.2)
    os.killpg(job.pid, signal.SIGKILL)  # the driver, the Ray instance it started and its workers
    job.wait()
    expected = job_outputs(local_run[0])
    written = job_outputs(out)
    assert 3 <= len([name for name in written if name.endswith(".txt")]) < 8
    assert all(expected[name] == content for name, content in written.items())  # whole files only
    rerun = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 1, rerun.stderr  # the corrupt file still fails
    summary = json.loads((out / SUMMARY_FILE).read_text())
    assert summary["skipped"] >= 3 and summary["done"] + summary["skipped"] == 8
    assert job_outputs(out) == expected


@pytest.mark.slow
def test_a_worker_killed_mid_job_costs_no_output(job_manifest, local_run, tmp_path):
    out = tmp_path / "worker"
    command = [sys.executable, "-m", "whisper_spec.cli.main", "batch", str(job_manifest), "-o", str(out), "-q",
               "--timestamps", *sum((["-f", f] for f in FORMATS), []), "--ray", "--ray-actors", "2"]
    job = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while len(list(out.glob("**/*.txt"))) < 2 and time.time() < deadline and job.poll() is None:
        time.sleep(0.2)
    workers = subprocess.run(["pgrep", "-f", "ray::MapWorker"], capture_output=True, text=True).stdout.split()
    assert workers, "no Ray actor process to kill"
    os.kill(int(workers[0]), signal.SIGKILL)  # Ray restarts the actor and retries its files
    _, err = job.communicate(timeout=600)
    assert job.returncode == 1, err  # the corrupt file
    summary = json.loads((out / SUMMARY_FILE).read_text())
    assert (summary["done"], summary["failed"], summary["interrupted"]) == (8, 1, False)
    assert job_outputs(out) == job_outputs(local_run[0])
