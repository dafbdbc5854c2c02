"""Benchmark harness: WER against jiwer, the exactness check, the documented report fields."""

import json
import os
import re
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import jiwer
import numpy as np
import pytest
import torch
from conftest import SPEECH, manifest, perturbed_decoder, random_model, speech
from whisper_spec.cli.main import main as cli

import whisper_spec.bench.harness as harness
from whisper_spec.bench.data import Utterance, batches, load_utterances
from whisper_spec.bench.harness import run_bench
from whisper_spec.bench.metrics import normalize, word_error_rate
from whisper_spec.bench.peers import FasterWhisperPeer, load_peers
from whisper_spec.bench.report import markdown_table, write_outputs
from whisper_spec.decode.fixed_shapes import CompileError
from whisper_spec.decode.stats import DecodingStats
from whisper_spec.models.load import load_pair
from whisper_spec.models.pair import WhisperPair
from whisper_spec.models.sources import ct2_source, default_assistant
from whisper_spec.options import BenchOptions
from whisper_spec.speech.audio import load_audio

BENCHMARKS_DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
MANIFEST = str(SPEECH / "manifest.jsonl")


def test_wer_uses_whispers_normalizers_and_matches_jiwer():
    references = ["Mr. Smith paid ten dollars.", "The colour of it", None, "Hallo, Welt! Wie geht's?", "[inaudible]"]
    hypotheses = ["mister smith paid $10", "the color of that", "anything", "hallo welt wie gehts", "um"]
    languages = ["en", "en", "en", "de", "en"]
    # English: spelled-out numbers, titles and British spellings normalize away; one substitution is left
    assert normalize("Mr. Smith paid ten dollars.", "en") == normalize("mister smith paid $10", "en")
    wer = word_error_rate(references, hypotheses, languages)
    kept = [0, 1, 3]  # no reference, and a reference that normalizes to nothing, are left out
    expected = jiwer.wer([normalize(references[i], languages[i]) for i in kept],
                         [normalize(hypotheses[i], languages[i]) for i in kept])
    assert wer == pytest.approx(expected)
    # hand count: 0 + 1 (it -> that) + 1 (geht s -> gehts: 1 substitution, 1 deletion = 2) over 4 + 4 + 4 words
    assert normalize("Hallo, Welt! Wie geht's?", "de").split() == ["hallo", "welt", "wie", "geht", "s"]
    assert wer == pytest.approx((0 + 1 + 2) / (4 + 4 + 5))
    assert word_error_rate([None], ["x"], ["en"]) is None


@pytest.fixture(scope="module")
def pair():
    return load_pair("base", default_assistant("base"), int8=False)  # the bench's float pair


@pytest.fixture(scope="module")
def utterances():
    return load_utterances(MANIFEST, sets=["librispeech"], limit=2) + load_utterances(MANIFEST, sets=["thorsten_de"], limit=1)


