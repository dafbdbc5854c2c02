"""Word timestamps against faster-whisper's, on the shared long-form LibriSpeech files.

Ours: `transcribe(..., DecodingOptions(word_timestamps=True))`, main-only and speculative (the
report says whether every word and time is identical between them). faster-whisper:
`word_timestamps=True` on the same CTranslate2 weights (float32, greedy, no conditioning on
previous text, no VAD). The two word sequences are matched on their lower-cased letters
(difflib), and the report gives the absolute differences of the matched words' start and end
times (median, 90th percentile), the share of words matched, and whether our words are in time
order.

    python benchmarks/word_timestamps.py --output benchmarks/results/word_timestamps_cpu.json
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from _common import SPEECH, manifest_rows, parse_args, progress, write_report

from whisper_spec.bench.metrics import machine_info
from whisper_spec.longform.pipeline import transcribe
from whisper_spec.models.load import load_pair
from whisper_spec.models.sources import ct2_source, default_assistant
from whisper_spec.options import DecodingOptions


def _key(word: str) -> str:
    return re.sub(r"[^a-z0-9']", "", word.lower())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="base")
    parser.add_argument("--limit", type=int, default=None, help="first N long-form files")
    parser.add_argument("--output", type=Path, default=None)
    args = parse_args(parser, limit=1)
    from faster_whisper import WhisperModel

    files = [r for r in manifest_rows() if r["set"] == "longform" and "librispeech" in r["path"]][: args.limit]
    pair = load_pair(args.model, default_assistant(args.model), int8=False)  # float32, as the peer
    peer = WhisperModel(str(ct2_source(args.model)), device="cpu", compute_type="float32",
                        cpu_threads=torch.get_num_threads())
    options = DecodingOptions(language="en", word_timestamps=True)
    report = {"machine": machine_info(pair.device), "model": args.model, "files": []}
    start_diffs, end_diffs, matched, total, identical, ordered = [], [], 0, 0, True, True
    for row in files:
        path = SPEECH / row["path"]
        ours = {}
        for mode, use in (("main", False), ("speculative", True)):
            (transcript,) = transcribe(pair, [path], options if use else replace(options, speculation="off"))
            ours[mode] = [w for s in transcript.segments for w in s.words]
        identical &= [w.as_dict() for w in ours["main"]] == [w.as_dict() for w in ours["speculative"]]
        words = ours["main"]
        ordered &= all(a.end <= b.start and a.start <= a.end for a, b in zip(words, words[1:]))
        segments, _ = peer.transcribe(str(path), language="en", beam_size=1, temperature=0.0, word_timestamps=True,
                                      condition_on_previous_text=False, vad_filter=False)
        theirs = [w for s in segments for w in s.words]
        matcher = difflib.SequenceMatcher(a=[_key(w.word) for w in words], b=[_key(w.word) for w in theirs],
                                          autojunk=False)
        pairs = [(words[block.a + i], theirs[block.b + i]) for block in matcher.get_matching_blocks()
                 for i in range(block.size)]
        file_starts = [abs(a.start - b.start) for a, b in pairs]
        start_diffs += file_starts
        end_diffs += [abs(a.end - b.end) for a, b in pairs]
        matched += len(pairs)
        total += max(len(words), len(theirs))
        entry = {"file": row["path"], "words": len(words), "faster_whisper_words": len(theirs), "matched": len(pairs),
                 "median_start_difference_s": float(np.median(file_starts)) if file_starts else None}
        report["files"].append(entry)
        progress(entry)
    report["summary"] = {
        "matched_words": matched,
        "matched_fraction": matched / total if total else None,
        "median_start_difference_s": float(np.median(start_diffs)),
        "p90_start_difference_s": float(np.percentile(start_diffs, 90)),
        "median_end_difference_s": float(np.median(end_diffs)),
        "p90_end_difference_s": float(np.percentile(end_diffs, 90)),
        "words_in_time_order": ordered,
        "speculative_identical_to_main": identical,
    }
    return write_report(report, args.output)


if __name__ == "__main__":
    sys.exit(main())
