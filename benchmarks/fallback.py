"""What temperature fallback changes on long recordings: the default pair (int8 decoders, or float32
ones with --float-decoders, and the shipped assistant on CPU) transcribing each long recording greedily alone (--temperature 0
--temperature-increment-on-fallback none, what whisper-spec did before fallback) and with the
default fallback temperatures, main-only and speculative.

Reports per file and configuration: WER (Whisper's normalizers), the phrase repeated most times in
a row and how many times (a loop: bench.metrics.longest_repeat), windows decoded again, seconds;
and whether speculative and main-only transcripts are identical.

    python benchmarks/fallback.py --set fleurs --output benchmarks/results/fallback_fleurs_epyc_cpu.json
    python benchmarks/fallback.py --set longform --output benchmarks/results/fallback_longform_epyc_cpu.json
    python benchmarks/fallback.py --set fleurs --float-decoders --output benchmarks/results/fallback_fleurs_float_epyc_cpu.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch
from _common import command_line_pair, long_recordings, parse_args, progress, write_report

from whisper_spec.bench.metrics import longest_repeat, machine_info, word_error_rate
from whisper_spec.longform.pipeline import transcribe
from whisper_spec.options import DecodingOptions

CONFIGS = {  # name: (temperatures, speculative)
    "greedy main-only": (0.0, False),
    "fallback main-only": (DecodingOptions.temperature, False),
    "fallback speculative": (DecodingOptions.temperature, True),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", dest="recordings", choices=("longform", "fleurs"), default="fleurs")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--float-decoders", action="store_true", help="float32 decoders (--no-int8) instead of int8")
    parser.add_argument("--limit", type=int, default=None, help="first N recordings")
    parser.add_argument("--output", type=Path, default=None)
    args = parse_args(parser, limit=1, recordings="longform")

    workdir = tempfile.TemporaryDirectory()
    files, paths = long_recordings(args.recordings, Path(workdir.name))
    files, paths = files[: args.limit], paths[: args.limit]
    pair = command_line_pair("--device", "cpu", *(["--no-int8"] if args.float_decoders else []))
    report = {"machine": machine_info(torch.device("cpu")), "set": args.recordings, "batch_size": args.batch_size,
              "decoders": "float32" if args.float_decoders else "int8",
              "files": {}}
    for path, file in zip(paths, files):
        entry = report["files"][path.name] = {"language": file["language"]}
        texts = {}
        for name, (temperature, speculative) in CONFIGS.items():
            options = DecodingOptions(language=file["language"], temperature=temperature,
                                      speculation="auto" if speculative else "off")
            start = time.perf_counter()
            (result,) = transcribe(pair, [path], options, batch_size=args.batch_size)
            phrase, times = longest_repeat(result.text)
            texts[name] = result.text
            entry[name] = {
                "seconds": round(time.perf_counter() - start, 2),
                "wer": None if not file["text"] else round(word_error_rate([file["text"]], [result.text],
                                                                            [file["language"]]), 4),
                "longest_repeat": {"phrase": phrase, "times": times},
                "windows": result.stats.windows, "fallbacks": result.stats.fallbacks,
            }
        entry["speculative_equals_main_only"] = texts["fallback speculative"] == texts["fallback main-only"]
        progress({path.name: entry})
    return write_report(report, args.output)


if __name__ == "__main__":
    sys.exit(main())
