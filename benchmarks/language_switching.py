"""Speech that changes language: is each part written in the language spoken, and how well.

Joins FLEURS clips of five languages (de, en, fr, es, pt) into recordings whose language changes with
every clip, a second of room tone between them (whisper_spec.bench.made_audio.language_switching;
recording i takes each language's clip i, the languages in turn from the i-th), transcribes them with
the command line's defaults (language detected, batch 4) main-only and speculative, beside
faster-whisper's batched pipeline with its VAD, as it comes and with `multilingual=True` (its
language detected again on every segment), and reports per configuration:
- parts in their own language: parts whose segments (those whose middle lies in the part, widened by
  half the pause) are in its language, by their seconds (ours: each segment's language; faster-whisper
  reports none a segment, so only its WER tells);
- WER over the parts, each against its reference in its language (where no segment spans two parts:
  faster-whisper's batched segments are whole chunks), and over whole recordings (every language
  under Whisper's basic normalizer), each beside the same clips transcribed one by one (language
  detected): what the changes cost;
- seconds, and whether speculative equals main-only.

    python benchmarks/language_switching.py --output benchmarks/results/language_switching_epyc_cpu.json
    python benchmarks/language_switching.py --dry --output /tmp/switching.json   # one short recording
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import soundfile
from _common import SPEECH, manifest_rows, parse_args, progress, write_report

from whisper_spec.bench.made_audio import Spoken, language_switching
from whisper_spec.bench.metrics import machine_info, word_error_rate
from whisper_spec.bench.peers import load_peers
from whisper_spec.longform.pipeline import transcribe
from whisper_spec.models.load import load_pair
from whisper_spec.models.pair import decoder_precision
from whisper_spec.options import DecodingOptions
from whisper_spec.speech.audio import SAMPLE_RATE, load_audio

LANGUAGES = ("de", "en", "fr", "es", "pt")
PAUSE = 1.0  # seconds of room tone between two utterances


def made_set(folder: Path, recordings: int, languages: tuple[str, ...]) -> tuple[list[Path], list[list[Spoken]], list[dict]]:
    """The language-switching recordings, written to folder, and the clips they join."""
    rows = manifest_rows()
    by_language = {language: [r for r in rows if r["set"] == f"fleurs_{language}"] for language in languages}
    paths, spans, clips = [], [], []
    for index in range(recordings):
        order = languages[index % len(languages):] + languages[: index % len(languages)]
        group = [by_language[language][index] for language in order]
        audio, spoken = language_switching([(load_audio(str(SPEECH / r["path"])), r["text"], r["language"])
                                            for r in group], seed=index, pause=PAUSE)
        paths.append(folder / f"switching_{index}.wav")
        soundfile.write(paths[-1], audio, SAMPLE_RATE)
        spans.append(spoken)
        clips += group
    return paths, spans, clips


def by_part(segments: list[dict], spoken: list[Spoken]) -> list[list[dict]]:
    """Each utterance's segments: those whose middle lies in its span widened by half the pause."""
    return [[s for s in segments if part.start - PAUSE / 2 <= (s["start"] + s["end"]) / 2 < part.end + PAUSE / 2]
            for part in spoken]


def spans_two(segment: dict, spoken: list[Spoken]) -> bool:
    """Whether a segment reaches over more than one utterance (more than half the pause into each)."""
    return sum(segment["start"] < u.end - PAUSE / 2 and u.start + PAUSE / 2 < segment["end"] for u in spoken) > 1


def in_own_language(parts: list[list[dict]], spoken: list[Spoken]) -> int | None:
    """Parts most of whose segments' seconds are in the part's language (None: no segment language)."""
    if any("language" not in s for part in parts for s in part):
        return None
    count = 0
    for part, utterance in zip(parts, spoken):
        seconds = {}
        for s in part:
            seconds[s["language"]] = seconds.get(s["language"], 0.0) + s["end"] - s["start"]
        count += bool(seconds) and max(seconds, key=seconds.get) == utterance.language
    return count


