"""Long-form speed and WER on the shared long-form set: the bench's configurations, per batch size.

Runs the chunked pipeline over the shared long-form files (7 LibriSpeech test-other chapters,
a TED excerpt, the 128 s mp3) in the configurations `whisper-spec bench` compares: int8 decoders
(the CPU default) and float32 decoders, each main-only and speculative, and faster-whisper int8
where installed (its sequential `transcribe` at batch 1, its batched pipeline above). It reports
real-time factors, speedups, whether the transcripts are identical, and WER of the stitched
transcripts (Whisper's English normalizer with the spelling table). The configurations take turns
file by file (the order rotating), so a drift in the machine's speed during the run weighs on all
alike; windows are batched within a file.

Quality of the long-form output: per file, where its last segment ends against where its last
speech does (the last 10 ms with a sample above -34 dBFS), and for the LibriSpeech chapters the
stitched WER against the WER of the same utterances decoded one by one.

--set fleurs: long recordings in other languages instead, each language's FLEURS clips (de, es, fr,
pt, en) joined end to end with half a second of silence between them, in their language.

    python benchmarks/longform.py --batch-sizes 1,4 --output benchmarks/results/longform_cpu.json
    python benchmarks/longform.py --set fleurs --batch-sizes 1,4 --output benchmarks/results/longform_fleurs_cpu.json
    python benchmarks/longform.py --batch-sizes 4 --speculation on --peers none --output benchmarks/results/longform_b4_on_cpu.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch
from _common import SPEECH, last_speech, long_recordings, manifest_rows, progress, write_report

from whisper_spec.audio import load_audio
from whisper_spec.bench.metrics import machine_info, word_error_rate
from whisper_spec.bench.peers import load_peers
from whisper_spec.load import default_precision, load_pair
from whisper_spec.options import DecodingOptions
from whisper_spec.pipeline import transcribe
from whisper_spec.sources import default_assistant


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="base")
    parser.add_argument("--assistant", default=None, help="default: the model's distilled assistant")
    parser.add_argument("--batch-sizes", default="1,4")
    parser.add_argument("--peers", default="faster-whisper", help="faster-whisper or none")
    parser.add_argument("--set", dest="recordings", choices=("longform", "fleurs"), default="longform")
    parser.add_argument("--speculation", choices=("auto", "on"), default="auto",
                        help="when speculative configurations draft (DecodingOptions.speculation)")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()

    workdir = tempfile.TemporaryDirectory()
    files, paths = long_recordings(args.recordings, Path(workdir.name))
    languages = {str(path): f["language"] for path, f in zip(paths, files)}
    ends = {path.name: last_speech(path) for path in paths}  # read once, not per configuration and batch size
    assistant = args.assistant or default_assistant(args.model)
    if assistant is None:
        parser.error(f"{args.model} has no distilled assistant: give --assistant")
    cpu = torch.device("cpu")
    pairs = {}
    for int8 in (True, False):
        int8, dtype = default_precision(cpu, int8)
        pairs["int8" if int8 else "float32"] = load_pair(args.model, assistant, int8=int8, dtype=dtype)
    peers = load_peers(pairs["int8"], args.model, tuple(args.peers.split(",")), Path("."), note=print)
    options = DecodingOptions(speculation=args.speculation)
    audio_seconds = sum(r["duration_s"] for r in files)
    shortest = paths[min(range(len(files)), key=lambda i: files[i]["duration_s"])]

    def ours(precision: str, speculative: bool, batch: int):
        def run(path: Path) -> tuple[str, object]:
            (result,) = transcribe(pairs[precision], [path], options, batch_size=batch, languages=languages,
                                   use_assistant=speculative)
            return result.text, result
        return run

    def peer(name: str, batch: int):
        def run(path: Path) -> tuple[str, None]:
            return peers[name].transcribe_long(load_audio(str(path)), batch, int8=True,
                                               language=languages[str(path)]), None
        return run

    report = {"machine": machine_info(cpu), "model": args.model, "assistant": str(assistant), "set": args.recordings,
              "speculation": args.speculation,
              "files": len(paths), "languages": [f["language"] for f in files], "audio_seconds": audio_seconds,
              "results": []}
    for batch in [int(b) for b in args.batch_sizes.split(",")]:
        runs = {f"{mode} {precision}": ours(precision, mode == "speculative", batch)
                for precision in pairs for mode in ("main-only", "speculative")}
        runs.update({f"{name} int8": peer(name, batch) for name in peers})
        for run in runs.values():
            run(shortest)  # warm-up: first calls, faster-whisper's VAD model
        seconds = dict.fromkeys(runs, 0.0)
        texts = {name: [] for name in runs}
        results = {name: [] for name in runs}
        names = list(runs)
        for index, path in enumerate(paths):
            for name in names[index % len(names):] + names[:index % len(names)]:
                start = time.perf_counter()
                text, result = runs[name](path)
                seconds[name] += time.perf_counter() - start
                texts[name].append(text)
                results[name].append(result)
        entry = {"batch_size": batch, "configurations": {}}
        labeled = [i for i, f in enumerate(files) if f["text"]]
        for name in runs:
            row = {"seconds": seconds[name], "real_time_factor": seconds[name] / audio_seconds,
                   "wer": word_error_rate([files[i]["text"] for i in labeled], [texts[name][i] for i in labeled],
                                          [files[i]["language"] for i in labeled]),
                   "wer_by_file": {paths[i].name: round(word_error_rate([files[i]["text"]], [texts[name][i]],
                                                                        [files[i]["language"]]), 4) for i in labeled}}
            if name.startswith("speculative"):
                stats = [r.stats for r in results[name]]
                drafted = sum(s.drafted for s in stats)
                row["acceptance"] = sum(s.accepted for s in stats) / drafted if drafted else None
                row["last_segment_end_minus_last_speech"] = {
                    path.name: round((r.segments[-1].end if r.segments else 0.0) - ends[path.name], 2)
                    for path, r in zip(paths, results[name])}
            entry["configurations"][name] = row
        for precision in pairs:
            main, speculative = f"main-only {precision}", f"speculative {precision}"
            entry[f"speedup_{precision}"] = seconds[main] / seconds[speculative]
            entry[f"identical_fraction_{precision}"] = sum(
                a == b for a, b in zip(texts[main], texts[speculative])) / len(paths)
        report["results"].append(entry)
        progress(entry)
    if args.recordings == "longform":
        report["seams"] = _seams(pairs["int8"], DecodingOptions(language="en"), files, texts["main-only int8"])
    for peer in peers.values():
        peer.close()
    return write_report(report, args.output)


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
