"""Main-only vs speculative decoding time and acceptance on shared LibriSpeech clips (CPU figures
for the core issue). Runs A and B interleaved in one process after a warm-up and reports medians.

    python benchmarks/core_speed.py --clips 16 --repeats 3 --output benchmarks/results/core_speed_cpu.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch
from _common import SPEECH, machine, manifest_rows, progress, write_report

from whisper_spec.audio import load_audio, log_mel_spectrogram, pad_or_trim
from whisper_spec.decoding import DecodingOptions, decode_windows
from whisper_spec.loader import WhisperPair, decoder_subset, load_pair


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="base")
    parser.add_argument("--assistant-layers", default="0,5", help="decoder layers of the main model kept as assistant")
    parser.add_argument("--clips", type=int, default=16)
    parser.add_argument("--batch-sizes", default="1,4")
    parser.add_argument("--draft-tokens", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()

    paths = [SPEECH / r["path"] for r in manifest_rows() if r["set"] == "librispeech"][: args.clips]
    pair = load_pair(args.model, dtype=args.dtype)
    layers = [int(i) for i in args.assistant_layers.split(",")]
    pair = WhisperPair(pair.main, decoder_subset(pair.main, layers), pair.device, pair.dtype)
    audio = torch.stack([pad_or_trim(torch.from_numpy(load_audio(p))) for p in paths])
    mel = log_mel_spectrogram(audio, pair.main.dims.n_mels)
    options = DecodingOptions(language="en", draft_tokens=args.draft_tokens)

    report = {
        "machine": machine(), "model": args.model, "assistant": f"{args.model} decoder layers {layers} (untrained)",
        "dtype": args.dtype, "clips": len(paths), "draft_tokens": args.draft_tokens, "results": [],
    }
    for batch in [int(b) for b in args.batch_sizes.split(",")]:
        decode_windows(pair, mel[:batch], options, use_assistant=False)  # warm-up
        decode_windows(pair, mel[:batch], options)
        times = {"main": [], "speculative": []}
        encoder = []
        identical = drafted = accepted = 0
        for _ in range(args.repeats):
            outputs = {}
            for name, use in (("main", False), ("speculative", True)):
                total = 0.0
                outputs[name] = []
                for start in range(0, len(paths), batch):
                    out, stats = decode_windows(pair, mel[start : start + batch], options, use_assistant=use)
                    total += stats.decoding_seconds
                    encoder.append(stats.encoder_seconds / stats.windows)
                    outputs[name] += out
                    if use:
                        drafted += stats.drafted
                        accepted += stats.accepted
                times[name].append(total)
            identical = sum(a.tokens == b.tokens for a, b in zip(outputs["main"], outputs["speculative"]))
        main_s, spec_s = statistics.median(times["main"]), statistics.median(times["speculative"])
        report["results"].append({
            "batch_size": batch, "main_decoding_seconds": main_s, "speculative_decoding_seconds": spec_s,
            "speedup": main_s / spec_s, "acceptance": accepted / drafted if drafted else None,
            "encoder_seconds_per_window": statistics.median(encoder),
            "identical_fraction": identical / len(paths),
        })
        progress(report["results"][-1])
    return write_report(report, args.output)


if __name__ == "__main__":
    sys.exit(main())