@pytest.mark.slow
def test_report_has_every_documented_field_and_passes_the_check(pair, utterances, tmp_path, capfd):
    report = run_bench(pair, utterances, BenchOptions(batch_sizes=(1, 2), repeats=1),
                       progress=False)
    assert report["check"] == {"passed": True, "failures": []}
    assert "[transformers]" not in capfd.readouterr().err  # its per-call generate warnings say nothing here
    names = [c["name"] for c in report["configs"]]
    assert names == ["main b1", "speculative b1", "main b2", "speculative b2", "transformers b1", "transformers b2",
                     "transformers assisted b1", "faster-whisper b1", "faster-whisper int8 b1",
                     "faster-whisper int8 b2", "whisper.cpp b1"]
    by_name = {c["name"]: c for c in report["configs"]}
    assert by_name["speculative b1"]["wer"] == by_name["main b1"]["wer"] is not None
    assert by_name["speculative b1"]["identical_fraction"] == 1.0
    assert 0 < by_name["speculative b2"]["acceptance"] <= 1
    assert by_name["transformers assisted b1"]["wer"] is not None
    # faster-whisper's batched pipeline writes what its one-by-one transcribe writes, utterance by utterance
    assert by_name["faster-whisper int8 b2"]["wer"] == by_name["faster-whisper int8 b1"]["wer"] is not None
    assert by_name["whisper.cpp b1"]["wer"] < 0.2 and by_name["whisper.cpp b1"]["peak_memory_bytes"] > 100 * 2**20
    assert report["data"]["languages"] == ["de", "en"]
    per_language = by_name["speculative b1"]["by_language"]
    assert {language: f["utterances"] for language, f in per_language.items()} == {"de": 1, "en": 2}
    assert sum(f["decoding_seconds"] for f in per_language.values()) == pytest.approx(
        by_name["speculative b1"]["decoding_seconds"])  # one repeat: the language figures add up
    assert per_language["en"]["decoding_speedup"] > 0 and 0 < per_language["en"]["acceptance"] <= 1
    # the round's cost model: its parts add up to the round, and give the speedup measured
    assert by_name["main b1"]["round_costs"] is None
    costs = by_name["speculative b1"]["round_costs"]
    assert 0 < costs["draft_step_in_main_steps"] < 1 and costs["verify_in_main_steps"] > 0 and costs["rest_in_main_steps"] > 0
    assert costs["verify_in_main_steps"] + costs["draft_steps_per_round"] * costs["draft_step_in_main_steps"] + \
        costs["rest_in_main_steps"] == pytest.approx(costs["round_in_main_steps"], abs=0.01)
    assert costs["decoding_speedup"] == pytest.approx(
        by_name["main b1"]["decoding_seconds"] / by_name["speculative b1"]["decoding_seconds"], rel=0.01)
    assert costs["tokens_per_round"] / costs["main_only_tokens_per_step"] / costs["round_in_main_steps"] == pytest.approx(
        costs["decoding_speedup"], rel=0.01)

    section = BENCHMARKS_DOC.read_text().split("## The benchmark report")[1].split("\n## ")[0]
    documented = re.findall(r"^\| `([a-z_0-9]+)`", section, flags=re.M)
    assert len(documented) > 20
    fields = set(report) | set(report["configs"][0]) | set(report["data"]) | set(report["machine"]) | set(report["check"])
    assert set(documented) <= fields, set(documented) - fields

    paths = write_outputs(report, tmp_path)
    assert [p.name for p in paths] == ["report.json", "report.md", "time_by_config.png", "acceptance_by_position.png"]
    assert json.loads(paths[0].read_text())["configs"][0]["name"] == "main b1"
    table = paths[1].read_text()
    assert "| speculative b1 |" in table and "draft steps / round" in table


@pytest.mark.slow
def test_translation_is_scored_on_english_speech_and_timed_without_an_assistant_that_cannot_draft_it(pair, utterances):
    """The shipped assistant drafts for transcription only: translating, the bench says so instead
    of timing a 'speculative' run that is main-only; a German reference is no translation's reference."""
    report = run_bench(pair, utterances, BenchOptions(batch_sizes=(1,), repeats=1, peers=(), task="translate"),
                       progress=False)
    assert [c["name"] for c in report["configs"]] == ["main b1"]
    assert "drafts for transcribe only" in report["left_out"]["speculative"]
    assert "check: nothing to check" in markdown_table(report)
    by_language = report["configs"][0]["by_language"]
    assert by_language["de"]["wer"] is None and by_language["en"]["wer"] < 0.2
    assert report["configs"][0]["wer"] == by_language["en"]["wer"]


