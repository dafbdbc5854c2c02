"""What a speculative round costs inside the decode loop at batch 1, and how many tokens a round
of that cost must yield for a target speedup: the measurement behind docs/benchmarks.md's account of why
int8 decoders gain less from drafting than float32 ones.

For each decoder precision (the CPU default, int8 decoders, and float32) and each assistant (the
shipped one, or those given: a distilled decoder, a draft head): each clip is encoded once, then
decoded main-only and drafting in every round with each --draft-tokens (the order rotating clip by
clip), with the round's parts timed by the host clock (so CPU only: on CUDA it would time launches).
Reports per precision, assistant and draft tokens: the round's costs (stats.round_costs: a main step's ms, verification, a
draft step and the rest of a round in main steps, draft steps and tokens per round, the speedup in
decoding seconds), acceptance by draft position, and the tokens per round that rounds of these
costs would need for --target.

    python benchmarks/round_budget.py --clips 40 --output benchmarks/results/round_budget_amx_cpu.json
    python benchmarks/round_budget.py --set fleurs_de,fleurs_es,fleurs_fr,fleurs_pt --precisions int8 \
        --assistants default,ASSISTANT_DIR --draft-tokens 3,4
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from _common import SPEECH, command_line_pair, manifest_rows, parse_args, write_report
from tqdm import tqdm

import whisper_spec.decode.decoding as decoding
from whisper_spec.bench.metrics import machine_info
from whisper_spec.decode.encoding import encode
from whisper_spec.decode.stats import DecodingStats, round_costs
from whisper_spec.models.pair import decoder_precision
from whisper_spec.options import DecodingOptions
from whisper_spec.speech.audio import batch_features, load_audio


def measure(pair, mels: list[torch.Tensor], languages: list[str], draft_tokens: list[int], target: float, label: str
            ) -> dict:
    modes = {"main-only": DecodingOptions(speculation="off"),
             **{str(k): DecodingOptions(speculation="on", draft_tokens=k) for k in draft_tokens}}
    stats = {mode: DecodingStats() for mode in modes}
    identical = {mode: True for mode in modes}
    with torch.inference_mode():
        encoded = encode(pair, mels[0], None, DecodingStats())
        decoding.decode_encoded(pair, encoded, DecodingOptions(speculation="on"), languages=languages[:1])  # warm-up
        for i, (mel, language) in enumerate(zip(tqdm(mels, desc=label, unit="clip"), languages)):
            encoded = encode(pair, mel, None, DecodingStats())
            tokens = {}
            order = list(modes)[i % len(modes):] + list(modes)[: i % len(modes)]  # each mode first in turn
            for mode in order:
                results, clip_stats = decoding.decode_encoded(pair, encoded, modes[mode], languages=[language])
                stats[mode].add(clip_stats)
                tokens[mode] = results[0].tokens
            identical = {mode: same and tokens[mode] == tokens["main-only"] for mode, same in identical.items()}
    main_only = stats.pop("main-only")

    def drafting(mode: str, figures: DecodingStats) -> dict:
        costs = round_costs(figures, main_only)
        return {"decoding_seconds": round(figures.decoding_seconds, 3), "rounds": figures.main_forwards,
                "acceptance": round(figures.acceptance, 4),
                "acceptance_by_position": [round(a / d, 3) if d else None for a, d in
                                           zip(figures.accepted_by_position, figures.drafted_by_position)],
                "round_costs": costs,
                # a round costs round_in_main_steps; main-only pays a step for each of its tokens per step
                "tokens_per_round_for_target": round(target * costs["round_in_main_steps"]
                                                     * costs["main_only_tokens_per_step"], 3),
                "identical_to_main_only": identical[mode]}

    return {
        "main_decoder": decoder_precision(pair.main),
        "main_only": {"decoding_seconds": round(main_only.decoding_seconds, 3), "main_forwards": main_only.main_forwards},
        "target": target,
        "by_draft_tokens": {mode: drafting(mode, figures) for mode, figures in stats.items()},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clips", type=int, default=40, help="clips of each set (default: %(default)s)")
    parser.add_argument("--set", default="librispeech", help="manifest sets, comma-separated (default: %(default)s)")
    parser.add_argument("--precisions", default="int8,float32", help="decoder precisions (default: %(default)s)")
    parser.add_argument("--assistants", default="default",
                        help="assistants, comma-separated: 'default' (the shipped one) or directories (default: %(default)s)")
    parser.add_argument("--draft-tokens", default=str(DecodingOptions.draft_tokens),
                        help="drafts a round, comma-separated: each a configuration of its own (default: %(default)s)")
    parser.add_argument("--target", type=float, default=1.5, help="speedup in decoding seconds (default: %(default)s)")
    parser.add_argument("--output", type=Path, default=None)
    args = parse_args(parser, clips=2)

    sets, draft_tokens = args.set.split(","), [int(k) for k in args.draft_tokens.split(",")]
    rows = [r for name in sets for r in [r for r in manifest_rows() if r["set"] == name][: args.clips]]
    report = {"machine": machine_info(torch.device("cpu")), "sets": sets, "clips": len(rows), "batch_size": 1,
              "precisions": {}}
    flags_of = {"int8": ("int8 (default)", []), "float32": ("float32", ["--no-int8"])}
    for precision in args.precisions.split(","):
        label, flags = flags_of[precision]
        report["precisions"][label] = {}
        for assistant in args.assistants.split(","):
            pair = command_line_pair("--device", "cpu", *flags, *(["--assistant", assistant] if assistant != "default" else []))
            mels = [batch_features([load_audio(SPEECH / r["path"])], pair.main.dims.n_mels) for r in rows]
            report["precisions"][label][assistant] = measure(pair, mels, [r["language"] for r in rows], draft_tokens,
                                                             args.target, f"{label}, {assistant}")
    return write_report(report, args.output)


if __name__ == "__main__":
    raise SystemExit(main())
