"""Distillation: end to end on a small random main model (fast), and through the CLI on base."""

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import SPEECH, mel_of, random_model
from safetensors.torch import load_file
from whisper_spec.cli.main import main as cli

import whisper_spec.distill.data as distill_data
import whisper_spec.distill.student as distill_student
import whisper_spec.distill.train as distill_train
from whisper_spec.decode.decoding import decode_windows
from whisper_spec.distill.data import perturb, plan_recordings
from whisper_spec.distill.student import build_student, spread_layers
from whisper_spec.distill.train import distill
from whisper_spec.jobs.inputs import Job
from whisper_spec.models.attention import DecoderCaches
from whisper_spec.models.load import load_distilled, load_pair
from whisper_spec.models.pair import WhisperPair
from whisper_spec.options import DecodingOptions, DistillOptions
from whisper_spec.speech.audio import load_audio

UNLABELED = SPEECH / "unlabeled" / "librispeech-train-clean-100"
OPTIONS = DistillOptions(layers=1, steps=6, batch_size=2, eval_every=3, checkpoint_every=3, held_out=0.34,
                         draft_vocab=80, top_k=4, learning_rate=1e-3, warmup_steps=2)


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    folder = tmp_path_factory.mktemp("audio")
    for source in sorted(UNLABELED.glob("*.flac"))[:3]:
        (folder / source.name).symlink_to(source)
    return folder


@pytest.fixture(scope="module")
def random_main():
    return WhisperPair(random_model(3, eot_bias=2.0), None, torch.device("cpu"), torch.float32)


def test_spread_layers_keep_first_and_last():
    assert spread_layers(6, 2) == [0, 5]
    assert spread_layers(6, 3) == [0, 2, 5]
    assert spread_layers(32, 2) == [0, 31]
    assert spread_layers(6, 1) == [5]
    with pytest.raises(ValueError):
        spread_layers(2, 3)