@pytest.mark.slow
def test_exactness_check_fails_when_an_output_is_altered(pair, utterances, monkeypatch):
    run_ours = harness._run_ours

    def altered(p, utts, config, options):
        tokens, texts, stats, per_utterance = run_ours(p, utts, config, options)
        for i, utterance in enumerate(utts):
            if config.speculative and utterance.id == utterances[1].id:
                tokens[i] = tokens[i][:-1]
                texts[i] = ""  # every reference word now a deletion: the WER must move
        return tokens, texts, stats, per_utterance

    monkeypatch.setattr(harness, "_run_ours", altered)
    report = run_bench(pair, utterances, BenchOptions(batch_sizes=(1,), repeats=1, peers=()), progress=False)
    assert not report["check"]["passed"]
    failures = " ".join(report["check"]["failures"])
    assert utterances[1].id in failures and "WER" in failures


def test_configurations_take_turns_in_a_shuffled_order():
    """Each block runs every configuration once, in an order that changes from block to block, so
    no configuration always runs right after the same other one; each keeps its utterances in order."""
    configs = [harness.Config(name, "whisper-spec", 1) for name in "abcd"]
    calls = []

    def execute(config, rows):
        calls.append((config.name, rows[0]))
        return [[rows[0]]], [str(rows[0])], None, []

    class Bar:
        def update(self):
            pass

    parts, _ = harness._time_repeat(configs, [range(i, i + 1) for i in range(8)], execute, torch.device("cpu"), Bar())
    blocks = ["".join(name for name, row in calls if row == i) for i in range(8)]
    assert all(sorted(block) == list("abcd") for block in blocks)
    followers = {name: {block[block.index(name) + 1] for block in blocks if block[-1] != name} for name in "abcd"}
    assert all(len(after) > 1 for after in followers.values())
    assert all(parts[name].tokens == [[i] for i in range(8)] for name in "abcd")


def test_the_warm_up_runs_every_batch_shape_the_timed_runs_have(monkeypatch):
    """A new batch shape captures CUDA graphs or compiles: the warm-up takes each configuration
    through a full batch and the last block's remainder (3 utterances at batch 2: 2, then 1), so no
    timed run meets a shape first, and its seconds are reported."""
    main = random_model(0)
    pair = WhisperPair(main, perturbed_decoder(main, 0.1, seed=1), torch.device("cpu"), torch.float32)
    utterances = [Utterance(f"u{i}", np.zeros(16000, np.float32), None, "en") for i in range(3)]
    calls = []  # each call's configuration and the batch sizes _run_ours splits its utterances into

    def recorded(pair, subset, config, options):
        calls.append((config.name, {len(rows) for rows in batches(len(subset), config.batch_size)}))
        return [[1]] * len(subset), ["x"] * len(subset), DecodingStats(), [DecodingStats()] * len(subset)

    monkeypatch.setattr(harness, "_run_ours", recorded)
    runs, configs, _ = harness._run_configs(pair, None, utterances, BenchOptions(batch_sizes=(1, 2), repeats=1, peers=()),
                                            {}, {}, lambda message: None, False)
    n_warm_up = 6  # main b1, speculative b1: one batch each; main b2, speculative b2: a full batch and the remainder
    shapes = {(stage, config.name): set().union(*(sizes for name, sizes in part if name == config.name))
              for stage, part in (("warm-up", calls[:n_warm_up]), ("timed", calls[n_warm_up:])) for config in configs}
    for config in configs:
        assert shapes["timed", config.name] <= shapes["warm-up", config.name]
        assert runs[config.name].warm_up_seconds > 0
    assert shapes["warm-up", "main b2"] == {1, 2}


