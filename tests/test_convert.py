"""CTranslate2 -> Hugging Face conversion of the embedded sources."""

import json

import pytest
import torch
from tokenizers import Tokenizer

from whisper_spec.models import sources
from whisper_spec.models.ct2 import read_ct2_model
from whisper_spec.models.sources import EMBEDDED_MODELS, ModelNotFound, prepare_embedded


@pytest.mark.slow
def test_base_conversion_is_faithful(base_pair):
    path = base_pair.main.path
    config = json.loads((path / "config.json").read_text())
    assert (config["vocab_size"], config["d_model"], config["decoder_layers"], config["num_mel_bins"]) == (51865, 512, 6, 80)
    spec = EMBEDDED_MODELS["base"]
    raw = read_ct2_model(b"".join(sources._locate(p).read_bytes() for p in spec.model_bin_parts), path)
    fused = raw["decoder/layer_2/self_attention/linear_0/weight"].float()
    ours = base_pair.main.decoder.blocks[2].attn.qkv.weight
    assert torch.equal(ours, fused)  # q, k, v in CTranslate2's order, float16 values kept exactly
    kv = raw["decoder/layer_0/attention/linear_1/weight"].float()
    assert torch.equal(base_pair.main.decoder.blocks[0].cross_attn.kv.weight, kv)

    tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
    generation = json.loads((path / "generation_config.json").read_text())
    assert tokenizer.token_to_id("<|0.00|>") == generation["no_timestamps_token_id"] + 1 == 50364
    assert tokenizer.token_to_id("<|30.00|>") == 51864
    assert generation["lang_to_id"]["<|de|>"] == 50261 and generation["task_to_id"]["translate"] == 50358


@pytest.mark.slow
def test_conversion_is_cached_and_hash_checked(monkeypatch, tmp_path):
    monkeypatch.setenv("WHISPER_SPEC_CACHE", str(tmp_path))
    first = prepare_embedded("tiny.en")
    mtime = (first / "model.safetensors").stat().st_mtime_ns
    assert prepare_embedded("tiny.en") == first
    assert (first / "model.safetensors").stat().st_mtime_ns == mtime  # reused, not converted again

    bad = dict(EMBEDDED_MODELS)
    bad["tiny.en"] = EMBEDDED_MODELS["tiny.en"].__class__(**{**EMBEDDED_MODELS["tiny.en"].__dict__, "sha256": "0" * 64})
    monkeypatch.setattr(sources, "EMBEDDED_MODELS", bad)
    monkeypatch.setenv("WHISPER_SPEC_CACHE", str(tmp_path / "other"))
    with pytest.raises(ModelNotFound, match="sha256"):
        prepare_embedded("tiny.en")


def test_unknown_model_is_a_clear_error(tmp_path):
    with pytest.raises(ModelNotFound, match="not an embedded model"):
        sources.resolve_model("large-v9")
    with pytest.raises(ModelNotFound, match="no config.json"):
        sources.resolve_model(str(tmp_path))


@pytest.mark.slow
def test_ctranslate2_directory_is_converted_on_the_fly(monkeypatch, tmp_path):
    from whisper_spec.models.load import load_model

    monkeypatch.setenv("WHISPER_SPEC_CACHE", str(tmp_path))
    ct2_dir = sources._locate(EMBEDDED_MODELS["tiny.en"].ct2_dir).parent
    assert (ct2_dir / "model.bin").is_file()
    model = load_model(ct2_dir)
    assert model.path.parent == tmp_path / "converted"
    assert model.dims.n_vocab == 51864 and not model.special.multilingual


def _tiny_en_ct2_copy(folder):
    """A copy of the embedded tiny.en CTranslate2 directory (model.bin linked, not copied)."""
    import shutil

    source = sources._locate(EMBEDDED_MODELS["tiny.en"].ct2_dir).parent
    folder.mkdir()
    for file in source.iterdir():
        if file.is_file():
            (folder / file.name).symlink_to(file) if file.name == "model.bin" else shutil.copyfile(file, folder / file.name)
    return folder


