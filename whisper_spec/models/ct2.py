"""CTranslate2 (faster-whisper) Whisper directories -> Hugging Face Whisper directories.

A CTranslate2 directory holds `model.bin`, `config.json` (special token lists) and a
`tokenizer.json` without the 1501 timestamp tokens. The output is an ordinary Hugging Face
directory (`WhisperForConditionalGeneration` weights in safetensors, config, generation config,
tokenizer, feature extractor settings) that both this project and transformers load.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
from pathlib import Path

import numpy as np
import torch
from tokenizers import AddedToken, Tokenizer

from .checkpoint import save_safetensors
from .tokenizer import read_vocabulary

# CTranslate2's DataType enum
_CT2_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16, 5: None}  # 5: bfloat16
CONVERTER_VERSION = 2  # bump when the output changes: cached conversions are redone
N_TIMESTAMPS = 1501  # <|0.00|> ... <|30.00|>
LANGUAGE_CODES = (
    "en zh de es ru ko fr ja pt tr pl ca nl ar sv it id hi fi vi he uk el ms cs ro da hu ta no th ur hr bg lt "
    "la mi ml cy sk te fa lv bn sr az sl kn et mk br eu is hy ne mn bs kk sq sw gl mr pa si km sn yo so af oc "
    "ka be tg sd gu am yi lo uz fo ht ps tk nn mt sa lb my bo tl mg as tt haw ln ha ba jw su yue"
).split()


class ConversionError(ValueError):
    pass


def read_ct2_model(data: bytes, path: Path) -> dict[str, torch.Tensor]:
    """Every variable of a CTranslate2 `model.bin` (its bytes, read from path), with aliases resolved."""
    offset = 0

    def take(fmt: str):
        nonlocal offset
        values = struct.unpack_from("<" + fmt, data, offset)
        offset += struct.calcsize(fmt)
        return values if len(values) > 1 else values[0]

    def take_string() -> str:
        nonlocal offset
        length = take("H")
        text = data[offset : offset + length - 1].decode()
        offset += length
        return text

    version = take("I")
    if version < 5:
        raise ConversionError(f"{path}: CTranslate2 model format {version} is too old (need 5 or newer)")
    spec = take_string()
    if spec != "WhisperSpec":
        raise ConversionError(f"{path}: a {spec}, not a Whisper model")
    take("I")  # spec revision
    variables: dict[str, torch.Tensor] = {}
    for _ in range(take("I")):
        name = take_string()
        rank = take("B")
        shape = [take("I") for _ in range(rank)]
        dtype_code = take("B")
        n_bytes = take("I")
        raw = data[offset : offset + n_bytes]
        offset += n_bytes
        if dtype_code == 5:
            array = torch.frombuffer(bytearray(raw), dtype=torch.bfloat16)
        else:
            array = torch.from_numpy(np.frombuffer(raw, dtype=_CT2_DTYPES[dtype_code]).copy())
        variables[name] = array.reshape(shape)
    for _ in range(take("I")):
        alias, target = take_string(), take_string()
        variables[alias] = variables[target]
    return variables


def _attention(src: dict, prefix: str, fused: list[str], out: str, dst: dict, hf: str) -> None:
    """Split CTranslate2's fused projections (`linear_i` holds the letters of fused[i]) into q/k/v/out."""
    names = {"q": "q_proj", "k": "k_proj", "v": "v_proj"}
    for i, letters in enumerate(fused):
        weights = src[f"{prefix}/linear_{i}/weight"].chunk(len(letters))
        biases = src[f"{prefix}/linear_{i}/bias"].chunk(len(letters))
        for letter, weight, bias in zip(letters, weights, biases):
            dst[f"{hf}.{names[letter]}.weight"] = weight
            if letter != "k":
                dst[f"{hf}.{names[letter]}.bias"] = bias
            elif bias.abs().max() != 0:
                raise ConversionError(f"{prefix}: Whisper key projections have no bias, found one")
    _linear(src, f"{prefix}/{out}", dst, f"{hf}.out_proj")


def _layer_norm(src: dict, prefix: str, dst: dict, hf: str) -> None:
    dst[f"{hf}.weight"] = src[f"{prefix}/gamma"]
    dst[f"{hf}.bias"] = src[f"{prefix}/beta"]


def _linear(src: dict, prefix: str, dst: dict, hf: str) -> None:
    dst[f"{hf}.weight"] = src[f"{prefix}/weight"]
    dst[f"{hf}.bias"] = src[f"{prefix}/bias"]


