"""How much the long-form windows' overlap costs and what it buys: the default pair (int8 decoders
and the shipped assistant on CPU, drafting as --speculation auto decides) transcribing the long
recordings with each overlap of --overlaps, at each batch size.

The overlaps take turns file by file (the order rotating), so a drift in the machine's speed weighs
on all alike. Reports per batch size and overlap: seconds, windows decoded, WER of the stitched
transcripts (Whisper's English normalizer with the spelling table), WER by file, how many
transcripts equal the first overlap's, and where each file's last segment ends against its last
speech. The overlap is what lets consecutive windows agree on a stretch of tokens to cut in; less of
it means fewer windows (less decoding) and less to align on.

    python benchmarks/longform_overlap.py --overlaps 10,6,4 --batch-sizes 1,4 --output benchmarks/results/longform_overlap_amx_cpu.json
    python benchmarks/longform_overlap.py --set fleurs --overlaps 10,6,4 --batch-sizes 4 --output benchmarks/results/longform_overlap_fleurs_amx_cpu.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch
from _common import command_line_pair, last_speech, long_recordings, progress, write_report

from whisper_spec.bench.metrics import machine_info, word_error_rate
from whisper_spec.options import ChunkingOptions, DecodingOptions
from whisper_spec.pipeline import transcribe


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", dest="recordings", choices=("longform", "fleurs"), default="longform")
    parser.add_argument("--overlaps", default="10,6,4", help="seconds, comma-separated; the first is the reference")
    parser.add_argument("--batch-sizes", default="1,4")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()

    workdir = tempfile.TemporaryDirectory()
    files, paths = long_recordings(args.recordings, Path(workdir.name))
    languages = {str(path): f["language"] for path, f in zip(paths, files)}
    pair = command_line_pair("--device", "cpu")
    options = DecodingOptions()
    overlaps = [float(o) for o in args.overlaps.split(",")]
    labeled = [i for i, f in enumerate(files) if f["text"]]
    ends = {path.name: last_speech(path) for path in paths}
    report = {"machine": machine_info(torch.device("cpu")), "set": args.recordings, "files": len(paths),
              "audio_seconds": sum(f["duration_s"] for f in files), "results": []}

    def run(path: Path, overlap: float, batch: int):
        (result,) = transcribe(pair, [path], options, batch_size=batch, languages=languages,
                               chunking=ChunkingOptions(overlap=overlap))
        return result

    for batch in [int(b) for b in args.batch_sizes.split(",")]:
        run(paths[0], overlaps[0], batch)  # warm-up
        seconds = dict.fromkeys(overlaps, 0.0)
        results = {overlap: [] for overlap in overlaps}
        for index, path in enumerate(paths):
            for overlap in overlaps[index % len(overlaps):] + overlaps[:index % len(overlaps)]:
                start = time.perf_counter()
                results[overlap].append(run(path, overlap, batch))
                seconds[overlap] += time.perf_counter() - start
        entry = {"batch_size": batch, "overlaps": {}}
        for overlap in overlaps:
            texts = [r.text for r in results[overlap]]
            entry["overlaps"][str(overlap)] = {
                "seconds": round(seconds[overlap], 2),
                "windows": sum(r.stats.windows for r in results[overlap]),
                "wer": word_error_rate([files[i]["text"] for i in labeled], [texts[i] for i in labeled],
                                       [files[i]["language"] for i in labeled]),
                "wer_by_file": {paths[i].name: round(word_error_rate([files[i]["text"]], [texts[i]],
                                                                     [files[i]["language"]]), 4) for i in labeled},
                "identical_to_first_overlap": sum(a.text == b.text for a, b in zip(results[overlap], results[overlaps[0]])),
                "last_segment_end_minus_last_speech": {
                    path.name: round((r.segments[-1].end if r.segments else 0.0) - ends[path.name], 2)
                    for path, r in zip(paths, results[overlap])},
            }
        report["results"].append(entry)
        progress(entry)
    return write_report(report, args.output)


if __name__ == "__main__":
    sys.exit(main())
