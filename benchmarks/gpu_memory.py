"""Memory of the loaded pair and peak memory while decoding, float against int8 decoder linears.

On CUDA: bytes allocated by loading each pair (base + its shipped assistant) and the peak while it
decodes LibriSpeech clips at batch 4 (torch.cuda.max_memory_allocated, above what was allocated
before loading). On CPU (the dry run) the same fields from parameter bytes and peak RSS, to check
the script. Usage: python benchmarks/gpu_memory.py --device cuda --output OUT/memory.json [--limit N]
"""

from __future__ import annotations

import argparse
import gc
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import SPEECH, manifest_rows, parse_args, write_report  # noqa: E402

from whisper_spec.bench.metrics import PeakMemory  # noqa: E402
from whisper_spec.decode.decoding import decode_windows  # noqa: E402
from whisper_spec.decode.encoding import pair_features  # noqa: E402
from whisper_spec.models.load import load_pair  # noqa: E402
from whisper_spec.models.quantize import weight_bytes  # noqa: E402
from whisper_spec.options import DecodingOptions  # noqa: E402
from whisper_spec.speech.audio import load_audio  # noqa: E402


def allocated(device: torch.device) -> int:
    return torch.cuda.memory_allocated(device) if device.type == "cuda" else PeakMemory.rss()


def measure(device: torch.device, dtype: str, int8: bool, clips: list[Path]) -> dict:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    before = allocated(device)
    pair = load_pair("base", "default", device=device, dtype=dtype, int8=int8)
    loaded = allocated(device) - before
    main_bytes = weight_bytes(pair.main.decoder)
    # both decoders in one count, so the tensors the assistant shares with the main model count once
    decoder_bytes = weight_bytes(torch.nn.ModuleList([pair.main.decoder, pair.assistant.decoder]))
    with PeakMemory(device) as memory:
        for start in range(0, len(clips), 4):
            mel, _ = pair_features(pair, [load_audio(p) for p in clips[start : start + 4]])
            decode_windows(pair, mel, DecodingOptions(language="en"))
    result = {"dtype": dtype, "int8": int8, "int8_kernel": pair.int8_kernel, "loaded_bytes": loaded,
              "main_decoder_weight_bytes": main_bytes,
              "decoder_weight_bytes": decoder_bytes, "peak_decoding_bytes": memory.peak - before,
              "peak_kind": "cuda_max_allocated" if device.type == "cuda" else "process_rss"}
    del pair
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--limit", type=int, default=8, help="LibriSpeech clips decoded (default: %(default)s)")
    parser.add_argument("--output", type=Path, default=None)
    args = parse_args(parser, limit=2)
    device = torch.device(args.device)
    clips = [SPEECH / r["path"] for r in manifest_rows() if r["set"] == "librispeech"][: args.limit]
    float_dtype = "float16" if device.type == "cuda" else "float32"
    runs = {"float": measure(device, float_dtype, False, clips), "int8": measure(device, "bfloat16", True, clips)}
    reduction = {key: 1 - runs["int8"][key] / runs["float"][key]
                 for key in ("main_decoder_weight_bytes", "decoder_weight_bytes", "loaded_bytes", "peak_decoding_bytes")
                 if runs["float"][key] > 0}
    return write_report({"device": str(device), "clips": len(clips), "runs": runs, "int8_reduction": reduction},
                        args.output)


if __name__ == "__main__":
    raise SystemExit(main())
