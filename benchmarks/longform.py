"""Long audio, both ways of cutting it: speech chunks (VAD, the default) and windows one after another.

Runs the pipeline over the shared long-form files (7 LibriSpeech test-other chapters, a TED excerpt,
the 128 s mp3) with the int8 decoders (the CPU default; --precisions int8,float32 adds float32), each
mode main-only and speculative, beside the peers where installed: faster-whisper int8 (its sequential
`transcribe` at batch 1, its batched pipeline, which cuts at VAD pauses too, above) and whisper.cpp on a
ggml file of the same weights (float16, whisper.cpp's own files' precision; window after window at
any batch size), each in a process of its own with our thread count. Per configuration:
seconds, real-time factor, WER (Whisper's English normalizer with the spelling table), windows and
seconds of audio decoded against the recordings' length, and per file how far the last segment ends
after the last speech (the last 10 ms with a sample above -34 dBFS). The configurations take turns
file by file (the order rotating), so a drift in the machine's speed weighs on all alike; windows are
batched within a file. For the LibriSpeech chapters, each mode's WER against the same utterances
decoded one by one (what a seam or a pause costs).

--set joined: the 78 LibriSpeech clips joined into 4 recordings with pauses of 0.2-12 s and quiet
starts and ends (benchmarks/_common.py), against the clips transcribed one by one.
--set fleurs: each language's FLEURS clips (de, es, fr, pt, en) joined end to end with half a second
of silence between them, in their language.
--set tts: the 10 synthetic long recordings (de, en, es, fr, pt, 4-7 min each) against the texts they
read; no acceptance reported (an assistant may be trained on them).
--set voxpopuli: VoxPopuli's English test clip (69 s, WER against its normalized transcript) and 10
minutes of raw French plenary audio in five 120 s cuts (no transcripts: seconds and identity only).
--detect-language: the files' languages detected (the command line's default; a long file's on its
first chunk, more where that is unclear) rather than given, by us and faster-whisper alike.
WER comes with its word errors by kind (substitutions, deletions, insertions): what a rule about a
chunk's end trades is seen there.

    python benchmarks/longform.py --batch-sizes 4 --output benchmarks/results/longform_vad_epyc_cpu.json
    python benchmarks/longform.py --set joined --batch-sizes 4 --output benchmarks/results/longform_vad_joined_epyc_cpu.json
    python benchmarks/longform.py --set fleurs --batch-sizes 4 --output benchmarks/results/longform_vad_fleurs_epyc_cpu.json
    python benchmarks/longform.py --set tts --modes vad --batch-sizes 4 --peers none --output /tmp/tts.json
    python benchmarks/longform.py --dry --output /tmp/longform.json   # a minute: the script's own check
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from _common import SPEECH, last_speech, long_recordings, manifest_rows, progress, write_report

from whisper_spec.bench.metrics import machine_info, word_error_rate, word_errors
from whisper_spec.bench.peers import load_peers
from whisper_spec.longform.pipeline import transcribe
from whisper_spec.models.load import load_pair
from whisper_spec.models.platform import default_precision
from whisper_spec.models.sources import default_assistant
from whisper_spec.options import ChunkingOptions, DecodingOptions
from whisper_spec.speech.audio import load_audio
from whisper_spec.speech.vad import VAD_FRAME, SpeechDetector

MODES = {"vad": ChunkingOptions(vad=True), "sequential": ChunkingOptions(vad=False)}


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="base")
    parser.add_argument("--assistant", default=None, help="default: the model's distilled assistant")
    parser.add_argument("--batch-sizes", default="1,4")
    parser.add_argument("--precisions", default="int8", help="decoder precisions: int8, float32 or both")
    parser.add_argument("--peers", default="faster-whisper,whisper.cpp", help="faster-whisper, whisper.cpp, both or none")
    parser.add_argument("--set", dest="recordings", choices=("longform", "joined", "fleurs", "tts", "voxpopuli"),
                        default="longform")
    parser.add_argument("--modes", default="vad,sequential", help="ways of cutting: vad (speech chunks), sequential or both")
    parser.add_argument("--speculation", choices=("auto", "on"), default="auto",
                        help="when speculative configurations draft (DecodingOptions.speculation)")
    parser.add_argument("--detect-language", action="store_true",
                        help="detect each file's language rather than give it, as the command line does")
    parser.add_argument("--output", type=Path, default=None)
    parser.add_argument("--dry", action="store_true",
                        help="the script's own check (the test suite runs it): one LibriSpeech chapter, batch 1, no peers")
    args = parser.parse_args()
    if args.dry:
        args.recordings, args.batch_sizes, args.peers = "longform", "1", "none"
    if not set(args.modes.split(",")) <= set(MODES):
        parser.error(f"--modes: {args.modes!r}: choose from {', '.join(MODES)}")
    args.assistant = args.assistant or default_assistant(args.model)
    if args.assistant is None:
        parser.error(f"{args.model} has no distilled assistant: give --assistant")
    return args


def main() -> int:
    args = _arguments()
    modes = args.modes.split(",")
    workdir = tempfile.TemporaryDirectory()
    files, paths = long_recordings(args.recordings, Path(workdir.name))
    if args.dry:
        keep = min((i for i, f in enumerate(files) if f.get("utt_ids")), key=lambda i: files[i]["duration_s"])
        files, paths = [files[keep]], [paths[keep]]
    languages = {} if args.detect_language else {str(path): f["language"] for path, f in zip(paths, files)}
    ends = {path.name: last_speech(path) for path in paths}  # read once, not per configuration and batch size
    cpu = torch.device("cpu")
    pairs = {}
    for precision in args.precisions.split(","):
        int8, dtype = default_precision(cpu, precision == "int8")
        pairs[precision] = load_pair(args.model, args.assistant, int8=int8, dtype=dtype)
    peers, _ = load_peers(next(iter(pairs.values())), args.model, tuple(args.peers.split(",")), Path(workdir.name),
                          note=print)
    options = DecodingOptions(speculation=args.speculation)
    audio_seconds = sum(r["duration_s"] for r in files)
    report = {"machine": machine_info(cpu), "model": args.model, "assistant": str(args.assistant),
              "set": args.recordings, "speculation": args.speculation, "languages_detected": args.detect_language,
              "files": len(paths), "languages": [f["language"] for f in files], "audio_seconds": audio_seconds,
              "results": []}
    for batch in [int(b) for b in args.batch_sizes.split(",")]:
        kinds = {"main-only": replace(options, speculation="off"), "speculative": options}
        runs = {f"{mode} {kind} {precision}": _ours(pairs[precision], MODES[mode], kinds[kind], batch, languages)
                for mode in modes for precision in pairs for kind in kinds}
        runs.update({f"{name} {engine.long_precision}": _peer(engine, batch, languages)
                     for name, engine in peers.items()})
        seconds, texts, results = _interleaved(runs, files, paths)
        entry = {"batch_size": batch, "configurations": {
            name: _configuration_row(args, files, paths, ends, seconds[name], texts[name], results[name])
            for name in runs}}
        entry.update(_comparisons(modes, pairs, seconds, texts))
        report["results"].append(entry)
        progress(entry)
    if args.recordings in ("longform", "joined"):
        precision = next(iter(pairs))
        report["against_utterances_alone"] = _against_utterances(
            pairs[precision], DecodingOptions(language="en"), files,
            {mode: texts[f"{mode} main-only {precision}"] for mode in modes})
    report["voice_activity"] = _vad_speed(paths)
    for peer in peers.values():
        peer.close()
    return write_report(report, args.output)


def _ours(pair, chunking: ChunkingOptions, options: DecodingOptions, batch: int, languages: dict):
    def run(path: Path) -> tuple[str, object]:
        (result,) = transcribe(pair, [path], options, batch_size=batch, languages=languages, chunking=chunking)
        return result.text, result
    return run


def _peer(engine, batch: int, languages: dict):
    def run(path: Path) -> tuple[str, None]:
        return engine.transcribe_long(load_audio(str(path)), batch, int8=True, language=languages.get(str(path))), None
    return run


def _interleaved(runs: dict, files: list[dict], paths: list[Path]) -> tuple[dict, dict, dict]:
    """Every configuration over every file, taking turns file by file (the order rotating), after a
    warm-up on the shortest file: seconds, texts and results by configuration."""
    shortest = paths[min(range(len(files)), key=lambda i: files[i]["duration_s"])]
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
    return seconds, texts, results


def _configuration_row(args, files: list[dict], paths: list[Path], ends: dict, seconds: float, texts: list[str],
                       results: list) -> dict:
    """One configuration's report entry: seconds, WER overall and by file, and for ours the decoding's
    figures (acceptance, windows, audio decoded, where the last segment ends after the last speech)."""
    audio_seconds = sum(r["duration_s"] for r in files)
    labeled = [i for i, f in enumerate(files) if f["text"]]
    references, reference_languages = [files[i]["text"] for i in labeled], [files[i]["language"] for i in labeled]
    hypotheses = [texts[i] for i in labeled]
    row = {"seconds": seconds, "real_time_factor": seconds / audio_seconds,
           "wer": word_error_rate(references, hypotheses, reference_languages),
           "word_errors": word_errors(references, hypotheses, reference_languages),
           "wer_by_file": {paths[i].name: round(word_error_rate([references[j]], [hypotheses[j]],
                                                                [reference_languages[j]]), 4)
                           for j, i in enumerate(labeled)}}
    if results[0] is None:  # a peer
        return row
    stats = [r.stats for r in results]
    drafted = sum(s.drafted for s in stats)
    if args.recordings != "tts":
        row["acceptance"] = sum(s.accepted for s in stats) / drafted if drafted else None
    row["windows"] = sum(s.windows for s in stats)
    if args.detect_language:
        row["language_by_file"] = {path.name: r.language for path, r in zip(paths, results)}
    row["decoded_audio_seconds"] = round(sum(s.audio_seconds for s in stats), 1)
    row["decoded_audio_ratio"] = round(row["decoded_audio_seconds"] / audio_seconds, 3)
    row["last_segment_end_minus_last_speech"] = {
        path.name: round((r.segments[-1].end if r.segments else 0.0) - ends[path.name], 2)
        for path, r in zip(paths, results)}
    return row


def _comparisons(modes: list[str], pairs: dict, seconds: dict, texts: dict) -> dict:
    """Speculative against main-only in each mode and precision (speedup, identical texts), and the
    speech chunks against windows one after another where both ran."""
    found = {}
    for mode in modes:
        for precision in pairs:
            main, speculative = f"{mode} main-only {precision}", f"{mode} speculative {precision}"
            found[f"speedup_{mode}_{precision}"] = seconds[main] / seconds[speculative]
            found[f"identical_fraction_{mode}_{precision}"] = sum(
                a == b for a, b in zip(texts[main], texts[speculative])) / len(texts[main])
    for precision in pairs if len(modes) == 2 else ():
        for kind in ("main-only", "speculative"):
            found[f"vad_over_sequential_{kind}_{precision}"] = (
                seconds[f"sequential {kind} {precision}"] / seconds[f"vad {kind} {precision}"])
    return found


def _vad_speed(paths: list[Path]) -> dict:
    """Seconds to score every frame of the recordings for speech: our batched module, and the
    silero-vad package's model a frame a call (its get_speech_timestamps), with the largest difference."""
    import silero_vad

    threads = torch.get_num_threads()
    package = silero_vad.load_silero_vad()
    torch.set_num_threads(threads)  # the package's import sets one thread
    detector = SpeechDetector()
    ours_seconds = package_seconds = difference = 0.0
    for path in paths:
        audio = load_audio(str(path))
        start = time.perf_counter()
        ours = detector.probabilities(audio)
        ours_seconds += time.perf_counter() - start
        start = time.perf_counter()
        package.reset_states()
        frames = torch.from_numpy(np.pad(audio, (0, -len(audio) % VAD_FRAME))).split(VAD_FRAME)
        with torch.inference_mode():
            theirs = [package(frame, 16000).item() for frame in frames]
        package_seconds += time.perf_counter() - start
        difference = max(difference, float(np.abs(np.array(ours) - np.array(theirs)).max()))
    return {"ours_seconds": round(ours_seconds, 3), "package_seconds": round(package_seconds, 3),
            "largest_probability_difference": difference}