def test_a_configuration_that_cannot_compile_is_left_out_with_its_reason(monkeypatch):
    """Compiled rounds that torch.compile cannot build (no Triton, a compiler error) leave the eager
    configurations measured and checked: the failing compiled one is left out with the error, and so
    is any compiled speculative one whose compiled main-only baseline is (without trying it); another
    error still ends the run."""
    main = random_model(0)
    pair = WhisperPair(main, perturbed_decoder(main, 0.1, seed=1), torch.device("cpu"), torch.float32)
    pair.platform = replace(pair.platform, compiles="rounds")
    utterances = [Utterance(f"u{i}", np.zeros(16000, np.float32), None, "en") for i in range(2)]
    failing = {"main compiled b1": CompileError("compile: torch.compile failed on verify_step (...)"),
               "speculative compiled b2": CompileError("compile: torch.compile failed on draft_step (...)")}

    ran = []

    def run(pair, subset, config, options):
        ran.append(config.name)
        if config.name in failing:
            raise failing[config.name]
        return [[1]] * len(subset), ["x"] * len(subset), DecodingStats(), [DecodingStats()] * len(subset)

    monkeypatch.setattr(harness, "_run_ours", run)
    left_out = {}
    options = BenchOptions(batch_sizes=(1, 2), repeats=1, peers=(), compile=True)
    runs, configs, _ = harness._run_configs(pair, None, utterances, options, {}, left_out, lambda message: None, False)
    assert [c.name for c in configs] == ["main b1", "speculative b1", "main b2", "main compiled b2", "speculative b2"]
    assert left_out == {"main compiled b1": str(failing["main compiled b1"]),
                        "speculative compiled b2": str(failing["speculative compiled b2"]),
                        "speculative compiled b1": "its baseline, main compiled b1, is left out"}
    assert "speculative compiled b1" not in ran  # not compiled again only to fail as its baseline did
    failing["main b1"] = RuntimeError("a bug")
    with pytest.raises(RuntimeError, match="a bug"):
        harness._run_configs(pair, None, utterances, options, {}, {}, lambda message: None, False)


@pytest.mark.slow
def test_a_peer_that_cannot_run_is_left_out_with_its_reason(pair, utterances, tmp_path, monkeypatch):
    """faster-whisper on a CTranslate2 directory whose weights are cut short: left out as it loads,
    the reason in the report and its table, ours measured and checked. And one that loads but fails
    its first transcription (as CTranslate2 does on a GPU without the cuBLAS it was built for, a stand-in
    here): left out at the warm-up, before any timing."""
    broken = tmp_path / "ct2"
    shutil.copytree(ct2_source("base"), broken)
    (broken / "model.bin").write_bytes((broken / "model.bin").read_bytes()[:4096])
    options = BenchOptions(batch_sizes=(1,), repeats=1, peers=("faster-whisper",))
    report = run_bench(pair, utterances[:1], options, model=str(broken), progress=False)
    assert "faster-whisper" in report["left_out"] and report["check"]["passed"]
    assert {c["engine"] for c in report["configs"]} == {"whisper-spec"}
    assert f"faster-whisper: left out ({report['left_out']['faster-whisper']})" in markdown_table(report)

    def no_cublas(self, *args, **kwargs):
        raise RuntimeError("faster-whisper: RuntimeError: Library libcublas.so.12 is not found or cannot be loaded")

    monkeypatch.setattr(FasterWhisperPeer, "run", no_cublas)
    report = run_bench(pair, utterances[:1], options, progress=False)
    assert "libcublas.so.12" in report["left_out"]["faster-whisper"] and report["check"]["passed"]
    assert [c["name"] for c in report["configs"]] == ["main b1", "speculative b1"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["faster-whisper", "whisper.cpp"])
def test_a_peer_writes_a_long_recording_at_batch_1_and_4(pair, name, tmp_path):
    """The long-form peers of benchmarks/longform.py: faster-whisper's sequential transcribe (batch 1)
    and its batched pipeline, which cuts at pauses (batch 4), and whisper.cpp on the ggml file written
    from our weights (one recording a call at any batch), each write the whole recording."""
    row = next(r for r in manifest() if r["set"] == "longform" and "TED" in r["path"])
    peer = load_peers(pair, "base", (name,), tmp_path, note=print)[0][name]
    audio = load_audio(speech(row["path"]))
    for batch in (1, 4):
        text = peer.transcribe_long(audio, batch, int8=True, language="en")
        assert word_error_rate([row["text"]], [text], ["en"]) < 0.15, (batch, text)
    peer.close()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["faster-whisper", "whisper.cpp"])