def ours(transcript) -> list[dict]:
    return [{"start": float(s.start), "end": float(s.end), "text": s.text, "language": s.language}
            for s in transcript.segments]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="base")
    parser.add_argument("--recordings", type=int, default=7, help="at most 7 (FLEURS clips a language)")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--peers", default="faster-whisper")
    parser.add_argument("--output", type=Path)
    args = parse_args(parser, recordings=1, peers="none")

    pair = load_pair(args.model)
    report = {"machine": machine_info(pair.device), "model": args.model, "decoders": decoder_precision(pair.main),
              "batch_size": args.batch_size, "pause_seconds": PAUSE}
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        paths, spans, clips = made_set(Path(scratch), args.recordings, LANGUAGES)
        report["audio_seconds"] = round(sum(soundfile.info(p).duration for p in paths), 1)
        clip_paths = [str(SPEECH / c["path"]) for c in clips]
        for name, speculation in (("main-only", "off"), ("speculative", "on")):
            options = DecodingOptions(speculation=speculation)
            start = time.perf_counter()
            transcripts = list(transcribe(pair, list(map(str, paths)), options, batch_size=args.batch_size))
            seconds = time.perf_counter() - start
            alone = [t.text for t in transcribe(pair, clip_paths, options, batch_size=args.batch_size)]
            results[name] = {"seconds": seconds, "recordings": [ours(t) for t in transcripts], "clips": alone}
            progress({"config": name, "seconds": round(seconds, 2)})
        peers, left_out = load_peers(pair, args.model, tuple(p for p in args.peers.split(",") if p != "none"),
                                     Path(scratch), lambda line: print(line, file=sys.stderr))
        report["left_out"] = left_out
        for peer in peers.values():
            results.update(_peer_results(peer, paths, clip_paths, args.batch_size))
            peer.close()
    report["configs"] = {name: _config_entry(result, spans, clips) for name, result in results.items()}
    if {"main-only", "speculative"} <= set(results):
        report["speculative_equals_main_only"] = results["main-only"]["recordings"] == results["speculative"]["recordings"]
    report["summary"] = {name: {k: c[k] for k in ("parts_in_own_language", "parts", "wer", "clips_one_by_one_wer",
                                                  "recording_wer", "clips_one_by_one_recording_wer", "seconds")}
                         for name, c in report["configs"].items()}
    progress(report["summary"])
    return write_report(report, args.output)


def _peer_results(peer, paths: list[Path], clip_paths: list[str], batch_size: int) -> dict:
    """faster-whisper's batched pipeline over the recordings, with its language found once a file and
    a chunk at a time (multilingual), and over the clips one by one."""
    alone = ["".join(s["text"] for s in peer.transcribe_long_timed(
        load_audio(p), batch_size, int8=True, language=None)["segments"]) for p in clip_paths]
    results = {}
    for name, multilingual in (("faster-whisper int8, batched with VAD", False),
                               ("faster-whisper int8, batched with VAD, multilingual", True)):
        start = time.perf_counter()
        timed = [peer.transcribe_long_timed(load_audio(str(p)), batch_size, int8=True, language=None,
                                            multilingual=multilingual) for p in paths]
        results[name] = {"seconds": time.perf_counter() - start, "clips": alone,
                         "recordings": [[{k: s[k] for k in ("start", "end", "text")} for s in t["segments"]]
                                        for t in timed]}
        progress({"config": name, "seconds": round(results[name]["seconds"], 2)})
    return results


def _config_entry(result: dict, spans: list, clips: list[dict]) -> dict:
    """A configuration's figures: parts in their own language, segments spanning two parts, WER by
    part, by language and by recording, beside the clips transcribed one by one."""
    utterances = [u for spoken in spans for u in spoken]
    basic = ["mixed"] * len(spans)  # not English: Whisper's basic normalizer, for text in any language
    references, languages = [u.text for u in utterances], [u.language for u in utterances]
    parts = [by_part(segments, spoken) for segments, spoken in zip(result["recordings"], spans)]
    spanning = int(sum(spans_two(s, spoken) for segments, spoken in zip(result["recordings"], spans) for s in segments))
    own = [in_own_language(p, spoken) for p, spoken in zip(parts, spans)]
    hypotheses = [" ".join(s["text"].strip() for s in part) for recording in parts for part in recording]
    return {
        "seconds": round(result["seconds"], 2),
        "parts_in_own_language": None if None in own else sum(own), "parts": len(utterances),
        "segments_spanning_two_parts": spanning,
        "wer": round(100 * word_error_rate(references, hypotheses, languages), 2) if not spanning else None,
        "clips_one_by_one_wer": round(100 * word_error_rate([c["text"] for c in clips], result["clips"],
                                                             [c["language"] for c in clips]), 2),
        "recording_wer": round(100 * word_error_rate([" ".join(u.text for u in spoken) for spoken in spans],
                                                     [" ".join(s["text"] for s in r) for r in result["recordings"]],
                                                     basic), 2),
        "clips_one_by_one_recording_wer": round(100 * word_error_rate(
            [" ".join(c["text"] for c in clips[i * len(LANGUAGES):(i + 1) * len(LANGUAGES)]) for i in range(len(spans))],
            [" ".join(result["clips"][i * len(LANGUAGES):(i + 1) * len(LANGUAGES)]) for i in range(len(spans))], basic), 2),
        "wer_by_language": None if spanning else {language: round(100 * word_error_rate(
            [r for r, lang in zip(references, languages) if lang == language],
            [h for h, lang in zip(hypotheses, languages) if lang == language], [language] * languages.count(language)), 2)
            for language in LANGUAGES if language in languages},
        "recordings": [{"speech": [[u.start, u.end, u.language] for u in spoken], "segments": segments}
                       for spoken, segments in zip(spans, result["recordings"])]}


if __name__ == "__main__":
    sys.exit(main())