def ct2_to_hf_state_dict(variables: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict]:
    """Hugging Face `WhisperForConditionalGeneration` weights and the model dimensions."""
    sd: dict[str, torch.Tensor] = {}
    n_enc = 1 + max(int(m.group(1)) for k in variables if (m := re.match(r"encoder/layer_(\d+)/", k)))
    n_dec = 1 + max(int(m.group(1)) for k in variables if (m := re.match(r"decoder/layer_(\d+)/", k)))
    for side, n_layers in (("encoder", n_enc), ("decoder", n_dec)):
        for i in range(n_layers):
            src, hf = f"{side}/layer_{i}", f"model.{side}.layers.{i}"
            _layer_norm(variables, f"{src}/self_attention/layer_norm", sd, f"{hf}.self_attn_layer_norm")
            _attention(variables, f"{src}/self_attention", ["qkv"], "linear_1", sd, f"{hf}.self_attn")
            if side == "decoder":
                _layer_norm(variables, f"{src}/attention/layer_norm", sd, f"{hf}.encoder_attn_layer_norm")
                _attention(variables, f"{src}/attention", ["q", "kv"], "linear_2", sd, f"{hf}.encoder_attn")
            _layer_norm(variables, f"{src}/ffn/layer_norm", sd, f"{hf}.final_layer_norm")
            _linear(variables, f"{src}/ffn/linear_0", sd, f"{hf}.fc1")
            _linear(variables, f"{src}/ffn/linear_1", sd, f"{hf}.fc2")
        _layer_norm(variables, f"{side}/layer_norm", sd, f"model.{side}.layer_norm")
        sd[f"model.{side}.embed_positions.weight"] = variables[f"{side}/position_encodings/encodings"]
    for conv in ("conv1", "conv2"):
        _linear(variables, f"encoder/{conv}", sd, f"model.encoder.{conv}")
    sd["model.decoder.embed_tokens.weight"] = variables["decoder/embeddings/weight"]

    n_vocab, d_model = sd["model.decoder.embed_tokens.weight"].shape
    dims = {
        "vocab_size": n_vocab,
        "num_mel_bins": sd["model.encoder.conv1.weight"].shape[1],
        "d_model": d_model,
        "encoder_layers": n_enc,
        "decoder_layers": n_dec,
        "encoder_attention_heads": int(variables["encoder/num_heads"]),
        "decoder_attention_heads": int(variables["decoder/num_heads"]),
        "encoder_ffn_dim": sd["model.encoder.layers.0.fc1.weight"].shape[0],
        "decoder_ffn_dim": sd["model.decoder.layers.0.fc1.weight"].shape[0],
        "max_source_positions": sd["model.encoder.embed_positions.weight"].shape[0],
        "max_target_positions": sd["model.decoder.embed_positions.weight"].shape[0],
    }
    return {k: v.contiguous() for k, v in sd.items()}, dims


def _special_ids(tokenizer: Tokenizer, n_vocab: int) -> dict:
    token = tokenizer.token_to_id
    eot = token("<|endoftext|>")
    no_timestamps = token("<|notimestamps|>")
    if eot is None or no_timestamps is None:
        raise ConversionError("tokenizer.json lacks <|endoftext|> or <|notimestamps|>: not a Whisper tokenizer")
    if n_vocab != no_timestamps + 1 + N_TIMESTAMPS:
        raise ConversionError(
            f"vocabulary of {n_vocab} tokens does not fit <|notimestamps|>={no_timestamps} + {N_TIMESTAMPS} timestamps"
        )
    langs = {code: token(f"<|{code}|>") for code in LANGUAGE_CODES if token(f"<|{code}|>") is not None}
    return {
        "eot": eot,
        "sot": token("<|startoftranscript|>"),
        "prev": token("<|startofprev|>"),
        "transcribe": token("<|transcribe|>"),
        "translate": token("<|translate|>"),
        "no_timestamps": no_timestamps,
        "multilingual": n_vocab >= 51865,
        "langs": langs,
    }


def _add_timestamp_tokens(tokenizer: Tokenizer, first_id: int) -> None:
    """The timestamp tokens <|0.00|> .. <|30.00|> right after <|notimestamps|>: added, or kept where the
    tokenizer already holds them there (recent hub tokenizers do)."""
    names = [f"<|{i * 0.02:.2f}|>" for i in range(N_TIMESTAMPS)]
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    if size == first_id + N_TIMESTAMPS and [tokenizer.id_to_token(first_id + i) for i in range(N_TIMESTAMPS)] == names:
        return
    if size != first_id:
        raise ConversionError(f"tokenizer.json has {size - first_id} tokens after <|notimestamps|>, not the "
                              f"{N_TIMESTAMPS} timestamp tokens <|0.00|> .. <|30.00|>; cannot place the timestamps")
    tokenizer.add_special_tokens([AddedToken(name, special=False, normalized=False) for name in names])