def test_a_peer_runs_in_a_process_of_its_own(pair, utterances, name, tmp_path):
    """CTranslate2's or ggml's threads computing in the benchmark's process slow torch there
    (peer_process): the peer transcribes in a child process, and this process gains no threads."""
    threads = len(list(Path("/proc/self/task").iterdir()))
    peer = load_peers(pair, "base", (name,), tmp_path, note=print)[0][name]
    english = utterances[:2]
    for batch in (1, 2):
        tokens, texts = peer.run(english, batch, speculative=False, int8=True, task="transcribe", languages=["en"] * 2)
        assert [pair.main.tokenizer.decode(t).strip() for t in tokens] == [text.strip() for text in texts]
        assert word_error_rate([u.text for u in english], texts, ["en"] * 2) < 0.2, texts
    assert len(list(Path("/proc/self/task").iterdir())) == threads
    assert peer.peak_memory_bytes > 100 * 2**20  # the child's own resident set: a model was loaded there
    peer.close()
    assert not peer._process.is_alive()


def test_compiled_rounds_are_checked_against_compiled_main_only():
    """Where compiling takes in the main model's verification (a GPU's rounds), speculative compiled
    must reproduce main-only compiled; where it compiles drafts alone (CPU), main-only as it is."""
    main = random_model(0)
    pair = WhisperPair(main, perturbed_decoder(main, 0.1, seed=1), torch.device("cpu"), torch.float32)
    options = BenchOptions(batch_sizes=(1, 4), peers=(), compile=True)
    pair.platform = replace(pair.platform, compiles="rounds")
    planned = [(c.name, c.baseline) for c in harness.plan_configs(pair, options, {})]
    assert planned == [(f"{name} b{b}", f"{baseline} b{b}") for b in (1, 4) for name, baseline in (
        ("main", "main"), ("main compiled", "main compiled"), ("speculative", "main"),
        ("speculative compiled", "main compiled"))]
    pair.platform = replace(pair.platform, compiles="drafts")
    planned = [(c.name, c.baseline) for c in harness.plan_configs(pair, replace(options, batch_sizes=(1,)), {})]
    assert planned == [("main b1", "main b1"), ("speculative b1", "main b1"), ("speculative compiled b1", "main b1")]


@pytest.mark.slow
def test_compiled_drafts_are_timed_as_configurations_of_their_own(pair, utterances):
    """Float32 and int8 drafts alike (the int8 decoders' step compiles around the fused int8 kernel)."""
    options = BenchOptions(batch_sizes=(1,), repeats=1, peers=(), compile=True, int8=True)
    report = run_bench(pair, utterances[:2], options, progress=False,
                       int8_pair=load_pair("base", default_assistant("base"), int8=True, dtype="bfloat16"))
    by_name = {c["name"]: c for c in report["configs"]}
    assert list(by_name) == ["main b1", "speculative b1", "speculative compiled b1", "main int8 b1",
                             "speculative int8 b1", "speculative compiled int8 b1"]
    for precision in ("", " int8"):
        compiled = by_name[f"speculative compiled{precision} b1"]
        assert compiled["compiled"] and not by_name[f"speculative{precision} b1"]["compiled"]
        assert compiled["int8"] == bool(precision) and compiled["identical_to"] == f"main{precision} b1"
        assert compiled["identical_fraction"] == 1.0 and compiled["acceptance"] > 0.5
    assert report["options"]["compile"] and report["check"]["passed"]