def _against_utterances(pair, options: DecodingOptions, files: list[dict], texts: dict[str, list[str]]) -> dict:
    """Each mode's WER on the LibriSpeech chapters against the references, and against the same
    utterances decoded one by one, beside theirs."""
    utterances = {r["utt_id"]: r for r in manifest_rows() if r["set"] == "librispeech"}
    chapters = [i for i, f in enumerate(files) if f.get("utt_ids")]
    parts = [SPEECH / utterances[u]["path"] for i in chapters for u in files[i]["utt_ids"]]
    separate = {r.path: r.text for r in transcribe(pair, parts, replace(options, speculation="off"))}
    joined = [" ".join(separate[str(SPEECH / utterances[u]["path"])] for u in files[i]["utt_ids"]) for i in chapters]
    references = [files[i]["text"] for i in chapters]
    english = ["en"] * len(chapters)
    report = {"chapters": len(chapters), "separate_utterances_wer": word_error_rate(references, joined, english)}
    for mode, mode_texts in texts.items():
        long = [mode_texts[i] for i in chapters]
        report[f"{mode}_wer"] = word_error_rate(references, long, english)
        report[f"{mode}_wer_against_separate_utterances"] = word_error_rate(joined, long, english)
    return report


if __name__ == "__main__":
    sys.exit(main())
