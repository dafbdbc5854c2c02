"""What a new user meets: output names, totals, re-runs, bad input and output folders, messages,
progress, output formats, file modes and the README's own examples. Real audio from the shared
speech set; small files made here where a bad input is needed."""

import contextlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch
from conftest import speech
from whisper_spec.cli.main import main

from whisper_spec.jobs.inputs import collect_jobs
from whisper_spec.models import load

ROOT = Path(__file__).resolve().parents[1]
QUILTER = speech("librispeech/dev-clean/1272-128104-0000.flac")
CLIPS = [speech(f"librispeech/test-clean/{name}.flac")
         for name in ("1089-134686-0000", "1089-134686-0001", "1089-134686-0002", "1089-134691-0000")]


def run(capsys, *args):
    code = main([*map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.slow
def test_files_of_one_name_get_outputs_of_their_own(capsys, tmp_path):
    audio, rate = soundfile.read(QUILTER, dtype="float32")
    folder = tmp_path / "in"
    (folder / "a").mkdir(parents=True)
    (folder / "b").mkdir()
    soundfile.write(folder / "short.ogg", audio, rate, format="OGG")
    soundfile.write(folder / "short.flac", audio, rate)
    assert sorted(j.name for j in collect_jobs(str(folder))) == ["short.flac", "short.ogg"]
    code, _, err = run(capsys, "batch", folder, "-o", tmp_path / "out", "-m", "tiny.en", "-q")
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "out").glob("*.txt")) == ["short.flac.txt", "short.ogg.txt"]
    assert err.startswith("2 done")

    shutil.copy(QUILTER, folder / "a" / "x.flac")
    shutil.copy(CLIPS[0], folder / "b" / "x.flac")
    code, _, err = run(capsys, "transcribe", folder / "a" / "x.flac", folder / "b" / "x.flac", "-o", tmp_path / "t",
                       "-m", "tiny.en", "-q")
    assert code == 0, err
    assert "Quilter" in (tmp_path / "t" / "a" / "x.txt").read_text()
    assert "Quilter" not in (tmp_path / "t" / "b" / "x.txt").read_text()


@contextlib.contextmanager
def no_model_loads():
    """Fail the test if a command loads a model inside this block."""
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(load, "load_pair", refuse)
        yield