def test_distill_end_to_end_is_exact_deterministic_and_resumable(random_main, clips, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    summary = distill(random_main, str(clips), tmp_path / "a", OPTIONS, cache=cache)
    assert summary["training_data"]["windows"] == 3 and summary["training_data"]["held_out_files"] == 1
    assert summary["held_out_acceptance"] is not None and len(summary["log"]) == 2

    stored = load_file(tmp_path / "a" / "model.safetensors")
    assert not any(k.startswith("token_embedding") or ".cross_attn.kv." in k for k in stored)
    assert all(t.dtype == torch.float16 for k, t in stored.items() if k != "draft_vocab")
    assert len(stored["draft_vocab"]) == 80
    config = json.loads((tmp_path / "a" / "assistant.json").read_text())
    assert config["layers_from_main"] == [1]

    # the assistant drafts for its main model, and the output stays the main model's
    main = random_main.main
    pair = WhisperPair(main, load_distilled(tmp_path / "a", main, torch.float32, "cpu"), torch.device("cpu"),
                       torch.float32)
    assert pair.shares_encoder and pair.assistant.decoder.token_embedding is main.decoder.token_embedding
    mel = mel_of(sorted(clips.glob("*.flac")))
    alone, _ = decode_windows(pair, mel, DecodingOptions(language="en", speculation="off"))
    drafted, stats = decode_windows(pair, mel, DecodingOptions(speculation="on", language="en", draft_tokens=3))
    assert [r.tokens for r in alone] == [r.tokens for r in drafted]
    assert stats.drafted > 0

    # same seed, same cache: the same weights
    distill(random_main, str(clips), tmp_path / "b", OPTIONS, cache=cache)
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == (tmp_path / "b" / "model.safetensors").read_bytes()

    # interrupted after its step-3 checkpoint, then resumed: the same weights again
    calls = {"n": 0}
    loss = distill_train.distillation_loss

    def interrupt_at_step_5(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt
        return loss(*args, **kwargs)

    monkeypatch.setattr(distill_train, "distillation_loss", interrupt_at_step_5)
    with pytest.raises(KeyboardInterrupt):
        distill(random_main, str(clips), tmp_path / "c", OPTIONS, cache=cache)
    assert (tmp_path / "c" / "checkpoint.pt").is_file()
    monkeypatch.setattr(distill_train, "distillation_loss", loss)
    distill(random_main, str(clips), tmp_path / "c", OPTIONS, cache=cache, resume=True)
    assert not (tmp_path / "c" / "checkpoint.pt").exists()
    resumed, original = load_file(tmp_path / "c" / "model.safetensors"), stored
    assert all(torch.equal(resumed[k], original[k]) for k in original)


def test_joined_recordings_stay_within_a_language_and_a_side_of_the_split():
    jobs = [Job(Path(f"/data/{language}{i}.flac"), f"{language}{i}", language) for language in "ab" for i in range(7)]
    held = {"/data/a0.flac", "/data/a1.flac", "/data/a2.flac"}
    recordings = plan_recordings(jobs, held, 2, seed=0)
    assert [r.parts for r in recordings[:14]] == [(job,) for job in jobs]
    joined = recordings[14:]
    assert len(joined) == 2 + 1 + 3  # a: 4 training files, 3 held out; b: 7 training files
    for recording in joined:
        assert len(recording.parts) == 2 and len({job.language for job in recording.parts}) == 1
        assert {str(job.path) in held for job in recording.parts} == {recording.held_out}
    parts = [job.path for r in joined for job in r.parts]
    assert len(parts) == len(set(parts))
    assert plan_recordings(jobs, held, 2, seed=0) == recordings
    assert plan_recordings(jobs, held, 2, seed=1) != recordings
    assert plan_recordings(jobs, held, 0, seed=0) == recordings[:14]

    augmented = plan_recordings(jobs, held, 2, seed=0, augment=2)
    assert augmented[: len(recordings)] == recordings
    copies = augmented[len(recordings) :]
    training = [r for r in recordings if not r.held_out]
    assert [(r.parts, r.copy) for r in copies] == [(r.parts, n) for n in (1, 2) for r in training]
    assert not any(r.held_out for r in copies) and len({r.label for r in augmented}) == len(augmented)


def test_joined_recordings_are_trained_on_and_the_cache_follows_content_not_paths(random_main, clips, tmp_path,
                                                                                  monkeypatch):
    cache = tmp_path / "cache"
    options = replace(OPTIONS, join=2, steps=2)
    summary = distill(random_main, str(clips), tmp_path / "a", options, cache=cache)
    data = summary["training_data"]
    assert data["joined_recordings"] == 1  # the two training clips; the one held-out clip has no partner
    # clips of 14.1, 7.9 and 14.6 s: any two fit one window; every window is labelled with and without timestamps
    assert data["windows"] == 3 + 1 and data["train_sequences"] == 2 * (2 + 1)

    # the same audio under other paths and time stamps: nothing is labelled again
    copy = tmp_path / "copy"
    copy.mkdir()
    for clip in sorted(clips.glob("*.flac")):
        (copy / clip.name).write_bytes(clip.read_bytes())
    monkeypatch.setattr(distill_data, "decode_encoded", None)  # labelling would call it
    again = distill(random_main, str(copy), tmp_path / "b", options, cache=cache)
    assert again["training_data"]["windows"] == 4
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == (tmp_path / "b" / "model.safetensors").read_bytes()


def test_augmented_copies_are_perturbed_reproducibly_and_labelled_as_their_own_windows(random_main, clips, tmp_path):
    audio = load_audio(sorted(clips.glob("*.flac"))[0])
    first, again, second = (perturb(audio, 0, copy, "0123abcd") for copy in (1, 1, 2))
    assert np.array_equal(first, again) and not np.array_equal(first, second)
    for copy in (first, second):
        assert len(audio) / 1.1 - 1 <= len(copy) <= len(audio) / 0.9 + 1 and copy.dtype == np.float32
        # noise at 10-30 dB SNR: the copy's power is the signal's plus at most a tenth of it
        assert 0.8 < np.mean(copy**2) / np.mean(audio**2) < 1.3

    summary = distill(random_main, str(clips), tmp_path / "a", replace(OPTIONS, augment=1, steps=2), cache=tmp_path / "c")
    data = summary["training_data"]
    assert data["windows"] == 3 + 2 and data["train_sequences"] == 2 * (2 + 2)  # copies of the two training clips
    assert (data["joined_recordings"], data["perturbed_copies"]) == (0, 2)
    assert "2 perturbed copies" in (tmp_path / "a" / "README.md").read_text()
    cached = sorted((tmp_path / "c" / "windows").glob("*.pt"))
    encoder = {f.name: torch.load(f, weights_only=True)["encoder"] for f in cached}
    originals = {name.split("-")[0] for name in encoder if "-p" in name}
    for name in (n for n in encoder if "-p" in n):
        assert not torch.equal(encoder[name], encoder[f"{name.split('-')[0]}-0.pt"])
    assert len(originals) == 2


def test_an_unreadable_file_is_skipped_once_with_its_name_however_many_recordings_hold_it(random_main, clips, tmp_path,
                                                                                        capsys):
    folder = tmp_path / "audio"
    folder.mkdir()
    for clip in sorted(clips.glob("*.flac")):
        (folder / clip.name).symlink_to(clip)
    (folder / "broken.flac").write_bytes(b"not audio at all")
    options = replace(OPTIONS, join=2, augment=1, steps=1, held_out=0.0)
    summary = distill(random_main, str(folder), tmp_path / "a", options, cache=tmp_path / "c")
    assert summary["training_data"]["files"] == 4
    errors = [line for line in capsys.readouterr().err.splitlines() if "broken.flac" in line]
    assert len(errors) == 1 and "cannot decode audio" in errors[0]


@pytest.mark.slow
def test_distill_and_export_through_the_cli(clips, tmp_path, base_pair):
    out = tmp_path / "assistant"
    code = cli(["distill", "--audio", str(clips), "--output", str(out), "--steps", "2", "--batch-size", "2",
                "--held-out", "0", "--cache-dir", str(tmp_path / "cache"), "--draft-vocab", "4000"])
    assert code == 0
    pair = load_pair("base", out)
    assert pair.assistant.dims.n_text_layer == 2 and len(pair.assistant.decoder.proj_out.token_ids) == 4000

    code = cli(["export", str(out), "--output", str(tmp_path / "hf"), "--dtype", "float32"])
    assert code == 0
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["architectures"] == ["WhisperForCausalLM"] and config["decoder_layers"] == 2
    exported = load_pair("base", tmp_path / "hf")
    assert exported.shares_encoder
    for limit in ("draft_languages", "draft_tasks", "audio_frame_margin"):
        assert getattr(exported.assistant, limit) == getattr(pair.assistant, limit), limit
    mel = mel_of([sorted(clips.glob("*.flac"))[0]])
    alone, _ = decode_windows(exported, mel, DecodingOptions(language="en", speculation="off"))
    drafted, _ = decode_windows(exported, mel, DecodingOptions(speculation="on", language="en", draft_tokens=4))
    assert alone[0].tokens == drafted[0].tokens


def test_distill_refuses_an_empty_input(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    code = cli(["distill", "--audio", str(tmp_path / "empty"), "--output", str(tmp_path / "out"),
                "--main", "tiny.en", "--cache-dir", str(tmp_path / "cache")])
    assert code == 2
    assert "no audio files" in capsys.readouterr().err


def test_training_gradients_reach_the_student_through_the_shared_projection(random_main):
    """The shared draft projection is frozen and, for inference, packed for oneDNN (whose op has
    no backward): the loss must still reach the student's own layers."""
    main = random_main.main
    student = build_student(main, [1], torch.arange(main.dims.n_vocab))
    assert student.proj_out.rows.packed is not None
    with torch.no_grad():
        states = main.encoder(torch.randn(1, 80, 3000))
        main_cross = main.decoder.cross_states(states)
    caches = DecoderCaches(student.cross_states(states, main=main_cross))
    tokens = torch.randint(0, 50, (1, 6))
    logits = student.proj_out.compact(student.features(tokens, torch.arange(6)[None], caches))
    torch.nn.functional.cross_entropy(logits[0], torch.randint(0, 50, (6,))).backward()
    assert student.blocks[0].mlp.fc2.weight.grad is not None
    assert student.blocks[0].mlp.fc2.weight.grad.abs().sum() > 0


TTS = SPEECH / "unlabeled" / "tts_multilingual"


def test_a_long_recording_is_held_out_by_its_end_and_cut_several_ways():
    long = Job(TTS / "de-otto.ogg", "de-otto", "de")  # 276 s
    short = [Job(path, path.stem, "en") for path in sorted(UNLABELED.glob("*.flac"))[:4]]
    held = {str(short[0].path)}
    recordings = plan_recordings([long, *short], held, 2, seed=0, augment=1, held_out_fraction=0.1, shifts=3)
    of_long = [r for r in recordings if r.parts == (long,)]
    training = [r for r in of_long if not r.held_out]
    assert [(r.span, r.shift, r.copy) for r in training] == [((0.0, 0.9), shift, copy) for copy in (0, 1)
                                                             for shift in (0.0, 10.0, 20.0)]
    assert [(r.span, r.copy) for r in of_long if r.held_out] == [((0.9, 1.0), 0)]
    assert not any(long in r.parts for r in recordings if len(r.parts) > 1)  # never joined
    assert [r.held_out for r in recordings if r.parts == (short[0],)] == [True]  # short files: held out whole
    assert len({r.label for r in recordings}) == len(recordings)
    assert len({r.key("k") for r in of_long}) == len({(r.span, r.shift) for r in of_long})


def test_languages_are_sampled_by_their_share_to_the_power_balance():
    examples = [distill_data.Example(0, language, torch.zeros(3), 0, torch.zeros(1, 1), torch.zeros(1, 1))
                for language in ["en"] * 90 + ["de"] * 10]
    for balance, english in ((1.0, 0.9), (0.5, 0.75), (0.0, 0.5)):
        weights = distill_train._Data(examples, {}, [], torch.zeros(1), 0, balance).sampling_weights()
        assert float(weights.sum()) == pytest.approx(1.0)
        assert float(weights[:90].sum()) == pytest.approx(english)
        assert len(set(weights[:90].tolist())) == 1  # within a language, every sequence alike


def test_the_draft_vocabulary_covers_each_language_by_its_own_share(random_main):
    main = random_main.main
    # English: 20 sequences putting their mass on tokens 10-19, German: 1 on tokens 30-39, each decreasing
    # alike: by the mass of both together English would take every place, by each language's share half
    def example(language, first):
        ids = torch.arange(first, first + 10).expand(4, 10)
        return distill_data.Example(0, language, torch.tensor([50]), 0, ids, -0.5 * torch.arange(10.0).expand(4, 10))
    examples = [example("en", 10)] * 20 + [example("de", 30)]
    special = {main.special.eot, *range(main.special.timestamp_begin, main.dims.n_vocab)}
    vocab = set(distill_student.choose_draft_vocab(main, examples, len(special) + 10).tolist()) - special
    assert len(vocab & set(range(10, 20))) == len(vocab & set(range(30, 40))) == 5


def test_a_multilingual_assistant_reports_each_language_and_drafts_only_for_them(random_main, clips, tmp_path):
    manifest = tmp_path / "train.jsonl"
    lines = []
    for language in ("en", "de"):  # the same speech said to be in two languages: copies, as a file is done once
        (tmp_path / language).mkdir()
        for clip in sorted(clips.glob("*")):
            (tmp_path / language / clip.name).write_bytes(clip.read_bytes())
            lines.append({"path": str(tmp_path / language / clip.name), "language": language})
    manifest.write_text("".join(json.dumps(line) + "\n" for line in lines))
    summary = distill(random_main, [str(manifest)], tmp_path / "a", replace(OPTIONS, held_out=0.5),
                      cache=tmp_path / "c")
    assert summary["training_data"]["languages"] == ["de", "en"]
    assert set(summary["held_out_acceptance_by_language"]) == {"de", "en"}
    assert set(summary["held_out_draft_vocab_coverage_by_language"]) == {"de", "en"}
    assert {"held_out_acceptance_de", "held_out_acceptance_en"} <= set(summary["log"][-1])
    config = json.loads((tmp_path / "a" / "assistant.json").read_text())
    assert config["draft_languages"] == ["de", "en"] and config["draft_tasks"] == ["transcribe"]
    card = (tmp_path / "a" / "README.md").read_text()
    assert "| de |" in card and "acceptance de" in card and "Drafts for the transcribe task" in card
    assistant = load_distilled(tmp_path / "a", random_main.main, torch.float32, "cpu")
    assert assistant.draft_languages == ("de", "en") and assistant.draft_tasks == ("transcribe",)


def test_an_assistant_distilled_for_both_tasks_drafts_for_both_and_reports_each(random_main, clips, tmp_path):
    """--tasks transcribe,translate: every window labelled for both (the task's token in its prompt),
    in window files of their own beside transcription's; the card and the loaded assistant name both."""
    options = replace(OPTIONS, tasks=("transcribe", "translate"), held_out=0.5)
    summary = distill(random_main, str(clips), tmp_path / "a", options, cache=tmp_path / "c")
    special = random_main.main.special
    windows = sorted((tmp_path / "c" / "windows").glob("*.pt"))
    assert windows and all(w.stem.endswith("-transcribe+translate") for w in windows)
    examples = torch.load(windows[0], weights_only=True)["examples"]
    assert [(e["task"], e["timestamps"]) for e in examples] == [(t, s) for t in options.tasks for s in (False, True)]
    assert [special.translate in e["tokens"][:e["start"] + 1] for e in examples] == [False, False, True, True]
    assert set(summary["held_out_acceptance_by_task"]) == {"transcribe", "translate"}
    assert {"held_out_transcribe_acceptance", "held_out_translate_acceptance"} <= set(summary["log"][-1])
    assert "held_out_acceptance_by_language" in summary and not any(
        "translate" in key for key in summary["held_out_acceptance_by_language"])
    assert json.loads((tmp_path / "a" / "assistant.json").read_text())["draft_tasks"] == ["transcribe", "translate"]
    assert "Drafts for the transcribe and translate tasks" in (tmp_path / "a" / "README.md").read_text()
    assistant = load_distilled(tmp_path / "a", random_main.main, torch.float32, "cpu")
    assert assistant.drafts_for("translate") and assistant.drafts_for("transcribe")
    with pytest.raises(ValueError, match="tasks must be one or both of transcribe, translate"):
        replace(OPTIONS, tasks=("transcribe", "summarize"))
