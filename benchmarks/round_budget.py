"""What a speculative round costs inside the decode loop at batch 1, and how many tokens a round
of that cost must yield for a target speedup: the measurement behind docs/benchmarks.md's account of why
int8 decoders gain less from drafting than float32 ones.

For each decoder precision (the CPU default, int8 decoders, and float32) and each assistant (the
shipped one, or those given: a distilled decoder, a draft head): each clip is encoded once, then
decoded main-only and drafting in every round (the order alternating clip by clip), with
speculative.draft and speculative.verify timed by the host clock (so CPU only: on CUDA it would time
launches). Reports per precision and assistant: main-only ms per token; per round the verification's
and the drafts' ms, assistant steps and tokens; a draft step in main steps; acceptance by draft
position; the speedup in decoding seconds; and the tokens per round that rounds of these costs
would need for --target.

    python benchmarks/round_budget.py --clips 40 --output benchmarks/results/round_budget_amx_cpu.json
    python benchmarks/round_budget.py --set fleurs_de,fleurs_es,fleurs_fr,fleurs_pt --precisions int8 \
        --assistants default,ASSISTANT_DIR
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections import defaultdict
from pathlib import Path

import torch
from _common import SPEECH, command_line_pair, manifest_rows, parse_args, write_report
from tqdm import tqdm

import whisper_spec.decoding as decoding
import whisper_spec.speculative as speculative
from whisper_spec.audio import batch_features, load_audio
from whisper_spec.bench.metrics import machine_info
from whisper_spec.encoding import encode
from whisper_spec.options import DecodingOptions
from whisper_spec.pair import decoder_precision
from whisper_spec.stats import DecodingStats

PARTS = ("draft", "verify")  # the functions of speculative's round that are timed


@contextlib.contextmanager
def timed_parts(seconds: dict[str, float]):
    """speculative's round parts wrapped to add their host seconds to `seconds` (speculative_decode
    looks them up at each call, so the wrappers take effect), restored after."""
    originals = {name: getattr(speculative, name) for name in PARTS}

    def timed(name, function):
        def call(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                seconds[name] += time.perf_counter() - start
        return call

    for name, function in originals.items():
        setattr(speculative, name, timed(name, function))
    try:
        yield
    finally:
        for name, function in originals.items():
            setattr(speculative, name, function)


def measure(pair, mels: list[torch.Tensor], languages: list[str], target: float, label: str) -> dict:
    modes = {"main-only": "off", "drafting": "on"}
    seconds = {mode: defaultdict(float) for mode in modes}
    stats = {mode: DecodingStats() for mode in modes}
    tokens_equal = True
    with torch.inference_mode():
        encoded = encode(pair, mels[0], None, DecodingStats())
        decoding.decode_encoded(pair, encoded, DecodingOptions(speculation="on"), languages=languages[:1])  # warm-up
        for i, (mel, language) in enumerate(zip(tqdm(mels, desc=label, unit="clip"), languages)):
            encoded = encode(pair, mel, None, DecodingStats())
            tokens = {}
            for mode in (list(modes) if i % 2 == 0 else list(modes)[::-1]):
                with timed_parts(seconds[mode]):
                    results, clip_stats = decoding.decode_encoded(
                        pair, encoded, DecodingOptions(speculation=modes[mode]), languages=[language])
                stats[mode].add(clip_stats)
                tokens[mode] = results[0].tokens
            tokens_equal &= tokens["main-only"] == tokens["drafting"]
    main_only, drafting = stats["main-only"], stats["drafting"]
    rounds = drafting.main_forwards
    ms_per_token = 1000 * main_only.decoding_seconds / main_only.main_forwards
    round_ms = 1000 * drafting.decoding_seconds / rounds
    return {
        "main_decoder": decoder_precision(pair.main),
        "main_only": {"decoding_seconds": round(main_only.decoding_seconds, 3), "main_forwards": main_only.main_forwards,
                      "ms_per_token": round(ms_per_token, 3)},
        "drafting": {"decoding_seconds": round(drafting.decoding_seconds, 3), "rounds": rounds,
                     "acceptance": round(drafting.acceptance, 4),
                     "tokens_per_round": round(drafting.generated / rounds, 3),
                     "assistant_steps_per_round": round(drafting.assistant_forwards / rounds, 3),
                     "round_ms": round(round_ms, 3),
                     "verify_ms_per_round": round(1000 * seconds["drafting"]["verify"] / rounds, 3),
                     "draft_ms_per_round": round(1000 * seconds["drafting"]["draft"] / rounds, 3),
                     "draft_ms_per_assistant_step": round(1000 * seconds["drafting"]["draft"] / drafting.assistant_forwards, 3),
                     "acceptance_by_position": [round(a / d, 3) if d else None for a, d in
                                                zip(drafting.accepted_by_position, drafting.drafted_by_position)]},
        "speedup": round(main_only.decoding_seconds / drafting.decoding_seconds, 3),
        # a round yields its tokens for round_ms; main-only pays ms_per_token for each
        "verify_in_one_token_steps": round(1000 * seconds["drafting"]["verify"] / rounds / ms_per_token, 3),
        "draft_step_in_one_token_steps": round(1000 * seconds["drafting"]["draft"] / drafting.assistant_forwards
                                               / ms_per_token, 3),
        "target": target,
        "tokens_per_round_for_target": round(target * round_ms / ms_per_token, 3),
        "identical_to_main_only": tokens_equal,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clips", type=int, default=40, help="clips of each set (default: %(default)s)")
    parser.add_argument("--set", default="librispeech", help="manifest sets, comma-separated (default: %(default)s)")
    parser.add_argument("--precisions", default="int8,float32", help="decoder precisions (default: %(default)s)")
    parser.add_argument("--assistants", default="default",
                        help="assistants, comma-separated: 'default' (the shipped one) or directories (default: %(default)s)")
    parser.add_argument("--target", type=float, default=1.5, help="speedup in decoding seconds (default: %(default)s)")
    parser.add_argument("--output", type=Path, default=None)
    args = parse_args(parser, clips=2)

    sets = args.set.split(",")
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
            report["precisions"][label][assistant] = measure(pair, mels, [r["language"] for r in rows], args.target,
                                                             f"{label}, {assistant}")
    return write_report(report, args.output)


if __name__ == "__main__":
    raise SystemExit(main())
