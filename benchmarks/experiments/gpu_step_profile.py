"""Where a decoding token's time goes on the GPU: main-only and speculative decoding of a few
LibriSpeech clips (batch 1 unless --batch) under torch.profiler, as the GPU issue's starting point.

Reports, per mode: wall seconds, generated tokens, wall microseconds a token, GPU busy microseconds
a token (kernels and copies on the device's timeline), host syncs (stream/event/device synchronize
and device-to-host copies), kernel launches and graph replays a token, kernels run on the device a
token (a graph's among them), the host operations and the device's kernels that take the most
time, and whether speculative decoding wrote main-only's tokens. Per variant: "flash-cross" (the
default on a GPU: cross-attention through flash attention, Decoder.flash_cross_attention),
"written-out" (all attention as CPU decoding runs it) and "compiled" (flash-cross, the round's steps
through torch.compile: DecodingOptions.compile). The attention kernels alone:
gpu_attention_kernels.py. Runs on CPU too (no device timeline there; fixed-shape rounds, compiled as
on a GPU, and unpacked linears) to check the script.
Usage: python benchmarks/experiments/gpu_step_profile.py --device cuda --output OUT.json [--clips 8]
       [--batch 1] [--variants flash-cross,written-out,compiled]
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import SPEECH, manifest_rows, save_report, write_report  # noqa: E402

from whisper_spec.decode.decoding import decode_windows  # noqa: E402
from whisper_spec.decode.encoding import pair_features  # noqa: E402
from whisper_spec.models.load import load_pair  # noqa: E402
from whisper_spec.models.model import Linear  # noqa: E402
from whisper_spec.models.platform import synchronize  # noqa: E402
from whisper_spec.options import DecodingOptions  # noqa: E402
from whisper_spec.speech.audio import load_audio  # noqa: E402

SYNC_CALLS = ("cudaStreamSynchronize", "cudaEventSynchronize", "cudaDeviceSynchronize")


def decode_all(pair, mels, options) -> list[list[int]]:
    tokens = [r.tokens for mel in mels for r in decode_windows(pair, mel, options)[0]]
    synchronize(pair.device)
    return tokens


def profile_mode(pair, mels, options) -> dict:
    texts = decode_all(pair, mels, options)  # warm: graphs captured, kernels chosen (and compiled)
    start = time.perf_counter()
    decode_all(pair, mels, options)
    wall = time.perf_counter() - start
    tokens = sum(map(len, texts))
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if pair.device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        decode_all(pair, mels, options)
    events = prof.key_averages()
    # kernels are their own entries on the device timeline; the ops that launched them count them too
    device_us = max(sum(e.self_device_time_total for e in events if e.device_type.name == "CUDA"),
                    sum(e.self_device_time_total for e in events if e.device_type.name == "CPU"))
    count = {e.key: e.count for e in events}
    syncs = sum(count.get(name, 0) for name in SYNC_CALLS)
    copies_to_host = sum(e.count for e in events if e.key == "aten::_local_scalar_dense")
    launches = sum(count.get(name, 0) for name in ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx"))
    host = sorted((e for e in events if e.device_type.name == "CPU"), key=lambda e: -e.self_cpu_time_total)[:15]
    # the device's own entries: kernels (those a graph replays among them) and copies
    kernels = [e for e in events if e.device_type.name == "CUDA"]
    on_device = sorted(kernels, key=lambda e: -e.self_device_time_total)[:15]
    return {
        "texts": texts, "wall_seconds": wall, "generated_tokens": tokens, "wall_us_a_token": 1e6 * wall / tokens,
        "device_busy_us_a_token": device_us / tokens if device_us else None,
        "host_syncs_a_token": syncs / tokens, "scalar_reads_a_token": copies_to_host / tokens,
        "kernel_launches_a_token": launches / tokens, "graph_replays_a_token": count.get("cudaGraphLaunch", 0) / tokens,
        "device_kernels_a_token": sum(e.count for e in kernels) / tokens,
        "top_host_ops": [{"op": e.key, "count": e.count, "self_us": e.self_cpu_time_total} for e in host],
        "top_device_kernels": [{"kernel": e.key[:120], "count": e.count, "device_us": e.self_device_time_total}
                               for e in on_device],
    }


def set_variant(pair, variant: str) -> None:
    """The pair's decoders as the variant has them; graphs captured for another variant dropped (a
    kept graph bakes its decoder's attention in)."""
    for decoder in (pair.main.decoder, pair.assistant.decoder):
        decoder.kept.whole_rounds.clear()
        decoder.kept.step_graphs = None
        decoder.flash_cross_attention = variant != "written-out"


def profile_variant(pair, mels, variant: str, report: dict, save) -> None:
    """report["modes"] each mode's profile, then whether the modes wrote the same tokens; save()
    after each mode, so a run cut short keeps what it measured."""
    set_variant(pair, variant)
    compiled = variant == "compiled"
    modes = {"main-only": DecodingOptions(language="en", speculation="off", compile=compiled),
             "speculative": DecodingOptions(language="en", speculation="on", compile=compiled)}
    start, texts = time.perf_counter(), []
    for name, options in modes.items():
        report.setdefault("modes", {})[name] = profile_mode(pair, mels, options)
        texts.append(report["modes"][name].pop("texts"))
        report["seconds_in_all"] = time.perf_counter() - start
        save()
    report.update(identical=sum(a == b for a, b in zip(*texts)), windows=len(texts[0]))
    save()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--clips", type=int, default=8)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--variants", default="flash-cross,written-out,compiled")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    device = torch.device(args.device)
    pair = load_pair("base", "default", device=device, dtype="float16" if device.type == "cuda" else "float32", int8=False)
    if device.type == "cpu":  # the GPU's code path: fixed-shape rounds of one shape, compiled step by step, plain linears
        pair.platform = replace(pair.platform, row_invariant=False, assistant_skips_padding=False, compiles="rounds")
        for module in (*pair.main.decoder.modules(), *pair.assistant.decoder.modules()):
            if isinstance(module, Linear):
                module.packed = None
    clips = [SPEECH / r["path"] for r in manifest_rows() if r["set"] == "librispeech"][: args.clips]
    mels = [pair_features(pair, [load_audio(path)])[0] for path in clips]
    batches = [torch.cat(mels[i : i + args.batch]) for i in range(0, len(mels), args.batch)]
    variants = args.variants.split(",")
    report = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu", "torch": torch.__version__,
              "clips": len(clips), "batch": args.batch, "variants": {}}
    for variant in variants:
        entry = report["variants"][variant] = {}
        try:
            profile_variant(pair, batches, variant, entry, functools.partial(save_report, report, args.output))
        except Exception as error:  # noqa: BLE001 - a variant that fails (a compiler error) is reported, the rest run
            entry["error"] = f"{type(error).__name__}: {str(error)[:2000]}"
    return write_report(report, args.output)


if __name__ == "__main__":
    raise SystemExit(main())
