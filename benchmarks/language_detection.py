"""Language detection on the shared labelled speech: among every language the model knows, and among
the languages a job names (`--language en,de,...`, DecodingOptions.language_candidates).

Each clip's language is detected as `whisper-spec transcribe` detects it (the main model, first
window), among all languages and among each candidate list (by default the five FLEURS languages,
and every language of the labelled sets); the report gives per set how many clips came out in
another language each way, and which. A clip whose language is not a candidate is left out of that
way's count.

    python benchmarks/language_detection.py --output benchmarks/results/language_detection_epyc_cpu.json
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

from _common import SPEECH, manifest_rows, parse_args, progress, write_report

from whisper_spec.bench.metrics import machine_info
from whisper_spec.decode.encoding import most_likely, pair_features, window_language_probabilities
from whisper_spec.models.load import load_pair
from whisper_spec.models.pair import decoder_precision
from whisper_spec.speech.audio import N_SAMPLES, load_audio


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="base")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--limit", type=int, default=None, help="first N files of each set")
    parser.add_argument("--candidates", action="append", default=None, metavar="LANG,LANG,...",
                        help="a list to detect among, repeatable (default: de,en,es,fr,pt and the sets' languages)")
    parser.add_argument("--output", type=Path, default=None)
    args = parse_args(parser, limit=2)

    pair = load_pair(args.model, None)
    by_set = defaultdict(list)
    for row in manifest_rows():  # the labelled sets (training audio is not measured on)
        if not row["set"].startswith("unlabeled"):
            by_set[row["set"]].append(row)
    rows = [row for name in sorted(by_set) for row in by_set[name][: args.limit]]
    lists = [tuple(c.split(",")) for c in args.candidates or ["de,en,es,fr,pt", ",".join(sorted({r["language"] for r in rows}))]]
    ways = {"all": None, **{",".join(c): c for c in lists}}
    detected = {way: [] for way in ways}
    for start in range(0, len(rows), args.batch_size):
        batch = rows[start: start + args.batch_size]
        first_windows = [load_audio(SPEECH / row["path"])[:N_SAMPLES] for row in batch]
        codes, probabilities = window_language_probabilities(pair, pair_features(pair, first_windows)[0])
        for way, candidates in ways.items():  # among candidates: the likeliest of their columns, one encoding for all
            kept = codes if candidates is None else list(candidates)
            detected[way] += most_likely(kept, probabilities[:, [codes.index(code) for code in kept]])[0]
    report = {"machine": machine_info(pair.device), "model": args.model, "decoders": decoder_precision(pair.main),
              "sets": {}, "summary": {}}
    for name in sorted({row["set"] for row in rows}):
        entry = {}
        for way, candidates in ways.items():
            indices = [i for i, row in enumerate(rows) if row["set"] == name
                       and (candidates is None or row["language"] in candidates)]
            wrong = {rows[i]["path"]: detected[way][i] for i in indices if detected[way][i] != rows[i]["language"]}
            if indices:
                entry[way] = {"files": len(indices), "wrong": len(wrong), "misdetected": wrong}
        report["sets"][name] = entry
        progress({name: {way: {"files": e["files"], "wrong": e["wrong"]} for way, e in entry.items()}})
    for way in ways:
        counted = [entry[way] for entry in report["sets"].values() if way in entry]
        report["summary"][way] = {"files": sum(e["files"] for e in counted), "wrong": sum(e["wrong"] for e in counted)}
    return write_report(report, args.output)


if __name__ == "__main__":
    sys.exit(main())
