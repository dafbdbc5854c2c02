"""Where drafting pays, measured in one run: the data behind
platform.AUTO_MAX_DRAFT_FRAMES for this device and the default decoders.

One pair (the command line's defaults: the shipped assistant, int8 decoders on CPU, float16 on
CUDA). Per batch of clips, for each batch size: the batch is encoded once, then decoded main-only,
drafting in every round and with the shipped auto rule, the policies in an order rotated batch by
batch so that the machine's drifts weigh on all alike.
Reports decoding seconds per policy and batch size, each policy over main-only, and whether every
policy's tokens equal main-only's (they must: a policy only decides when the assistant drafts).
--set longform: the long-form recordings cut into consecutive 30 s windows, decoded with timestamps
as the long-form pipeline decodes them (full windows: every row decodes for long).

    python benchmarks/speculation_policy.py --batch-sizes 2,4 --output benchmarks/results/speculation_policy_amx_cpu.json
    python benchmarks/speculation_policy.py --set longform --batch-sizes 2,3,4 --output benchmarks/results/speculation_policy_longform_amx_cpu.json
    python benchmarks/speculation_policy.py --batch-sizes 1,2,4 --device cuda --output benchmarks/results/gpu_h200_cuda_int8_unsplit/speculation_policy_h200.json
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from _common import SPEECH, command_line_pair, manifest_rows, parse_args, write_report
from tqdm import tqdm

from whisper_spec.bench.metrics import machine_info
from whisper_spec.decode.decoding import decode_encoded
from whisper_spec.decode.encoding import encode
from whisper_spec.decode.stats import DecodingStats
from whisper_spec.models.pair import decoder_precision
from whisper_spec.options import DecodingOptions
from whisper_spec.speech.audio import N_SAMPLES, batch_features, load_audio


def _decode(pair, encoded, languages: list[str | None], policy: str, timestamps: bool) -> tuple[list[list[int]], float]:
    """Tokens and decoding seconds of the encoded batch under a speculation policy (off, on or auto)."""
    options = DecodingOptions(speculation=policy, timestamps=timestamps)
    results, stats = decode_encoded(pair, encoded, options, languages=languages)
    return [r.tokens for r in results], stats.decoding_seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", default="librispeech", help="manifest set (default: %(default)s)")
    parser.add_argument("--batch-sizes", default="2,4")
    parser.add_argument("--limit", type=int, default=None, help="first N utterances")
    parser.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: cuda when available)")
    parser.add_argument("--output", type=Path, default=None)
    args = parse_args(parser, limit=2, batch_sizes="2")

    long_form = args.set == "longform"
    sets = ("longform", "unlabeled_longform") if long_form else (args.set,)
    rows = [r for r in manifest_rows() if r["set"] in sets][: args.limit]
    pair = command_line_pair(*(["--device", args.device] if args.device else []))
    clips = [load_audio(SPEECH / r["path"]) for r in rows]
    if long_form:  # consecutive windows of each recording, in English
        rows = [{"language": "en"} for clip in clips for _ in range(0, len(clip), N_SAMPLES)]
        clips = [clip[start : start + N_SAMPLES] for clip in clips for start in range(0, len(clip), N_SAMPLES)]
    mels = [batch_features([clip], pair.main.dims.n_mels) for clip in clips]
    report = {"machine": machine_info(pair.device), "set": args.set, "windows": len(rows), "timestamps": long_form,
              "main": decoder_precision(pair.main), "assistant": decoder_precision(pair.assistant),
              "auto_max_draft_frames": pair.platform.auto_max_draft_frames, "batch_sizes": {}}
    for batch_size in (int(b) for b in args.batch_sizes.split(",")):
        policies = ["off", "on", "auto"]
        seconds = dict.fromkeys(policies, 0.0)
        identical = dict.fromkeys(policies, True)
        batches = [(mels[i : i + batch_size], rows[i : i + batch_size]) for i in range(0, len(rows), batch_size)]
        for i, (batch_mels, batch_rows) in enumerate(tqdm(batches, desc=f"batch {batch_size}", unit="batch")):
            languages = [r.get("language") for r in batch_rows]
            encoded = encode(pair, torch.cat(batch_mels), None, DecodingStats())
            if i == 0:
                _decode(pair, encoded, languages, "off", long_form)  # warm-up
            tokens = {}
            for policy in policies[i % len(policies) :] + policies[: i % len(policies)]:
                tokens[policy], took = _decode(pair, encoded, languages, policy, long_form)
                seconds[policy] += took
            for policy in policies:
                identical[policy] &= tokens[policy] == tokens["off"]
        report["batch_sizes"][batch_size] = {
            "decoding_seconds": {p: round(s, 2) for p, s in seconds.items()},
            "over_main_only": {p: round(seconds["off"] / s, 3) for p, s in seconds.items()},
            "identical_to_main_only": identical,
        }
    return write_report(report, args.output)


if __name__ == "__main__":
    raise SystemExit(main())