def _preprocessor_config(mel_bins: int) -> dict:
    """preprocessor_config.json: Whisper's feature extractor (30 s windows of 16 kHz audio)."""
    return {
        "feature_extractor_type": "WhisperFeatureExtractor",
        "processor_class": "WhisperProcessor",
        "feature_size": mel_bins,
        "sampling_rate": 16000,
        "hop_length": 160,
        "chunk_length": 30,
        "n_fft": 400,
        "n_samples": 480000,
        "nb_max_frames": 3000,
        "padding_side": "right",
        "padding_value": 0.0,
        "return_attention_mask": False,
    }


def _tokenizer_config() -> dict:
    """tokenizer_config.json: Whisper's byte-level tokenizer, <|endoftext|> for every special role."""
    return {
        "tokenizer_class": "WhisperTokenizer",
        "model_max_length": 1024,
        "bos_token": "<|endoftext|>",
        "eos_token": "<|endoftext|>",
        "unk_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "add_prefix_space": False,
        "errors": "replace",
    }


def _hf_configs(ct2_config: dict, dims: dict, ids: dict) -> dict[str, dict]:
    """The Hugging Face configuration files of a converted model, by file name."""
    suppress = ct2_config.get("suppress_ids", [])
    begin_suppress = ct2_config.get("suppress_ids_begin", [220, ids["eot"]])
    lang_ids = set(ct2_config.get("lang_ids", ids["langs"].values()))
    lang_to_id = {f"<|{code}|>": i for code, i in ids["langs"].items() if i in lang_ids}
    config = {
        "architectures": ["WhisperForConditionalGeneration"],
        "model_type": "whisper",
        **dims,
        "activation_function": "gelu",
        "scale_embedding": False,
        "tie_word_embeddings": True,
        "bos_token_id": ids["eot"],
        "eos_token_id": ids["eot"],
        "pad_token_id": ids["eot"],
        "decoder_start_token_id": ids["sot"],
        "suppress_tokens": suppress,
        "begin_suppress_tokens": begin_suppress,
        "dtype": "float16",
    }
    generation = {
        "bos_token_id": ids["eot"],
        "eos_token_id": ids["eot"],
        "pad_token_id": ids["eot"],
        "decoder_start_token_id": ids["sot"],
        "max_length": dims["max_target_positions"],
        "suppress_tokens": suppress,
        "begin_suppress_tokens": begin_suppress,
        "no_timestamps_token_id": ids["no_timestamps"],
        "prev_sot_token_id": ids["prev"],
        "is_multilingual": ids["multilingual"],
        "max_initial_timestamp_index": 50,
        "return_timestamps": False,
        "alignment_heads": ct2_config.get("alignment_heads", []),
    }
    if ids["multilingual"]:  # English-only configs leave these out, as OpenAI's own do
        generation["lang_to_id"] = lang_to_id
        generation["task_to_id"] = {"transcribe": ids["transcribe"], "translate": ids["translate"]}
    return {"config.json": config, "generation_config.json": generation,
            "preprocessor_config.json": _preprocessor_config(dims["num_mel_bins"]),
            "tokenizer_config.json": _tokenizer_config()}


def convert_ct2_to_hf(ct2_dir: Path, output_dir: Path, model_bin: bytes | None = None) -> Path:
    """Write a Hugging Face Whisper directory converted from a CTranslate2 one. Returns output_dir.

    model_bin: the bytes of `model.bin` where they do not lie in ct2_dir (a model shipped in parts).
    """
    ct2_dir, output_dir = Path(ct2_dir), Path(output_dir)
    if model_bin is None:
        model_bin = (ct2_dir / "model.bin").read_bytes()
    ct2_config = json.loads((ct2_dir / "config.json").read_text())
    state_dict, dims = ct2_to_hf_state_dict(read_ct2_model(model_bin, ct2_dir / "model.bin"))

    tokenizer = read_vocabulary(ct2_dir)
    ids = _special_ids(tokenizer, dims["vocab_size"])
    _add_timestamp_tokens(tokenizer, ids["no_timestamps"] + 1)

    configs = _hf_configs(ct2_config, dims, ids)

    if output_dir.exists():
        raise ConversionError(f"{output_dir} already exists")
    tmp = output_dir.with_name(output_dir.name + ".partial")
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        save_safetensors(state_dict, tmp / "model.safetensors", metadata={"format": "pt"})
        tokenizer.save(str(tmp / "tokenizer.json"))
        for name, content in configs.items():
            (tmp / name).write_text(json.dumps(content, indent=2) + "\n")
        tmp.rename(output_dir)
    except BaseException:  # a full disk, an interruption: no half-converted model is left to be found
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return output_dir
