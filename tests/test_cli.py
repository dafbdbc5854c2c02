"""`whisper-spec transcribe` end to end on real files, including bad input."""

import json
import re

import jiwer
import librosa
import numpy as np
import pytest
import soundfile
from conftest import speech
from whisper_spec.cli.main import main

from whisper_spec.speech.audio import SAMPLE_RATE, _resample

QUILTER = speech("librispeech/dev-clean/1272-128104-0000.flac")


def run(capsys, *args):
    code = main(["transcribe", "--quiet", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.slow
def test_bad_files_fail_alone_and_good_ones_finish(capsys, tmp_path):
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    corrupt = tmp_path / "corrupt.flac"
    corrupt.write_bytes(np.random.default_rng(0).bytes(5000))
    not_mp3 = tmp_path / "notes.mp3"
    not_mp3.write_bytes(b"meeting notes, not audio\n" * 10)
    missing = tmp_path / "missing.wav"
    code, out, err = run(capsys, missing, empty, QUILTER, corrupt, not_mp3, "--model", "tiny.en",
                         "--output-dir", tmp_path / "out")
    assert code == 1
    lines = [line for line in err.strip().splitlines() if line.startswith("whisper-spec: error: ")]
    assert f"{missing}: no such file" in lines[0]
    assert f"{empty}: empty file" in lines[1]
    assert str(corrupt) in lines[2] and "cannot decode audio" in lines[2]
    # a file that is there is never said not to exist (libsndfile's words for an mp3 it gives up on)
    assert str(not_mp3) in lines[3] and "cannot decode audio" in lines[3] and "not exist" not in lines[3]
    assert "Quilter" in (tmp_path / "out" / f"{QUILTER.stem}.txt").read_text()


@pytest.mark.slow
def test_a_damaged_mp3_is_one_line_even_from_the_native_decoder(capfd, tmp_path):
    """libsndfile's mp3 decoder writes its own notes on the process's stderr ("Note: Illegal
    Audio-MPEG-Header ..."); the error stays one line."""
    damaged = tmp_path / "damaged.mp3"
    damaged.write_bytes(b"ID3" + bytes(7) + np.random.default_rng(1).bytes(3000))
    code = main(["transcribe", "--quiet", "--model", "tiny.en", str(damaged)])
    err = capfd.readouterr().err
    assert code == 1 and err.count("\n") == 1 and f"{damaged}: cannot decode audio" in err, err


@pytest.mark.slow
def test_verbose_prints_each_segment_as_the_transcript_has_it(capsys):
    """--verbose: a line a segment on stderr, '[start --> end] text', making up the printed transcript."""
    talk = speech("longform/bill_gates-TED-next-epidemic-excerpt.flac")
    code = main(["transcribe", str(talk), "--model", "tiny.en", "--verbose"])
    out = capsys.readouterr()
    assert code == 0
    lines = [line for line in out.err.splitlines() if line.startswith("[")]
    assert len(lines) >= 5
    times = [re.match(r"\[(\d\d):(\d\d):(\d\d\.\d{3}) --> (\d\d):(\d\d):(\d\d\.\d{3})\] \S", line) for line in lines]
    assert all(times), lines
    seconds = [(3600 * int(m[1]) + 60 * int(m[2]) + float(m[3]), 3600 * int(m[4]) + 60 * int(m[5]) + float(m[6]))
               for m in times]
    assert all(a <= b <= c for (a, b), (c, _) in zip(seconds, seconds[1:])) and seconds[-1][1] > 50
    assert " ".join(line.split("] ", 1)[1] for line in lines) == out.out.strip()
    with pytest.raises(SystemExit) as exit_info:
        main(["transcribe", str(talk), "--quiet", "--verbose"])
    assert exit_info.value.code == 2 and "not allowed with" in capsys.readouterr().err


@pytest.mark.slow
def test_8khz_stereo_mp3_and_ogg_are_resampled_and_downmixed(capsys, tmp_path):
    audio, rate = soundfile.read(QUILTER, dtype="float32")
    low = librosa.resample(audio, orig_sr=rate, target_sr=8000)
    stereo = tmp_path / "stereo8k.wav"
    soundfile.write(stereo, np.stack([low, 0.5 * low], axis=1), 8000)
    mp3 = tmp_path / "clip.mp3"
    soundfile.write(mp3, audio, rate, format="MP3")
    ogg = tmp_path / "clip44k.ogg"
    soundfile.write(ogg, librosa.resample(audio, orig_sr=rate, target_sr=44100), 44100, format="OGG")
    reference = "Mr. Quilter is the apostle of the middle classes, and we are glad to welcome his gospel."
    code, out, err = run(capsys, stereo, mp3, ogg, "--model", "tiny.en", "--format", "json", "--output-dir", tmp_path)
    assert code == 0, err
    for path in (stereo, mp3, ogg):
        result = json.loads((tmp_path / f"{path.stem}.json").read_text())
        assert jiwer.wer(reference.lower(), result["text"].lower()) < 0.2, result["text"]


@pytest.mark.parametrize("rate", [8000, 22050, 44100, 48000])
def test_resampling_gives_librosas_samples_without_importing_it(rate):
    audio = np.random.default_rng(rate).standard_normal(rate * 2 + 7).astype(np.float32)
    ours = _resample(audio, rate)
    assert ours.dtype == np.float32
    np.testing.assert_array_equal(ours, librosa.resample(audio, orig_sr=rate, target_sr=SAMPLE_RATE))


@pytest.mark.slow
def test_incompatible_assistant_is_a_clear_error(capsys):
    code, out, err = run(capsys, QUILTER, "--model", "base", "--assistant", "tiny.en")
    assert code == 2
    assert "cannot draft for base" in err and "vocabulary sizes differ" in err


@pytest.mark.slow
def test_json_srt_vtt_tsv_outputs(capsys, tmp_path):
    code, out, err = run(capsys, QUILTER, "--model", "base", "--assistant", "base", "--language", "en",
                         "-f", "json", "-f", "srt", "-f", "vtt", "-f", "tsv", "-o", tmp_path, "--draft-tokens", "3",
                         "--max-line-width", "30", "--max-line-count", "2")
    assert code == 0, err
    result = json.loads((tmp_path / f"{QUILTER.stem}.json").read_text())
    assert set(result) >= {"text", "language", "segments", "stats"}
    assert result["language"] == "en" and "Quilter" in result["text"]
    assert result["segments"] and all(s["start"] < s["end"] <= result["duration"] + 1e-6 for s in result["segments"])
    stats = result["stats"]
    assert stats["drafted_tokens"] > 0 and stats["acceptance"] == 1.0
    assert stats["encoder_seconds"] > 0 and stats["decoding_seconds"] > 0 and stats["main_forwards"] > 0
    assert all(s["words"] for s in result["segments"])  # cutting cues takes word times
    for segment in result["segments"]:  # its window's decoding, as openai-whisper reports it: clear speech, first pass
        assert segment["temperature"] == 0.0 and -1.0 < segment["avg_logprob"] < 0.0
        assert 0.5 < segment["compression_ratio"] < 2.4 and 0.0 <= segment["no_speech_prob"] < 0.6
    srt = (tmp_path / f"{QUILTER.stem}.srt").read_text()
    assert srt.startswith("1\n00:00:0") and " --> " in srt and "Quilter" in srt
    lines = [line for cue in srt.strip().split("\n\n") for line in cue.split("\n")[2:]]
    assert len(lines) > 2 and all(0 < len(line) <= 30 for line in lines)
    assert all(len(cue.split("\n")) <= 2 + 2 for cue in srt.strip().split("\n\n"))
    vtt = (tmp_path / f"{QUILTER.stem}.vtt").read_text()
    assert vtt.startswith("WEBVTT\n\n00:00:0") and "Quilter" in vtt
    tsv = (tmp_path / f"{QUILTER.stem}.tsv").read_text().splitlines()
    assert tsv[0] == "start\tend\ttext" and len(tsv) == 1 + len(result["segments"])
    assert tsv[1].split("\t")[2] == result["segments"][0]["text"]


@pytest.mark.slow
def test_unknown_language_and_help(capsys):
    code, out, err = run(capsys, QUILTER, "--model", "tiny.en", "--language", "de")
    assert code == 2 and "English-only" in err
    with pytest.raises(SystemExit) as exit_info:
        main(["transcribe", "--help"])
    assert exit_info.value.code == 0
    assert "--draft-tokens" in capsys.readouterr().out


def test_a_language_list_reaches_the_decoding_options_of_both_commands():
    from whisper_spec.cli.common import setup
    from whisper_spec.cli.parser import build_parser

    for command in (["transcribe", "x"], ["batch", "x", "-o", "out"]):
        for flag, language, candidates in (("de", "de", None), ("German", "de", None),
                                           ("en, German,fr", None, ("en", "de", "fr"))):
            options = setup(build_parser().parse_args([*command, "-l", flag]), ["txt"], load=False)[0]
            assert (options.language, options.language_candidates) == (language, candidates), flag


def test_draft_defaults_are_the_decoding_options_defaults():
    from whisper_spec.cli.parser import build_parser

    from whisper_spec.options import DecodingOptions

    for command in (["transcribe", "x.wav"], ["bench", "x.jsonl"]):
        args = build_parser().parse_args(command)
        assert (args.draft_tokens, args.draft_confidence) == (DecodingOptions.draft_tokens, DecodingOptions.draft_confidence)


def test_initial_prompt_reaches_the_decoding_options_of_both_commands():
    from whisper_spec.cli.common import setup
    from whisper_spec.cli.parser import build_parser

    for command in (["transcribe", "x"], ["batch", "x", "-o", "out"]):
        args = build_parser().parse_args([*command, "--initial-prompt", " Del Potro, 2007. "])
        assert setup(args, ["txt"], load=False)[0].prompt == "Del Potro, 2007."
        assert setup(build_parser().parse_args(command), ["txt"], load=False)[0].prompt is None


def test_timed_formats_turn_timestamps_on_and_cutting_cues_word_timestamps():
    from whisper_spec.cli.common import setup
    from whisper_spec.cli.parser import build_parser

    for formats, flags, timestamps, words in ((["txt"], [], False, False), (["tsv"], [], True, False),
                                              (["srt"], ["--max-line-width", "42"], True, False),
                                              (["vtt"], ["--max-line-count", "2"], True, True),
                                              (["srt"], ["--no-timestamps", "--max-words-per-line", "3"], False, True),
                                              (["vtt"], ["--highlight-words"], True, True)):
        options, _, layout, _, _ = setup(build_parser().parse_args(["transcribe", "x", *flags]), formats, load=False)
        assert (options.timestamps, options.word_timestamps) == (timestamps, words), (formats, flags)
        assert layout.needs_word_times == words


def test_a_temperature_above_one_is_said(capsys):
    from whisper_spec.cli.common import setup
    from whisper_spec.cli.parser import build_parser

    for flags, said in ((["--temperature", "2"], True), (["--temperature", "0,1.5"], True), ([], False),
                        (["--temperature", "1"], False), (["--temperature", "2", "-q"], False)):
        options = setup(build_parser().parse_args(["transcribe", "x", *flags]), ["txt"], load=False)[0]
        err = capsys.readouterr().err
        assert ("above 1 sampling is close to uniform" in err) == said, (flags, err)
    assert options.temperature == (2.0,)


@pytest.mark.slow
def test_encoder_precision_is_left_to_the_loader_unless_a_flag_says(tmp_path):
    """No flag: load_pair's device default (platform.default_encoder_precision); --encoder-precision: that one."""
    from whisper_spec.cli.common import pair_args
    from whisper_spec.cli.parser import build_parser

    for flags, expected in (([], None), (["--encoder-precision", "int8"], "int8"),
                            (["--encoder-precision", "float32"], "float32")):
        for command in ("transcribe", "bench"):
            args = build_parser().parse_args([command, "x", *flags])
            assert pair_args(args)["encoder_precision"] == expected
    out = tmp_path / "float"
    assert main(["transcribe", str(QUILTER), "--encoder-precision", "float32", "-f", "json", "-o", str(out),
                 "--quiet"]) == 0
    assert "Quilter" in json.loads((out / f"{QUILTER.stem}.json").read_text())["text"]


def test_int8_decoders_are_the_cpu_default_unless_a_flag_says():
    """No flag: int8 decoders on CPU wherever a fast int8 kernel runs, with the activation dtype
    that kernel takes (platform.cpu_int8_dtype: bfloat16 where aten's fused kernel runs); --no-int8:
    float32 decoders; bench: int8 configurations beside the float ones by the same rule."""
    import torch
    from whisper_spec.cli.common import pair_args
    from whisper_spec.cli.parser import build_parser

    from whisper_spec.models.platform import cpu_int8_dtype, default_int8

    default = default_int8(torch.device("cpu"))
    int8_dtype = cpu_int8_dtype() or "bfloat16"
    for flags, int8, dtype in (([], default, int8_dtype if default else "float32"), (["--int8"], True, int8_dtype),
                               (["--no-int8"], False, "float32"), (["--int8", "--dtype", "float32"], True, "float32")):
        args = build_parser().parse_args(["transcribe", "x", "--device", "cpu", *flags])
        assert (pair_args(args)["int8"], pair_args(args)["dtype"]) == (int8, dtype)


def test_models_lists_embedded_defaults(capsys):
    assert main(["models", "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["base"]["installed"] and rows["tiny.en"]["installed"]


def test_version_and_help_start_without_torch(capsys):
    """--help and --version import no torch (the option defaults live in a torch-free module)."""
    import subprocess
    import sys

    from whisper_spec import __version__

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0 and capsys.readouterr().out.strip() == f"whisper-spec {__version__}"
    check = "import sys, whisper_spec.cli.main as cli; cli.build_parser(); print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True).stdout == "False\n"


@pytest.mark.slow
def test_a_transcription_starts_without_the_compiler_scipy_or_librosa(tmp_path):
    """Start-up: transcribing a 16 kHz file imports neither torch's compiler (once pulled in by
    building decoders on the meta device) nor librosa and scipy.signal (once pulled in by the mel
    filterbank): together 3.5 s of every start on this project's CPU machine."""
    import subprocess
    import sys

    check = ("import sys; from whisper_spec.cli.main import main; "
             f"code = main(['transcribe', '--quiet', {str(QUILTER)!r}, '-o', {str(tmp_path)!r}]); "
             "print(code, sorted(m for m in ('torch._dynamo', 'scipy.signal', 'librosa') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True)
    assert result.stdout.strip().splitlines()[-1] == "0 []"
    assert "Quilter" in (tmp_path / f"{QUILTER.stem}.txt").read_text()


def encode_with_pyav(audio: np.ndarray, rate: int, path, codec: str, codec_rate: int | None = None) -> None:
    import av

    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=codec_rate or rate)
        stream.layout = "mono"
        frame = av.AudioFrame.from_ndarray((audio[None] * 32767).astype(np.int16), format="s16", layout="mono")
        frame.sample_rate = rate
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            container.mux(packet)


@pytest.mark.slow
def test_phone_and_browser_recordings_are_read_and_batch_names_what_it_passes_over(capsys, tmp_path):
    """m4a and mp4 (AAC), webm (Opus) and aiff, made with PyAV's encoders: transcribe reads them, and
    batch on their folder does every one and says which files it left out."""
    from whisper_spec.cli.main import main as cli

    audio, rate = soundfile.read(QUILTER, dtype="float32")
    folder = tmp_path / "recordings"
    folder.mkdir()
    for name, codec, codec_rate in (("a.m4a", "aac", None), ("b.mp4", "aac", None), ("c.webm", "libopus", 48000),
                                    ("d.aiff", "pcm_s16be", None)):
        encode_with_pyav(audio, rate, folder / name, codec, codec_rate)
    (folder / "notes.txt").write_text("not audio")
    code, out, err = run(capsys, folder / "a.m4a", folder / "c.webm", "--model", "tiny.en")
    assert code == 0 and out.count("Quilter") == 2, err
    assert cli(["batch", str(folder), "-o", str(tmp_path / "out"), "--model", "tiny.en"]) == 0
    err = capsys.readouterr().err
    assert "4 done, 0 failed" in err and "passed over 1 file not in an audio format" in err and "notes.txt" in err
    assert all("Quilter" in (tmp_path / "out" / f"{stem}.txt").read_text() for stem in "abcd")
    assert cli(["batch", str(folder / "*.m4a"), "-o", str(tmp_path / "glob"), "--model", "tiny.en", "--quiet"]) == 0
    assert (tmp_path / "glob" / "a.txt").is_file()


def test_every_option_of_every_command_says_what_it_does():
    """No flag or argument without a help line (--task, bench --quiet, export --output and --dtype,
    quantize MODEL, distill --warmup-steps and --seed had none)."""
    import argparse

    from whisper_spec.cli.parser import build_parser

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    silent = [f"{name} {action.option_strings[0] if action.option_strings else action.dest}"
              for name, command in commands.items() for action in command._actions
              if not action.help and not isinstance(action, (argparse._HelpAction, argparse._VersionAction))]
    assert silent == []


def test_a_folder_given_to_transcribe_is_a_usage_problem_named_before_any_model_loads(capsys, tmp_path, monkeypatch):
    """Exit 2 with one line pointing to `batch` (it was each file's failure, exit 1, after loading)."""
    import whisper_spec.models.load as load

    monkeypatch.setattr(load, "load_pair", lambda *a, **k: pytest.fail("a model was loaded"))
    assert main(["transcribe", str(tmp_path), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"whisper-spec: error: {tmp_path}: is a folder, not an audio file (whisper-spec batch transcribes folders)"


@pytest.mark.slow
def test_more_threads_than_cores_is_said():
    """In a process of its own: the flag sets the process's torch threads (and what is probed with them)."""
    import os
    import subprocess
    import sys

    cores = len(os.sched_getaffinity(0))
    done = subprocess.run([sys.executable, "-c", "from whisper_spec.cli import run; run()", "transcribe", str(QUILTER),
                           "--model", "tiny.en", "--threads", str(cores + 62)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and f"--threads {cores + 62}: this process may use {cores} cores" in done.stderr


def test_an_argument_a_command_does_not_take_points_to_that_commands_help(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["batch", "x", "-o", "y", "--bogus"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == ("whisper-spec batch: error: unrecognized arguments: --bogus "
                                       "(see whisper-spec batch --help)\n")


@pytest.mark.slow
def test_batch_verbose_shows_each_segment_after_its_file(tmp_path, capsys):
    clip = speech("librispeech/test-clean/1089-134686-0000.flac")
    code = main(["batch", str(QUILTER), str(clip), "-o", str(tmp_path), "-m", "tiny.en", "-v"])
    err = capsys.readouterr().err
    assert code == 0, err
    for path in (QUILTER, clip):
        assert re.search(rf"^{re.escape(str(path))}: \[00:00:00\.000 --> 00:00:\d\d\.\d\d\d\] \S", err, flags=re.M), err