@pytest.mark.slow
def test_bench_cli_writes_report_table_and_plots(tmp_path, capsys):
    """In a log (stderr is no terminal): the plan up front, a line a pass, no carriage returns; the table's
    header names both precisions, and an int8 configuration's speedup is against int8 main-only."""
    code = cli(["bench", MANIFEST, "--set", "dutch_vl_tts", "--limit", "2", "--batch-sizes", "2", "--repeats", "1",
                "--peers", "none", "--int8", "--output-dir", str(tmp_path)])
    assert code == 0
    out, err = capsys.readouterr()
    assert "| speculative int8 b2 |" in out and "check: passed" in out
    assert "int8 decoders on bfloat16 rows" in out and "same batch size and precision" in out
    assert re.search(r"bench: 4 configurations \(main b2, speculative b2, main int8 b2, speculative int8 b2\)", err), err
    assert "bench: timed pass 1 of 1" in err and "\r" not in err
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["int8_kernel"] == "int8pack_mm"
    by_name = {c["name"]: c for c in report["configs"]}
    assert by_name["speculative int8 b2"]["speedup"] == pytest.approx(
        by_name["main int8 b2"]["total_seconds"] / by_name["speculative int8 b2"]["total_seconds"])
    assert (tmp_path / "time_by_config.png").stat().st_size > 1000


def test_bench_refuses_a_missing_dataset(tmp_path, capsys):
    code = cli(["bench", str(tmp_path / "nothing.jsonl"), "--output-dir", str(tmp_path)])
    assert code == 2
    assert "nothing.jsonl" in capsys.readouterr().err