def test_a_ctranslate2_tokenizer_that_holds_the_timestamp_tokens_converts_alike(tmp_path):
    """Recent hub tokenizers hold <|0.00|> .. <|30.00|> already: converted as one without them (it was
    refused), and a tokenizer with other tokens there is refused naming what it found."""
    from tokenizers import AddedToken

    from whisper_spec.models.ct2 import N_TIMESTAMPS, convert_ct2_to_hf

    plain = _tiny_en_ct2_copy(tmp_path / "plain")
    with_timestamps = _tiny_en_ct2_copy(tmp_path / "with_timestamps")
    tokenizer = Tokenizer.from_file(str(with_timestamps / "tokenizer.json"))
    tokenizer.add_special_tokens([AddedToken(f"<|{i * 0.02:.2f}|>", special=False, normalized=False)
                                  for i in range(N_TIMESTAMPS)])
    tokenizer.save(str(with_timestamps / "tokenizer.json"))
    a, b = convert_ct2_to_hf(plain, tmp_path / "a"), convert_ct2_to_hf(with_timestamps, tmp_path / "b")
    assert (a / "tokenizer.json").read_text() == (b / "tokenizer.json").read_text()
    other = _tiny_en_ct2_copy(tmp_path / "other")
    tokenizer = Tokenizer.from_file(str(other / "tokenizer.json"))
    tokenizer.add_special_tokens(["<|something|>"])
    tokenizer.save(str(other / "tokenizer.json"))
    with pytest.raises(Exception, match="1 tokens after <|notimestamps|>"):
        convert_ct2_to_hf(other, tmp_path / "c")


def test_a_failed_conversion_leaves_no_partial_model_and_a_missing_tokenizer_is_named(tmp_path, monkeypatch):
    import whisper_spec.models.ct2 as ct2

    source = _tiny_en_ct2_copy(tmp_path / "source")

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ct2, "save_safetensors", full)
    with pytest.raises(OSError):
        ct2.convert_ct2_to_hf(source, tmp_path / "converted")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["source"]
    (source / "tokenizer.json").unlink()
    with pytest.raises(FileNotFoundError, match=f"{source / 'tokenizer.json'}: no such file"):
        ct2.convert_ct2_to_hf(source, tmp_path / "converted")


def test_an_english_only_model_refuses_to_translate():
    from dataclasses import replace

    from conftest import RANDOM_SPECIAL

    english_only = replace(RANDOM_SPECIAL, lang_to_id={}, transcribe=None, translate=None)
    assert english_only.prompt(None, "transcribe", False) == [english_only.sot, english_only.no_timestamps]
    with pytest.raises(ValueError, match="English-only: it transcribes English and cannot translate"):
        english_only.prompt(None, "translate", False)


@pytest.mark.slow  # resolve_model converts the embedded weights where not yet done
@pytest.mark.parametrize("model", ["base", "tiny.en"])
@pytest.mark.parametrize("dropped", [("lang_to_id", "task_to_id", "is_multilingual"),
                                     ("lang_to_id", "task_to_id", "is_multilingual", "no_timestamps_token_id"),
                                     ("eos_token_id", "decoder_start_token_id")])
def test_an_older_generation_config_is_completed_from_the_tokenizer(model, dropped, tmp_path):
    """Older hub checkpoints' generation configs lack the languages, tasks, the multilingual flag or the
    no-timestamps token: read from the tokenizer's special tokens, the model's special tokens are the
    same (a multilingual model stays multilingual, an English-only one English-only)."""
    import shutil

    from whisper_spec.models.tokenizer import SpecialTokens

    folder = sources.resolve_model(model)
    complete = SpecialTokens.from_model_dir(folder)
    shutil.copy(folder / "tokenizer.json", tmp_path / "tokenizer.json")
    config = json.loads((folder / "generation_config.json").read_text())
    (tmp_path / "generation_config.json").write_text(json.dumps({k: v for k, v in config.items() if k not in dropped}))
    assert SpecialTokens.from_model_dir(tmp_path) == complete
    assert bool(complete.lang_to_id) == (model == "base")


def test_a_hub_download_fetches_only_the_weights_transformers_loads():
    """large-v3's repository keeps fp32 shards beside its fp16 model.safetensors (the listing as the hub
    gives it); a sharded repository's shards are its weights; neither fetches pytorch or flax files."""
    large_v3 = ["added_tokens.json", "config.json", "flax_model.msgpack", "generation_config.json", "merges.txt",
                "model.fp32-00001-of-00002.safetensors", "model.fp32-00002-of-00002.safetensors", "model.safetensors",
                "model.safetensors.index.fp32.json", "normalizer.json", "preprocessor_config.json", "pytorch_model.bin",
                "pytorch_model.bin.index.fp32.json", "pytorch_model.fp32-00001-of-00002.bin", "tokenizer.json"]
    assert sources.weight_files(large_v3) == ["model.safetensors"]
    sharded = ["config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
               "model.safetensors.index.json", "pytorch_model-00001-of-00002.bin"]
    assert sources.weight_files(sharded) == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    assert sources.weight_files(["config.json", "decoder.safetensors"]) == ["decoder.safetensors"]
