"""Which encoder precision a CPU should default to, measured in one run: the same decoders (the
command line's defaults: int8 on bfloat16 rows, the shipped assistant, speculation auto) beside
encoders in each precision asked for (platform.default_encoder_precision picks bfloat16 where the CPU
has AMX, else int8).

Per utterance, batch 1: each pair encodes the window and decodes it, the pairs in an order rotated
utterance by utterance, so that the machine's drifts (and what one pair's kernels leave behind for
the next, such as a core's clock after AMX work) fall on all of them alike. Reports encoder,
decoding and total seconds per pair, WER per pair and set, and how many transcripts differ from
the float32 encoder's.

    python benchmarks/experiments/encoder_precision.py --output benchmarks/results/encoder_precision_amx_cpu.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/_common.py
from _common import SPEECH, manifest_rows, write_report  # noqa: E402
from tqdm import tqdm  # noqa: E402

from whisper_spec.bench.metrics import machine_info, word_error_rate  # noqa: E402
from whisper_spec.decode.decoding import decode_encoded  # noqa: E402
from whisper_spec.decode.encoding import encode  # noqa: E402
from whisper_spec.decode.stats import DecodingStats  # noqa: E402
from whisper_spec.models.load import DEFAULT_ASSISTANT, load_pair  # noqa: E402
from whisper_spec.models.pair import decoder_precision, encoder_precision  # noqa: E402
from whisper_spec.models.platform import default_precision  # noqa: E402
from whisper_spec.options import DecodingOptions  # noqa: E402
from whisper_spec.speech.audio import batch_features, load_audio  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="base")
    parser.add_argument("--precisions", default="bfloat16,int8,float32")
    parser.add_argument("--sets", default="librispeech")
    parser.add_argument("--limit", type=int, default=None, help="first N utterances of each set")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()

    sets, precisions = args.sets.split(","), args.precisions.split(",")
    rows = [r for s in sets for r in [r for r in manifest_rows() if r["set"] == s][: args.limit]]
    int8, dtype = default_precision(torch.device("cpu"))
    pairs = {p: load_pair(args.model, DEFAULT_ASSISTANT, int8=int8, dtype=dtype, encoder_precision=p) for p in precisions}
    seconds = {p: {"encoder": 0.0, "decoding": 0.0} for p in precisions}
    texts: dict[str, list[str]] = {p: [] for p in precisions}
    for i, row in enumerate(tqdm(rows, desc="encoder precision", unit="utt")):
        mel = batch_features([load_audio(SPEECH / row["path"])], pairs[precisions[0]].main.dims.n_mels)
        options = DecodingOptions(language=row.get("language"))
        for precision in precisions[i % len(precisions) :] + precisions[: i % len(precisions)]:
            pair, run = pairs[precision], DecodingStats()
            encoded = encode(pair, mel, None, run)
            results, run = decode_encoded(pair, encoded, options, stats=run)
            seconds[precision]["encoder"] += run.encoder_seconds
            seconds[precision]["decoding"] += run.decoding_seconds
            texts[precision].append(pair.main.tokenizer.decode(results[0].tokens))

    def wer(precision: str, subset: str | None = None) -> float:
        chosen = [j for j, r in enumerate(rows) if subset in (None, r["set"])]
        return round(100 * word_error_rate([rows[j]["text"] for j in chosen], [texts[precision][j] for j in chosen],
                                           [rows[j].get("language") for j in chosen]), 2)

    report = {
        "machine": machine_info(torch.device("cpu")), "model": args.model, "sets": sets, "utterances": len(rows),
        "decoders": {"main": decoder_precision(pairs[precisions[0]].main),
                     "assistant": decoder_precision(pairs[precisions[0]].assistant)},
        "encoder_precision": {p: encoder_precision(pairs[p].main) for p in precisions},
        "seconds": {p: {**{k: round(v, 2) for k, v in s.items()}, "total": round(sum(s.values()), 2)}
                    for p, s in seconds.items()},
        "wer": {p: {"all": wer(p), **({s: wer(p, s) for s in sets} if len(sets) > 1 else {})} for p in precisions},
        "transcripts_differing_from_float32": ({p: sum(a != b for a, b in zip(texts[p], texts["float32"]))
                                                for p in precisions} if "float32" in texts else None),
    }
    return write_report(report, args.output)


if __name__ == "__main__":
    raise SystemExit(main())