def test_bench_says_at_once_when_the_hub_is_out_of_reach(tmp_path, capsys, monkeypatch):
    """Offline, datasets retried for ~25 s before its error; an unreachable hub is now said in one line."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "ENDPOINT", "https://hub.invalid")  # no such host, online or not
    code = cli(["bench", "distil-whisper/librispeech_asr_dummy", "--output-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "the Hugging Face hub is not reachable and the dataset is not cached" in err


@pytest.mark.slow
def test_longform_benchmark_runs_in_its_dry_mode(tmp_path):
    """benchmarks/longform.py gives the README's long-audio figures: its dry mode (one chapter, batch 1,
    no peers) runs every part of it, so it cannot rot between measurements."""
    import subprocess

    repo = Path(__file__).resolve().parents[1]
    output = tmp_path / "longform.json"
    done = subprocess.run([sys.executable, str(repo / "benchmarks" / "longform.py"), "--dry", "--output", str(output)],
                          capture_output=True, text=True, timeout=900, cwd=repo)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(output.read_text())
    (entry,) = report["results"]
    assert report["files"] == 1 and entry["batch_size"] == 1
    assert entry["identical_fraction_vad_int8"] == entry["identical_fraction_sequential_int8"] == 1.0
    vad = entry["configurations"]["vad speculative int8"]
    assert vad["wer"] < 0.2 and 0.9 < vad["decoded_audio_ratio"] < 1.2 and vad["acceptance"] > 0.5
    assert report["against_utterances_alone"] and report["voice_activity"]


@pytest.mark.slow
def test_gpu_check_script_runs_in_its_cpu_dry_mode(tmp_path):
    """benchmarks/gpu.sh is what the first GPU runs: its dry mode (CPU, 2 clips, no CUDA tests) runs
    every other part of it here, so it cannot rot before then."""
    import subprocess

    repo = Path(__file__).resolve().parents[1]
    # within a lease's budget (GPU_CHECK_SECONDS), as a GPU lease runs it: every part capped, none cut here
    done = subprocess.run(["bash", str(repo / "benchmarks" / "gpu.sh"), "--dry", str(tmp_path)],
                          capture_output=True, text=True, timeout=900, env={**os.environ, "GPU_CHECK_SECONDS": "850"})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert not (tmp_path / "out_of_time.txt").exists()
    report = json.loads((tmp_path / "librispeech" / "report.json").read_text())
    assert report["check"]["passed"] and {"speculative int8 b4", "faster-whisper int8 b1"} <= {
        c["name"] for c in report["configs"]}
    memory = json.loads((tmp_path / "memory.json").read_text())
    assert memory["runs"]["int8"]["int8_kernel"] == "int8pack_mm"
    assert memory["int8_reduction"]["decoder_weight_bytes"] > 0.35
    summary = (tmp_path / "summary.md").read_text()
    assert summary == done.stdout[-len(summary):]
    assert "CUDA tests: not run (dry mode, or out of time)" in summary and "| speculative b1 |" in summary
    probe = json.loads((tmp_path / "cuda_libraries.json").read_text())
    assert "cuBLAS loadable without torch: " in summary and probe["packages"]["torch"] == torch.__version__
    wide = json.loads((tmp_path / "wide_batches" / "report.json").read_text())
    assert wide["check"]["passed"] and {"main b2", "speculative b2"} == {c["name"] for c in wide["configs"]}
    assert re.search(r"\| speculative b2 \| [\d.]+ \| [\d.]+ \| \d+ \|", summary), "no microseconds a token"
    assert re.search(r"\| int8: lower decoder weight memory \| \d+% \| >= 35% \|", summary)


# each maintained benchmark (cited by the docs) and what its report must hold; longform.py and gpu.sh
# (with gpu_memory.py and gpu_summary.py) have tests of their own above
MAINTAINED = {"cpu_costs": "decoder", "startup": "median_seconds", "speculation_policy": "batch_sizes",
              "round_budget": "precisions", "no_speech": "speech", "word_timestamps": "summary",
              "fallback": "files", "threads": "results", "ray_scaling": "runs", "language_detection": "summary",
              "cpu_defaults": "results", "podcast": "summary", "language_switching": "summary",
              "serve_load": "configs", "live": "modes"}


@pytest.mark.slow
@pytest.mark.parametrize("script", list(MAINTAINED))
def test_maintained_benchmarks_run_in_their_dry_mode(script, tmp_path):
    import subprocess

    repo = Path(__file__).resolve().parents[1]
    output = tmp_path / "report.json"
    done = subprocess.run([sys.executable, str(repo / "benchmarks" / f"{script}.py"), "--dry", "--output", str(output)],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(output.read_text())
    assert report["machine"] and report[MAINTAINED[script]], f"{script}: {sorted(report)}"


def test_a_dataset_in_voxpopulis_schema_loads_from_its_repository_files(tmp_path):
    """The hub path (`whisper-spec bench facebook/voxpopuli --config en --split test`) offline: a
    dataset built here in VoxPopuli's schema (audio bytes, raw and normalized text, a language class
    index, ...) from the shared English clip, as its repository's Parquet files with a config per
    language. The normalized text is the reference, the config the language, audio_id the name."""
    import datasets

    row = next(r for r in manifest() if r["set"] == "voxpopuli_en")
    clip = speech(row["path"])
    columns = {"audio_id": ["20180418-0900-PLENARY-3-en_20180418-08:50:23_5"], "language": [0],
               "audio": [{"bytes": clip.read_bytes(), "path": clip.name}], "raw_text": ["Trade. Already ..."],
               "normalized_text": [row["text"]], "gender": ["male"], "speaker_id": ["4542"],
               "is_gold_transcript": [True], "accent": ["None"]}
    folder = tmp_path / "voxpopuli"
    (folder / "en" / "test").mkdir(parents=True)
    table = datasets.Dataset.from_dict(columns).cast_column("audio", datasets.Audio(sampling_rate=16000, decode=False))
    table.to_parquet(str(folder / "en" / "test" / "0000.parquet"))
    (folder / "README.md").write_text("---\nconfigs:\n- config_name: en\n  data_files:\n  - split: test\n"
                                      "    path: en/test/*.parquet\n---\n")
    for limit in (None, 1):  # read whole, and streamed
        (utterance,) = load_utterances(str(folder), config="en", split="test", limit=limit)
        assert (utterance.id, utterance.text, utterance.language) == (columns["audio_id"][0], row["text"], "en")
        np.testing.assert_array_equal(utterance.audio, load_audio(clip))
