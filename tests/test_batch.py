"""Batch jobs: inputs, per-file languages, a corrupt file in the middle, interruption and resume."""

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import SPEECH, manifest

from whisper_spec.jobs.batch import FAILURES_FILE, SUMMARY_FILE, run_batch
from whisper_spec.jobs.inputs import Job, collect_jobs
from whisper_spec.longform.pipeline import transcribe
from whisper_spec.models.pair import WhisperPair, decoder_subset
from whisper_spec.options import DecodingOptions


def test_a_manifests_prompt_is_read_and_checked(tmp_path):
    source = tmp_path / "jobs.jsonl"
    source.write_text(json.dumps({"path": "a.wav", "prompt": "Del Potro."}) + "\n" + json.dumps({"path": "b.wav"}) + "\n")
    assert [job.prompt for job in collect_jobs(str(source))] == ["Del Potro.", None]
    source.write_text(json.dumps({"path": "a.wav", "prompt": ["Del", "Potro"]}) + "\n")
    with pytest.raises(ValueError, match="jobs.jsonl:1: 'prompt' is a text"):
        collect_jobs(str(source))


def test_a_manifests_relative_paths_are_normalised(tmp_path):
    """manifests/../audio/a.wav is audio/a.wav, as progress lines and failures.jsonl name it."""
    (tmp_path / "manifests").mkdir()
    source = tmp_path / "manifests" / "jobs.jsonl"
    source.write_text(json.dumps({"path": "../audio/./a.wav"}) + "\n" + json.dumps({"path": str(tmp_path / "x/../b.wav")}) + "\n")
    assert [str(job.path) for job in collect_jobs(str(source))] == [str(tmp_path / "audio" / "a.wav"), str(tmp_path / "b.wav")]


def test_inputs_folder_glob_and_manifest():
    folder = collect_jobs(str(SPEECH / "fleurs"))
    assert len(folder) == 35 and folder[0].name == "fleurs-de-000"
    pattern = collect_jobs(str(SPEECH / "multilingual" / "*" / "vl*.flac"))
    assert [j.name for j in pattern] == [f"nl/{j.path.stem}" for j in pattern] and len(pattern) == 5
    listed = collect_jobs(str(SPEECH / "manifest.jsonl"))
    assert len(listed) == len(manifest())
    assert listed[0].name == "librispeech/test-other/1688-142285-0000" and listed[0].language == "en"
    with pytest.raises(ValueError, match="no audio files match"):
        collect_jobs(str(SPEECH / "nothing-here-*.wav"))
    with pytest.raises(ValueError, match="^s3://bucket/talks: a URL; whisper-spec reads local files"):
        collect_jobs(["s3://bucket/talks"])


@pytest.fixture(scope="module")
def pair(base_pair):
    return WhisperPair(base_pair.main, decoder_subset(base_pair.main, [0, 1, 2, 4, 5]), base_pair.device,
                       base_pair.dtype)


@pytest.mark.slow
def test_batch_job_resumes_and_records_failures(pair, tmp_path):
    by_set = {name: [r for r in manifest() if r["set"] == name]
              for name in ("fleurs_es", "librispeech", "thorsten_de", "dutch_vl_tts", "mls_polish")}
    rows = (by_set["fleurs_es"][:3] + by_set["thorsten_de"][:3] + by_set["librispeech"][:2]
            + by_set["dutch_vl_tts"][1:] + by_set["mls_polish"][:2])
    corrupt = tmp_path / "broken.flac"
    corrupt.write_bytes(np.random.default_rng(1).bytes(3000))
    lines = [{"path": str(SPEECH / r["path"]), "language": r["language"]} for r in rows]
    lines.insert(5, {"path": str(corrupt), "language": "de"})
    # one Dutch clip declared German: the manifest's language is used, not the detected one
    lines[0] = {"path": str(SPEECH / "multilingual/nl/vl00203.flac"), "language": "de"}
    source = tmp_path / "jobs.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    jobs = collect_jobs(str(source))
    out = tmp_path / "out"
    formats = ["json", "srt"]

    class Stop(KeyboardInterrupt):
        pass

    finished = []

    def interrupt_after_four(job, written):
        finished.append(job)
        if len(finished) == 4:
            raise Stop

    with pytest.raises(Stop):
        run_batch(pair, jobs, out, formats, DecodingOptions(timestamps=True), batch_size=4, progress=False,
                  on_file=interrupt_after_four)
    summary = json.loads((out / SUMMARY_FILE).read_text())
    assert summary["interrupted"] and summary["done"] == 4
    written = sorted(p.name for p in out.iterdir() if p.suffix in (".json", ".srt") and p.name != SUMMARY_FILE)
    assert len(written) == 8 and not list(out.glob(".*.tmp"))  # whole files only

    summary = run_batch(pair, jobs, out, formats, DecodingOptions(timestamps=True), batch_size=4, progress=False)
    assert (summary["skipped"], summary["done"], summary["failed"]) == (4, len(jobs) - 5, 1)
    assert not summary["interrupted"] and summary["audio_hours"] > 0 and summary["real_time_factor"] > 0
    assert 0 < summary["acceptance"] <= 1
    failures = [json.loads(line) for line in (out / FAILURES_FILE).read_text().splitlines()]
    assert [f["path"] for f in failures] == [str(corrupt)] and "cannot decode audio" in failures[0]["error"]
    for job, line in zip(jobs, lines):
        if job.path == corrupt:
            continue
        result = json.loads((out / f"{job.name}.json").read_text())
        assert result["language"] == line["language"]
        assert result["text"] and (out / f"{job.name}.srt").read_text().startswith("1\n")

    again = run_batch(pair, jobs, out, formats, DecodingOptions(timestamps=True), progress=False)
    assert (again["skipped"], again["done"], again["failed"]) == (len(jobs) - 1, 0, 1)


