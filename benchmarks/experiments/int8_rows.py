"""Which activations a CPU int8 main decoder should take, measured in one run: bfloat16 rows on aten's
int8-weight kernel (the default, platform.cpu_int8_dtype), against float32 rows, where every int8 linear
quantizes them per row for fbgemm (quantize.row_int8_mm). Both pairs carry the shipped
assistant (drafting in bfloat16 on aten's kernel either way) and the int8 encoder.

Per utterance, batch 1: each pair encodes the window once, then decodes it main-only and
speculative, the four decodings in an order rotated utterance by utterance, so that the machine's
drifts fall on all of them alike. Reports decoding seconds per configuration and set, speculative
over main-only for each pair, each pair's speculative output against its own main-only output
(identical, token for token) and where the two pairs' transcripts differ.

    python benchmarks/experiments/int8_rows.py --sets librispeech,fleurs_de,fleurs_es,fleurs_fr,fleurs_pt \
        --output benchmarks/results/int8_rows_cpu.json
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/_common.py
from _common import SPEECH, manifest_rows, write_report  # noqa: E402
from tqdm import tqdm  # noqa: E402

from whisper_spec.bench.metrics import machine_info  # noqa: E402
from whisper_spec.decode.decoding import decode_encoded  # noqa: E402
from whisper_spec.decode.encoding import encode  # noqa: E402
from whisper_spec.decode.stats import DecodingStats  # noqa: E402
from whisper_spec.models.load import DEFAULT_ASSISTANT, load_pair  # noqa: E402
from whisper_spec.models.pair import decoder_precision  # noqa: E402
from whisper_spec.options import DecodingOptions  # noqa: E402
from whisper_spec.speech.audio import batch_features, load_audio  # noqa: E402

PRECISIONS = {"float32 rows, row-int8": "float32", "bfloat16 rows, aten int8pack_mm": "bfloat16"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="base")
    parser.add_argument("--sets", default="librispeech,fleurs_de,fleurs_es,fleurs_fr,fleurs_pt")
    parser.add_argument("--limit", type=int, default=None, help="first N utterances of each set")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()

    sets = args.sets.split(",")
    rows = [r for s in sets for r in [r for r in manifest_rows() if r["set"] == s][: args.limit]]
    pairs = {name: load_pair(args.model, DEFAULT_ASSISTANT, int8=True, dtype=dtype) for name, dtype in PRECISIONS.items()}
    configs = [(name, speculative) for speculative in (False, True) for name in pairs]
    label = {config: f"{config[0]}, {'speculative' if config[1] else 'main-only'}" for config in configs}
    seconds = {s: dict.fromkeys(label.values(), 0.0) for s in sets}
    stats = {config: DecodingStats() for config in configs}
    tokens = {config: [] for config in configs}
    for i, row in enumerate(tqdm(rows, desc="int8 rows", unit="utt")):
        mel = batch_features([load_audio(SPEECH / row["path"])], pairs[configs[0][0]].main.dims.n_mels)
        options = DecodingOptions(language=row.get("language"))
        encoded = {name: encode(pair, mel, None, DecodingStats()) for name, pair in pairs.items()}
        for name, speculative in configs[i % 4 :] + configs[: i % 4]:
            results, run = decode_encoded(pairs[name], encoded[name],
                                          options if speculative else replace(options, speculation="off"))
            seconds[row["set"]][label[name, speculative]] += run.decoding_seconds
            stats[name, speculative].add(run)
            tokens[name, speculative].append(results[0].tokens)
    total = {label[c]: round(sum(seconds[s][label[c]] for s in sets), 2) for c in configs}
    report = {
        "machine": machine_info(torch.device("cpu")), "model": args.model, "sets": sets, "utterances": len(rows),
        "precisions": {name: {"main": decoder_precision(pair.main), "assistant": decoder_precision(pair.assistant),
                              "int8_kernel": pair.int8_kernel} for name, pair in pairs.items()},
        "decoding_seconds": total,
        "decoding_seconds_by_set": {s: {k: round(v, 2) for k, v in seconds[s].items()} for s in sets},
        "speculative_over_main_only": {name: round(total[label[name, False]] / total[label[name, True]], 3)
                                       for name in pairs},
        "speculative_by_set": {s: {name: round(seconds[s][label[name, False]] / seconds[s][label[name, True]], 3)
                                   for name in pairs} for s in sets},
        "acceptance": {name: stats[name, True].acceptance for name in pairs},
        "identical_to_main_only": {name: tokens[name, True] == tokens[name, False] for name in pairs},
        "transcripts_differing_between_pairs": sum(a != b for a, b in zip(*(tokens[name, False] for name in pairs))),
    }
    return write_report(report, args.output)


if __name__ == "__main__":
    raise SystemExit(main())
