"""CTranslate2 -> Hugging Face conversion of the embedded sources."""

import json

import pytest
import torch
from tokenizers import Tokenizer

from whisper_spec import sources
from whisper_spec.ct2 import read_ct2_model
from whisper_spec.sources import EMBEDDED_MODELS, ModelNotFound, prepare_embedded


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


def test_ctranslate2_directory_is_converted_on_the_fly(monkeypatch, tmp_path):
    from whisper_spec.load import load_model

    monkeypatch.setenv("WHISPER_SPEC_CACHE", str(tmp_path))
    ct2_dir = sources._locate(EMBEDDED_MODELS["tiny.en"].ct2_dir).parent
    assert (ct2_dir / "model.bin").is_file()
    model = load_model(ct2_dir)
    assert model.path.parent == tmp_path / "converted"
    assert model.dims.n_vocab == 51864 and not model.special.multilingual