def test_output_names_stay_inside_the_output_folder(tmp_path):
    listed = tmp_path / "jobs" / "m.jsonl"
    listed.parent.mkdir()
    paths = ["../audio/clip.flac", "./a/../../b/c.flac", str(tmp_path / "abs" / "d.flac"), "../../e.flac"]
    listed.write_text("".join(json.dumps({"path": p}) + "\n" for p in paths))
    names = [job.name for job in collect_jobs(str(listed))]
    assert names == ["audio/clip", "a/b/c", "d", "e"]
    out = tmp_path / "out"
    assert all((out / f"{name}.txt").resolve().is_relative_to(out.resolve()) for name in names)


@pytest.mark.slow
def test_a_job_writes_inside_its_output_folder_and_never_over_a_file_it_did_not_create(pair, tmp_path):
    """A manifest naming `../audio/clip.flac` once wrote beside the audio, over its metadata."""
    audio, out = tmp_path / "audio", tmp_path / "jobs" / "out"
    audio.mkdir()
    out.mkdir(parents=True)
    for name, clip in (("clip", "1089-134686-0001"), ("other", "1089-134686-0002")):
        shutil.copy(SPEECH / f"librispeech/test-clean/{clip}.flac", audio / f"{name}.flac")
    (audio / "clip.json").write_text("metadata")
    (out / "other.txt").write_text("mine")  # the user's, in the output folder
    listed = tmp_path / "jobs" / "m.jsonl"
    listed.write_text(json.dumps({"path": "../audio/clip.flac"}) + "\n" + json.dumps({"path": str(audio / "other.flac")}))
    jobs = collect_jobs(str(listed))
    formats = ["txt", "json"]
    summary = run_batch(pair, jobs, out, formats, DecodingOptions(language="en"), progress=False)
    assert (summary["done"], summary["failed"]) == (1, 1)
    assert (audio / "clip.json").read_text() == "metadata" and not (audio / "clip.txt").exists()
    assert (out / "audio" / "clip.txt").read_text().strip()
    assert (out / "other.txt").read_text() == "mine" and not (out / "other.json").exists()
    (failure,) = [json.loads(line) for line in (out / FAILURES_FILE).read_text().splitlines()]
    assert "other.txt exists and no whisper-spec job wrote it" in failure["error"]
    # its own outputs a job rewrites: one of them gone, the file is transcribed again
    (out / "audio" / "clip.json").unlink()
    again = run_batch(pair, jobs, out, formats, DecodingOptions(language="en"), progress=False)
    assert (again["done"], again["failed"]) == (1, 1) and (out / "audio" / "clip.json").is_file()


@pytest.mark.slow
def test_batch_takes_several_inputs_as_an_unquoted_glob_hands_them_over(tmp_path, capsys):
    from whisper_spec.cli.main import main

    files = sorted((SPEECH / "librispeech" / "test-clean").glob("1089-134686-000[12].flac"))
    out = tmp_path / "out"
    assert main(["batch", *map(str, files), str(SPEECH / "fleurs" / "fleurs-en-000.ogg"), "-o", str(out),
                 "--model", "tiny.en", "--quiet"]) == 0
    assert "3 done" in capsys.readouterr().err
    assert all((out / f"{f.stem}.txt").read_text().strip() for f in files)