@pytest.mark.slow
def test_batch_totals_add_up_and_a_finished_job_is_left_alone(capsys, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    for clip in CLIPS:
        shutil.copy(clip, folder)
    out = tmp_path / "out"
    code, _, err = run(capsys, "batch", folder, "-o", out, "-m", "tiny.en", "-f", "json", "-q")
    assert code == 0, err
    summary = json.loads((out / "summary.json").read_text())
    per_file = [json.loads(p.read_text())["stats"] for p in out.glob("*.json") if p.name != "summary.json"]
    assert len(per_file) == 4
    for key in ("encoder_seconds", "decoding_seconds"):
        # each file's share of its batch's time, not the batch's whole time once per file
        assert sum(s[key] for s in per_file) == pytest.approx(summary["stats"][key], abs=0.01)
    assert summary["stats"]["encoder_seconds"] + summary["stats"]["decoding_seconds"] < summary["wall_seconds"]

    before = (out / "summary.json").read_text()
    with no_model_loads():
        code, _, err = run(capsys, "batch", folder, "-o", out, "-m", "tiny.en", "-f", "json")
    assert code == 0 and err.startswith("nothing to do"), err
    assert (out / "summary.json").read_text() == before

    (tmp_path / "empty").mkdir()
    code, _, err = run(capsys, "batch", tmp_path / "empty", "-o", out, "-m", "tiny.en")
    assert code == 2 and err.count("\n") == 1 and "no audio files" in err


@pytest.mark.parametrize("where", ["a file", "below a file", "/proc"])
def test_an_unusable_output_folder_fails_before_any_work(capsys, tmp_path, where):
    (tmp_path / "existing.txt").write_text("x")
    output = {"a file": tmp_path / "existing.txt", "below a file": tmp_path / "existing.txt" / "out",
              "/proc": Path("/proc/whisper-spec-out")}[where]
    for command in (["transcribe", QUILTER], ["batch", QUILTER.parent]):
        with no_model_loads():  # refused before the model loads or any audio is decoded
            code, out, err = run(capsys, *command, "-o", output, "-m", "tiny.en")
        assert code == 2 and out == "" and err.count("\n") == 1 and str(output) in err, err


@pytest.mark.slow
def test_unwritable_output_file_is_a_failure_and_the_job_goes_on(capsys, tmp_path):
    folder = tmp_path / "in"
    (folder / "sub").mkdir(parents=True)
    shutil.copy(QUILTER, folder / "sub" / "first.flac")
    shutil.copy(CLIPS[0], folder / "second.flac")
    out = tmp_path / "out"
    out.mkdir()
    (out / "sub").write_text("")  # a file where the transcript's folder should go: the write fails
    code, _, err = run(capsys, "batch", folder, "-o", out, "-m", "tiny.en", "-q")
    assert code == 1 and "Traceback" not in err
    assert (out / "second.txt").read_text().strip()
    failures = [json.loads(line) for line in (out / "failures.jsonl").read_text().splitlines()]
    assert len(failures) == 1 and "cannot write its output" in failures[0]["error"]


@pytest.mark.parametrize("args, message", [
    (["--device", "tpu"], "not a device"),
    (["--device", "mps"], "not a device"),
    (["--batch-size", "0"], "at least 1"),
    (["--batch-size", "-1"], "at least 1"),
])
def test_bad_option_values_are_usage_errors(capsys, args, message):
    with pytest.raises(SystemExit) as exit_info:
        main(["transcribe", str(QUILTER), *args])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and message in err
    # the line that matters alone, not after the whole usage
    assert err.count("\n") == 1 and "see whisper-spec transcribe --help" in err, err


@pytest.mark.parametrize("command", ["transcribe", "batch", "bench"])
def test_every_command_takes_version(capsys, command):
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--version"])
    assert exit_info.value.code == 0 and capsys.readouterr().out.startswith("whisper-spec ")


@pytest.mark.slow
def test_a_clip_of_ten_milliseconds_gives_no_text(capsys, tmp_path):
    audio, rate = soundfile.read(QUILTER, dtype="float32")
    clip = tmp_path / "ten_ms.wav"
    soundfile.write(clip, audio[rate : rate + rate // 100], rate)
    code, out, err = run(capsys, "transcribe", clip, "-f", "json", "-q")
    assert code == 0 and json.loads(out)["text"] == "", out


@pytest.mark.slow
def test_batch_errors_and_notes_carry_the_tool_name(capsys, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "broken.flac").write_bytes(b"not audio at all")
    shutil.copy(QUILTER, folder / "good.flac")
    code, _, err = run(capsys, "batch", folder, "-o", tmp_path / "out", "-m", "tiny.en", "--max-words-per-line", "3")
    assert code == 1
    assert any(line.startswith("whisper-spec: error: ") and "broken.flac" in line for line in err.splitlines()), err
    assert "whisper-spec: --max-words-per-line shapes srt and vtt cues; the txt output has none" in err


@pytest.mark.parametrize("args, message", [
    (["--draft-tokens", "-2"], "--draft-tokens must be >= 0"),
    (["--vad-threshold", "2"], "VAD threshold must be in (0, 1)"),
    (["--chunk-length", "40"], "--chunk-length must be in"),
    (["-m", "large-v9"], "large-v9: not an embedded model"),
    pytest.param(["--assistant", "my-assistant/"], "my-assistant/: no such directory", marks=pytest.mark.slow),  # found once the model is loaded
    (["-m", "./mymodels/whisper-small"], "./mymodels/whisper-small: no such directory"),
    pytest.param(["--language", "Klingon"], "--language: unknown language 'Klingon'", marks=pytest.mark.slow),  # found once the model is loaded
    pytest.param(["--language", "en,Klingon"], "--language: unknown language 'Klingon'", marks=pytest.mark.slow),  # found once the model is loaded
    (["--device", "cuda:1"] if not torch.cuda.is_available() else ["--device", f"cuda:{torch.cuda.device_count()}"],
     "device cuda:"),
    (["https://example.com/talk.mp3"], "https://example.com/talk.mp3: a URL; whisper-spec reads local files"),
])
def test_errors_are_one_line_and_name_the_flag_or_the_path(capsys, args, message):
    code, out, err = run(capsys, "transcribe", QUILTER, *args)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err, err  # no note before it ("no distilled assistant ...")


def test_a_peer_bench_does_not_know_is_named_before_any_work(capsys):
    code, out, err = run(capsys, "bench", "clips.jsonl", "--peers", "faster-whisper,whispercpp")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "--peers: no peer named 'whispercpp' (choose from transformers, faster-whisper, whisper.cpp, or none)" in err


@pytest.mark.slow
def test_language_names_are_taken_like_codes(capsys):
    german = speech("multilingual/de/thorsten_1386ecbb98a8f46dd0b0eb75d68ee0d0.flac")
    by_name = run(capsys, "transcribe", german, "-l", "German", "-f", "json", "-q")
    by_code = run(capsys, "transcribe", german, "-l", "de", "-f", "json", "-q")
    assert by_name[0] == 0 and json.loads(by_name[1])["language"] == "de"
    assert json.loads(by_name[1])["text"] == json.loads(by_code[1])["text"]


@pytest.mark.slow
def test_a_language_list_is_what_detection_picks_from(capsys):
    """Two short English clips that base hears as a language outside the list (Latin and Russian on an
    AMD EPYC, benchmarks/results/language_detection_epyc_cpu.json; Latin and Arabic on a Xeon with
    AMX): detection picks one of the languages a job names, and the text is what that language given
    outright gives. Which of them it picks for the second, barely audible clip depends on the CPU's
    kernels (English on the EPYC, Portuguese on the AMX Xeon); the first is English on both."""
    clips = [speech("librispeech/test-other/2033-164914-0001.flac"), speech("librispeech/test-other/2414-128291-0008.flac")]
    for i, clip in enumerate(clips):
        code, among, _ = run(capsys, "transcribe", clip, "-l", "de,English,es,fr,pt", "-f", "json", "-q")
        among = json.loads(among)
        assert code == 0 and among["language"] in {"de", "en", "es", "fr", "pt"}
        assert 0.2 < among["language_probability"] <= 1.0  # the likeliest of five
        assert among["language"] == "en" or i == 1
        _, given, _ = run(capsys, "transcribe", clip, "-l", among["language"], "-f", "json", "-q")
        assert among["text"] == json.loads(given)["text"]
        assert "language_probability" not in json.loads(given)  # given, not detected


def test_detection_among_candidates_picks_the_likeliest_of_them():
    from conftest import RANDOM_SPECIAL, random_model

    from whisper_spec.decode.encoding import detect_language
    from whisper_spec.options import DecodingOptions

    model = random_model(0)
    logits = torch.randn(64, model.dims.n_vocab, generator=torch.Generator().manual_seed(0))
    ids = RANDOM_SPECIAL.lang_to_id
    for candidates in (None, ("de", "fr"), ("German", "nl"), ("en",)):
        codes = list(ids) if candidates is None else [RANDOM_SPECIAL.language_code(c) for c in candidates]
        among = logits[:, [ids[c] for c in codes]].softmax(dim=-1)
        found, probabilities = detect_language(model, logits, candidates)
        assert found == [codes[int(row.argmax())] for row in among]
        assert probabilities == pytest.approx(among.max(dim=-1).values.tolist())  # among the candidates
    assert set(detect_language(model, logits)[0]) == set(ids)  # the lists above do restrict it
    with pytest.raises(ValueError, match="language_candidates"):
        DecodingOptions(language_candidates="de")


@pytest.mark.slow
def test_progress_counts_each_second_of_audio_once(base_pair):
    from whisper_spec.longform.pipeline import transcribe
    from whisper_spec.options import ChunkingOptions, DecodingOptions

    long_file = QUILTER
    audio, rate = soundfile.read(long_file, dtype="float32")
    # a 5.9 s clip in windows of at most 3 s: speech chunks, or windows one after another
    for vad in (True, False):
        seconds = []
        result = next(transcribe(base_pair, [long_file], DecodingOptions(language="en"),
                                 chunking=ChunkingOptions(chunk_length=3, vad=vad), on_window=seconds.append))
        assert len(seconds) >= 2
        assert sum(seconds) == pytest.approx(len(audio) / rate, abs=1e-3) == pytest.approx(result.duration, abs=1e-3)


@pytest.mark.slow
def test_without_a_terminal_progress_is_a_line_per_file(tmp_path):
    files = [str(QUILTER), str(CLIPS[0]), str(tmp_path / "missing.wav")]
    run = subprocess.run([sys.executable, "-m", "whisper_spec.cli.main", "transcribe", *files, "-m", "tiny.en"],
                         capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 1
    lines = run.stderr.splitlines()
    assert f"whisper-spec: [1/3] {QUILTER}: done" in lines and f"whisper-spec: [2/3] {CLIPS[0]}: done" in lines
    assert any("missing.wav: no such file" in line for line in lines)
    assert "\r" not in run.stderr  # no bar


@pytest.mark.slow
def test_in_a_log_a_long_file_reports_progress_before_it_ends(capsys, monkeypatch):
    from whisper_spec.jobs import inputs as jobs

    monkeypatch.setattr(jobs, "LOG_EVERY_SECONDS", 0.0)
    long_file = speech("longform/librispeech-test-other_1688-142285_0000-0009.flac")
    code, _, err = run(capsys, "transcribe", long_file, "-m", "tiny.en")
    lines = err.splitlines()
    done = [i for i, line in enumerate(lines) if line.endswith(": done")]
    moving = [i for i, line in enumerate(lines) if line.endswith("s of audio transcribed")]
    assert code == 0 and len(done) == 1 and len(moving) >= 2 and moving[0] < done[0], err


def test_a_header_that_undercounts_never_takes_the_bar_past_its_total(tmp_path):
    from whisper_spec.jobs.inputs import AudioProgress

    unknown = tmp_path / "unknown.bin"
    unknown.write_bytes(b"\0" * 100)  # no header either decoder reads: 0 s
    progress = AudioProgress([QUILTER, unknown], enabled=True)
    total = progress.bar.total
    progress.advance(total + 5.0)
    assert progress.bar.total >= total + 5.0
    progress.close()


def test_the_bar_says_what_it_waits_for_and_never_passes_its_total(monkeypatch, capsys):
    """On a terminal: a word while the first windows decode, then many small steps whose rounded sum
    would pass the header's total end at 100% without tqdm's clamping warning; in a log the first line
    says what the job holds."""
    import sys
    import warnings

    from whisper_spec.jobs.inputs import AudioProgress

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    progress = AudioProgress([QUILTER], enabled=True)
    assert "finding speech" in capsys.readouterr().err
    total = progress.bar.total
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # TqdmWarning: clamping frac to range [0, 1]
        for _ in range(3000):
            progress.advance(total / 3000 + 0.0004)
        progress.bar.refresh()
    assert progress.bar.n == progress.bar.total >= total and "-00:00" not in capsys.readouterr().err
    progress.close()
    capsys.readouterr()
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    AudioProgress([QUILTER, CLIPS[0]], enabled=True).close()
    assert re.match(r"whisper-spec: 2 files, \d+ s of audio to transcribe\n", capsys.readouterr().err)


@pytest.mark.slow
def test_json_times_are_rounded_and_stdout_blocks_are_labelled(capsys):
    code, out, err = run(capsys, "transcribe", QUILTER, CLIPS[0], "-m", "tiny.en", "-f", "json", "-f", "srt", "-q")
    assert code == 0, err
    headers = re.findall(r"^==> (.+) \((\w+)\) <==$", out, flags=re.M)
    assert headers == [(str(QUILTER), "json"), (str(QUILTER), "srt"), (str(CLIPS[0]), "json"), (str(CLIPS[0]), "srt")]
    first = json.loads(out.split("==>")[1].split("<==", 1)[1])
    times = [first["duration"], first["stats"]["encoder_seconds"]] + [t for s in first["segments"] for t in (s["start"], s["end"])]
    assert all(round(t, 3) == t and len(repr(t)) < 12 for t in times), times


@pytest.mark.slow
def test_digital_silence_gives_no_text(capsys, tmp_path):
    silence = tmp_path / "silence.wav"
    soundfile.write(silence, np.zeros(16000 * 5, dtype=np.float32), 16000)
    for model in ("tiny.en", "base"):
        code, out, err = run(capsys, "transcribe", silence, "-m", model, "-f", "json", "-q")
        assert code == 0, err
        result = json.loads(out)
        assert result["text"] == "" and result["segments"] == [] and result["duration"] == 5.0
        assert result["language"] in (None, "en")  # none claimed where nobody speaks; English-only: English
    # speech with digital silence around it is decoded as before
    audio, rate = soundfile.read(QUILTER, dtype="float32")
    padded = tmp_path / "padded.wav"
    soundfile.write(padded, np.concatenate([np.zeros(rate * 40, np.float32), audio]), rate)
    code, out, err = run(capsys, "transcribe", padded, "-m", "tiny.en", "-q")
    assert code == 0 and "Quilter" in out


@pytest.mark.slow
def test_noise_and_room_tone_give_no_text_and_speech_is_kept(tmp_path):
    """Whisper's no-speech rule: made-up sounds in one batch with speech, both decoding modes."""
    from whisper_spec.longform.pipeline import transcribe
    from whisper_spec.options import DecodingOptions

    rng = np.random.default_rng(0)
    seconds = 16000 * 6
    sounds = {
        "white_noise": 0.03 * rng.standard_normal(seconds),  # -30 dBFS
        "room_tone": np.cumsum(rng.standard_normal(seconds)) * 5e-4,  # brown noise, a low rumble
        "hum": 0.01 * np.sin(2 * np.pi * 50 * np.arange(seconds) / 16000) + 1e-3 * rng.standard_normal(seconds),
    }
    paths = []
    for name, sound in sounds.items():
        paths.append(tmp_path / f"{name}.wav")
        soundfile.write(paths[-1], (sound - sound.mean()).astype(np.float32), 16000)
    paths.append(QUILTER)
    pair = load.load_pair("base")
    results = {use: list(transcribe(pair, paths, DecodingOptions(speculation="auto" if use else "off"), batch_size=4))
               for use in (False, True)}
    for alone, speculative in zip(results[False], results[True]):
        assert alone.text == speculative.text
    assert [r.text for r in results[True][:3]] == ["", "", ""]
    # no language claimed for noise (detection on it said "nn" and the like); given, it stays
    assert [r.language for r in results[True]] == [None, None, None, "en"]
    assert next(transcribe(pair, paths[:1], DecodingOptions(language="de"))).language == "de"
    assert results[True][3].text.startswith("Mr. Quilter is the apostle")
    # each of two rules silences them alone: without both (--no-vad: no speech detector after decoding)
    # Whisper writes words for the noise; the detector hears the doubted text of a short file as no speech
    from whisper_spec.options import ChunkingOptions

    unruled = DecodingOptions(no_speech_threshold=None)
    assert next(transcribe(pair, paths[:1], unruled, chunking=ChunkingOptions(vad=False))).text
    assert next(transcribe(pair, paths[:1], DecodingOptions(), chunking=ChunkingOptions(vad=False))).text == ""
    assert next(transcribe(pair, paths[:1], unruled)).text == ""


@pytest.mark.slow
def test_written_model_files_are_readable_by_others(capsys, tmp_path):
    code, _, err = run(capsys, "quantize", "tiny.en", "-o", tmp_path / "q")
    assert code == 0, err
    modes = {p.name: oct(p.stat().st_mode & 0o777) for p in (tmp_path / "q").iterdir()}
    assert set(modes.values()) == {oct(0o666 & ~_umask())}, modes


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.slow
@pytest.mark.parametrize("when", ["at start-up", "mid-job"])
def test_ctrl_c_ends_with_one_line(tmp_path, when):
    files = [str(c) for c in CLIPS * 3]
    process = subprocess.Popen([sys.executable, "-c", "from whisper_spec.cli import run; run()", "batch",
                                str(CLIPS[0].parent), "-o", str(tmp_path / "out"), "-m", "tiny.en", "-q"]
                               if when == "mid-job" else
                               [sys.executable, "-c", "from whisper_spec.cli import run; run()", "transcribe",
                                *files, "-m", "tiny.en"],
                               stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                               # as a terminal's Ctrl-C finds it: a child inherits an ignored SIGINT, and in
                               # one suite run the worker this ran on had it so (it then ran to its end)
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    if when == "mid-job":
        deadline = time.monotonic() + 120
        while not list((tmp_path / "out").glob("*.txt")) and time.monotonic() < deadline:
            time.sleep(0.2)
    else:
        time.sleep(0.3)
    process.send_signal(signal.SIGINT)
    err = process.communicate(timeout=60)[1]
    assert process.returncode == 130 and "Traceback" not in err, err
    assert err.strip().count("\n") == 0 and "interrupted" in err
    if when == "mid-job":
        assert "run the same command again to resume" in err


@pytest.mark.slow
def test_readme_python_example_runs_as_written():
    readme = (ROOT / "README.md").read_text()
    example = re.search(r"## From Python\n\n```python\n(.*?)```", readme, flags=re.S).group(1)
    run = subprocess.run([sys.executable, "-c", example], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    assert "Quilter" in run.stdout and "missing.wav: no such file" in run.stdout


def test_readme_says_how_to_get_the_cpu_wheel_on_a_plain_machine():
    readme = (ROOT / "README.md").read_text()
    assert "--index-url https://download.pytorch.org/whl/cpu" in readme
    assert readme.count("```bash\npip install") == 2  # still exactly two set-up commands


@pytest.mark.slow
def test_unusable_audio_is_one_line_each_and_the_rest_finishes(capsys, tmp_path):
    truncated = tmp_path / "truncated.flac"
    truncated.write_bytes(QUILTER.read_bytes()[:2000])
    text = tmp_path / "notes.wav"
    text.write_text("not audio at all\n" * 50)
    code, out, err = run(capsys, "transcribe", truncated, text, QUILTER, "-m", "tiny.en", "-q")
    assert code == 1 and "Traceback" not in err and "Quilter" in out
    lines = err.strip().splitlines()
    assert len(lines) == 2 and [str(p) in line for p, line in zip((truncated, text), lines)] == [True] * 2
    # a folder among the files (even one named like audio) is the wrong command: refused before any work
    folder = tmp_path / "folder.wav"
    folder.mkdir()
    code, out, err = run(capsys, "transcribe", truncated, folder, QUILTER, "-m", "tiny.en", "-q")
    assert code == 2 and out == "" and err.count("\n") == 1 and f"{folder}: is a folder" in err


def test_progress_bar_reaches_its_total_when_a_file_fails_and_writes_above_itself(monkeypatch):
    import io

    from whisper_spec.jobs.inputs import AudioProgress, audio_seconds

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    paths = [QUILTER, CLIPS[0], CLIPS[1]]
    progress = AudioProgress(paths, enabled=True)
    assert not progress.bar.disable
    for _ in range(100):  # many small windows: no per-update rounding may lose seconds
        progress.advance(audio_seconds(QUILTER) / 100)
    progress.file_done(str(QUILTER))
    progress.write("whisper-spec: wrote out/a.txt")
    progress.advance(audio_seconds(CLIPS[0]))
    progress.file_done(str(CLIPS[0]))
    progress.file_done(str(CLIPS[1]), failed=True)  # its seconds leave the total
    assert progress.bar.n == pytest.approx(progress.bar.total, abs=0.05)
    progress.close()
    assert "\nwhisper-spec: wrote out/a.txt\n" in terminal.getvalue().replace("\r", "\n")
    assert "100%" in terminal.getvalue()


@pytest.fixture
def read_only_folder(tmp_path):
    """A read-only tmpfs mounted here where this process may mount one, else a folder no process may
    create (under /sys): either way the file system refuses the cache."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)],
                             capture_output=True).returncode == 0
    yield folder / "cache" if mounted else Path("/sys/whisper-spec-cache")
    if mounted:
        subprocess.run(["umount", str(folder)], check=True)


def test_an_unwritable_model_cache_is_one_line(capsys, monkeypatch, read_only_folder):
    monkeypatch.setenv("WHISPER_SPEC_CACHE", str(read_only_folder))
    for args in (["transcribe", QUILTER, "-m", "tiny.en"], ["models", "--prepare"]):
        code, _, err = run(capsys, *args)
        assert code != 0 and err.count("\n") == 1, err
        assert f"{read_only_folder}" in err and "cannot write the model cache" in err and "WHISPER_SPEC_CACHE" in err


@pytest.mark.slow
def test_a_broken_model_folder_is_one_line_for_model_and_assistant(capsys, tmp_path):
    tiny = load.resolve_model("tiny.en")
    truncated, other_type = tmp_path / "truncated", tmp_path / "other-type"
    for folder in (truncated, other_type):
        shutil.copytree(tiny, folder)
    weights = truncated / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: 1 << 20])
    config = json.loads((other_type / "config.json").read_text())
    (other_type / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": config["d_model"]}))
    for folder, problem in ((truncated, "cannot read the model"), (other_type, "cannot read the model")):
        for flag in ("--model", "--assistant"):
            code, _, err = run(capsys, "transcribe", QUILTER, flag, folder, *(["-m", "tiny.en"] if flag == "--assistant" else []))
            assert code != 0 and err.count("\n") == 1 and "Traceback" not in err, err
            assert f"{folder}" in err and problem in err


@pytest.mark.slow
def test_a_reader_that_leaves_early_ends_the_job_quietly(tmp_path):
    """`whisper-spec transcribe ... -f srt | head -2`, a real pipe closed after two lines."""
    for _ in range(3):
        result = subprocess.run(f"'{sys.executable}' -c 'from whisper_spec.cli import run; run()' transcribe "
                                f"'{CLIPS[0]}' '{CLIPS[1]}' '{QUILTER}' -m tiny.en -f srt | head -2",
                                shell=True, capture_output=True, text=True, timeout=300)
        assert result.stdout.splitlines() == ["==> " + str(CLIPS[0]) + " (srt) <==", "1"] or \
            len(result.stdout.splitlines()) == 2
        assert "Traceback" not in result.stderr and "Error" not in result.stderr, result.stderr


@pytest.mark.slow
def test_piped_audio_is_read_as_dash_and_named_stdin(tmp_path):
    """`... | whisper-spec transcribe -`: a container that must seek (m4a) as well as flac, beside a file."""
    import av

    clip = tmp_path / "clip.m4a"
    samples, rate = soundfile.read(QUILTER, dtype="int16")
    with av.open(str(clip), "w") as container:
        stream = container.add_stream("aac", rate=rate)
        frame = av.AudioFrame.from_ndarray(samples[None, :], format="s16", layout="mono")
        frame.sample_rate = rate
        for packet in [*stream.encode(frame), *stream.encode()]:
            container.mux(packet)
    command = [sys.executable, "-m", "whisper_spec.cli.main", "transcribe", "-", str(CLIPS[0]), "-m", "tiny.en"]
    with open(clip, "rb") as piped:
        printed = subprocess.run(command, stdin=piped, capture_output=True, text=True, cwd=ROOT)
    assert printed.returncode == 0, printed.stderr
    assert re.search(r"^-: Mr\. Quilter is the apostle", printed.stdout, flags=re.M), printed.stdout
    assert "whisper-spec: [1/2] -: done" in printed.stderr.splitlines()
    with open(QUILTER, "rb") as piped:
        written = subprocess.run([*command[:5], "-m", "tiny.en", "-o", str(tmp_path / "out"), "-q"], stdin=piped,
                                 capture_output=True, text=True, cwd=ROOT)
    assert written.returncode == 0, written.stderr
    assert "Quilter" in (tmp_path / "out" / "stdin.txt").read_text()


class _Stdin:
    def __init__(self, data: bytes, tty: bool = False):
        self.buffer, self.tty = io.BytesIO(data), tty

    def isatty(self):
        return self.tty


@pytest.mark.parametrize("stdin, message", [
    (_Stdin(b""), "-: empty input"),
    (_Stdin(b"", tty=True), "-: standard input is a terminal; pipe audio into it"),
    (_Stdin(b"not audio at all"), "-: cannot decode audio (Error opening '-': Format not recognised.)"),
])
def test_piped_input_that_cannot_be_used_is_one_line_naming_dash(monkeypatch, stdin, message):
    from whisper_spec.jobs.inputs import audio_seconds, jobs_of_files
    from whisper_spec.speech.audio import AudioError, load_audio

    monkeypatch.setattr(sys, "stdin", stdin)
    assert audio_seconds(Path("-")) == 0.0 and stdin.buffer.tell() == 0  # a header read would use it up
    with pytest.raises(AudioError) as error:
        load_audio("-")
    assert str(error.value) == message or str(error.value).startswith(message)
    assert [(str(j.path), j.name) for j in jobs_of_files(["-", str(QUILTER)])] == [("-", "stdin"), (str(QUILTER), QUILTER.stem)]
    with pytest.raises(ValueError, match="^-: piped audio is read by whisper-spec transcribe, not by a batch job"):
        collect_jobs(["-"])
