"""Long-form speed and WER on the shared long-form set: main-only vs speculative, per batch size.

Runs the chunked pipeline over the shared long-form files (7 LibriSpeech test-other chapters,
a TED excerpt, the 128 s mp3), main-only and speculative per batch size, and reports
real-time factors, speedups, whether the transcripts are identical, and WER of the stitched
transcripts (Whisper's English normalizer with the spelling table). The two modes alternate file
by file (and which goes first alternates too), so a drift in the machine's speed during the run
weighs on both alike; windows are batched within a file.

Quality of the long-form output: per file, where its last segment ends against where its last
speech does (the last 10 ms with a sample above -34 dBFS), and for the LibriSpeech chapters the
stitched WER against the WER of the same utterances decoded one by one.

    python benchmarks/longform.py --batch-sizes 1,2,4 --output benchmarks/results/longform_cpu.json

Decoders as the command line loads them: int8 on CPU where that is the default (--no-int8: float32).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
from _common import SPEECH, manifest_rows, progress, write_report

from whisper_spec.audio import SAMPLE_RATE, load_audio
from whisper_spec.bench.metrics import machine_info, word_error_rate
from whisper_spec.load import default_precision, load_pair
from whisper_spec.options import DecodingOptions
from whisper_spec.pair import decoder_precision
from whisper_spec.pipeline import transcribe
from whisper_spec.sources import default_assistant


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="base")
    parser.add_argument("--assistant", default=None, help="default: the model's distilled assistant")
    parser.add_argument("--batch-sizes", default="1,2,4")
    parser.add_argument("--draft-tokens", type=int, default=DecodingOptions.draft_tokens)
    parser.add_argument("--int8", action=argparse.BooleanOptionalAction, default=None,
                        help="int8 decoder linears (default: as whisper-spec transcribe, on for cpu)")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()

    files = [r for r in manifest_rows() if r["set"] in ("longform", "unlabeled_longform")]
    paths = [SPEECH / r["path"] for r in files]
    assistant = args.assistant or default_assistant(args.model)
    if assistant is None:
        parser.error(f"{args.model} has no distilled assistant: give --assistant")
    int8, dtype = default_precision(torch.device("cpu"), args.int8)
    pair = load_pair(args.model, assistant, int8=int8, dtype=dtype)
    options = DecodingOptions(language="en", draft_tokens=args.draft_tokens)
    audio_seconds = sum(r["duration_s"] for r in files)
    list(transcribe(pair, paths[:1], options, use_assistant=False))  # warm-up

    report = {"machine": machine_info(pair.device), "model": args.model, "assistant": str(assistant),
              "decoder_precision": decoder_precision(pair.main), "files": len(paths), "audio_seconds": audio_seconds,
              "results": []}
    for batch in [int(b) for b in args.batch_sizes.split(",")]:
        entry = {"batch_size": batch}
        seconds = {"main": 0.0, "speculative": 0.0}
        texts = {"main": [], "speculative": []}
        ends = []
        stats = []
        for index, path in enumerate(paths):
            modes = [("main", False), ("speculative", True)]
            for name, use in modes if index % 2 == 0 else modes[::-1]:
                start = time.perf_counter()
                (result,) = transcribe(pair, [path], options, batch_size=batch, use_assistant=use)
                seconds[name] += time.perf_counter() - start
                texts[name].append(result.text)
                if use:
                    stats.append(result.stats)
                    ends.append(result.segments[-1].end if result.segments else 0.0)
        drafted = sum(s.drafted for s in stats)
        entry["acceptance"] = sum(s.accepted for s in stats) / drafted if drafted else None
        for name in seconds:
            entry[f"{name}_seconds"] = seconds[name]
            entry[f"{name}_real_time_factor"] = seconds[name] / audio_seconds
            labeled = [(f["text"], t) for f, t in zip(files, texts[name]) if f["text"]]
            entry[f"{name}_wer"] = word_error_rate([a for a, _ in labeled], [b for _, b in labeled], ["en"] * len(labeled))
        entry["speedup"] = entry["main_seconds"] / entry["speculative_seconds"]
        entry["identical_fraction"] = sum(a == b for a, b in zip(texts["main"], texts["speculative"])) / len(paths)
        entry["last_segment_end_minus_last_speech"] = {
            path.name: round(end - _last_speech(path), 2) for path, end in zip(paths, ends)}
        report["results"].append(entry)
        progress(entry)
    report["seams"] = _seams(pair, options, files, texts["main"])
    return write_report(report, args.output)


def _last_speech(path: Path) -> float:
    """Seconds to the end of the last 10 ms holding a sample above 0.02 (-34 dBFS)."""
    audio = load_audio(str(path))
    loud = np.flatnonzero(np.abs(audio) > 0.02)
    return float(-(-(loud[-1] + 1) // (SAMPLE_RATE // 100)) / 100) if len(loud) else 0.0


def _seams(pair, options: DecodingOptions, files: list[dict], stitched: list[str]) -> dict:
    """Stitched WER of the LibriSpeech chapters against their utterances decoded one by one."""
    utterances = {r["utt_id"]: r for r in manifest_rows() if r["set"] == "librispeech"}
    chapters = [(f, text) for f, text in zip(files, stitched) if f.get("utt_ids")]
    parts = [SPEECH / utterances[u]["path"] for f, _ in chapters for u in f["utt_ids"]]
    separate = {r.path: r.text for r in transcribe(pair, parts, options, use_assistant=False)}
    joined = [" ".join(separate[str(SPEECH / utterances[u]["path"])] for u in f["utt_ids"]) for f, _ in chapters]
    references = [f["text"] for f, _ in chapters]
    return {"chapters": len(chapters),
            "stitched_wer": word_error_rate(references, [text for _, text in chapters], ["en"] * len(chapters)),
            "separate_utterances_wer": word_error_rate(references, joined, ["en"] * len(chapters))}


if __name__ == "__main__":
    sys.exit(main())