@pytest.mark.slow
def test_each_file_reads_its_own_prompt_in_a_mixed_job(pair, tmp_path):
    """A manifest's prompts (and the job's, for files without one): a batch holds one prompt, so each
    file's text is the one it gets transcribed alone with its prompt by the main model, in both modes."""
    french = "Juan Martín del Potro, en 2007."
    files = {"fleurs/fleurs-fr-006.ogg": french, "fleurs/fleurs-es-006.ogg": None,
             "fleurs/fleurs-en-006.ogg": "Luna, Northern Marianas.", "fleurs/fleurs-fr-005.ogg": french}
    source = tmp_path / "jobs.jsonl"
    source.write_text("".join(json.dumps({"path": str(SPEECH / p)} | ({"prompt": q} if q else {})) + "\n"
                              for p, q in files.items()))
    job_prompt = "Carlos, Luna."
    main_only = DecodingOptions(speculation="off", prompt=job_prompt)
    alone = {path: next(transcribe(pair, [SPEECH / path], replace(main_only, prompt=prompt or job_prompt))).text
             for path, prompt in files.items()}
    unprompted = {path: next(transcribe(pair, [SPEECH / path], replace(main_only, prompt=None))).text for path in files}
    assert alone != unprompted  # the prompts change some text
    for speculation in ("on", "off"):
        out = tmp_path / speculation
        summary = run_batch(pair, collect_jobs(str(source)), out, ["json"], replace(main_only, speculation=speculation),
                            batch_size=4, progress=False)
        assert summary["done"] == len(files)
        for path in files:
            assert json.loads((out / f"{Path(path).stem}.json").read_text())["text"] == alone[path], (speculation, path)


def test_a_file_where_nobody_speaks_adds_no_language_to_the_summary(tmp_path):
    """Its transcript claims no language (pipeline), and the summary's acceptance by language gains no
    entry for it (it was "nn": null)."""
    from whisper_spec.decode.stats import DecodingStats
    from whisper_spec.jobs.batch import BatchLog

    jobs = [Job(tmp_path / "talk.wav", "talk"), Job(tmp_path / "noise.wav", "noise")]
    log = BatchLog(jobs, tmp_path / "out", ["txt"], progress=False)
    log.file_done(jobs[0], 10.0, "en", DecodingStats(drafted=10, accepted=8))
    log.file_done(jobs[1], 6.0, None, DecodingStats())
    assert log.close()["acceptance_by_language"] == {"en": 0.8}


def test_one_job_at_a_time_writes_into_an_output_folder_and_a_rerun_with_nothing_to_do_keeps_the_summary(tmp_path):
    """A second job into the folder while one runs is refused in one line (both would decode every file
    and interleave their records); once the first ends it may run. A rerun that transcribes nothing
    (every output there) leaves the summary of the run that did them."""
    import subprocess
    import sys

    from whisper_spec.decode.stats import DecodingStats
    from whisper_spec.jobs.batch import BatchLog

    jobs = [Job(tmp_path / "talk.wav", "talk")]
    first = BatchLog(jobs, tmp_path / "out", ["txt"], progress=False)
    with pytest.raises(ValueError, match=r"out: another whisper-spec batch job is writing there"):
        BatchLog(jobs, tmp_path / "out", ["txt"], progress=False)
    other_process = [sys.executable, "-c", "import sys, pathlib; from whisper_spec.jobs.batch import BatchLog; "
                     "BatchLog([], pathlib.Path(sys.argv[1]), ['txt'], progress=False)", str(tmp_path / "out")]
    refused = subprocess.run(other_process, capture_output=True, text=True)
    assert refused.returncode != 0 and "another whisper-spec batch job" in refused.stderr
    (tmp_path / "out" / "talk.txt").write_text("Hello.\n")
    first.file_done(jobs[0], 10.0, "en", DecodingStats(drafted=10, accepted=8))
    written = first.close()
    assert written["done"] == 1 and subprocess.run(other_process).returncode == 0
    again = BatchLog(jobs, tmp_path / "out", ["txt"], progress=False)
    assert again.todo == [] and again.close()["done"] == 0
    assert json.loads((tmp_path / "out" / SUMMARY_FILE).read_text())["done"] == 1


def test_a_full_disk_names_the_file_it_could_not_write(tmp_path):
    """The job's records on a full disk (/dev/full answers every write with ENOSPC): the error names
    the record, and a failure is shown before its record is tried."""
    from whisper_spec.decode.stats import DecodingStats
    from whisper_spec.jobs.batch import FAILURES_FILE, LEDGER_FILE, BatchLog

    jobs = [Job(tmp_path / "talk.wav", "talk"), Job(tmp_path / "broken.wav", "broken")]
    out = tmp_path / "out"
    out.mkdir()
    (out / LEDGER_FILE).symlink_to("/dev/full")
    (out / FAILURES_FILE).symlink_to("/dev/full")
    log = BatchLog(jobs, out, ["txt"], progress=False)
    with pytest.raises(OSError, match=r"No space left on device.*\.whisper-spec-outputs"):
        log.file_done(jobs[0], 10.0, "en", DecodingStats())
    with pytest.raises(OSError, match=r"No space left on device.*failures\.jsonl"):
        log.file_failed(jobs[1], "broken.wav: not audio")
    assert log.failed == 1
