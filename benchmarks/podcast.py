"""What a podcast shows: text written where nobody speaks, and whether cues stay on their speech.

Makes podcast-style recordings of real LibriSpeech speech (whisper_spec.bench.made_audio.podcast: a
music intro and outro, music, pauses and noise between the utterances, all made from numbers) plus a
music-only file and a 0.3 s one, transcribes them with word timestamps main-only and speculative
(batch 4, the command line's defaults otherwise), beside faster-whisper's batched pipeline with its
VAD and word timestamps, and reports per configuration:
- invented words: words whose middle lies outside every utterance's span widened by 0.5 s, and per
  hour of audio; the text of each such segment;
- repeated sentences: segments of 3 or more words whose text the transcript has more than once;
- cues off their speech: segments starting or ending more than 0.5 s outside the utterance they cover;
- WER against the references, beside the same clips transcribed one by one (what the music costs);
- the music-only and sub-second files' text (there should be none).

    python benchmarks/podcast.py --output benchmarks/results/podcast_epyc_cpu.json
    python benchmarks/podcast.py --dry --output /tmp/podcast.json   # one short recording
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import soundfile
from _common import SPEECH, manifest_rows, parse_args, progress, write_report

from whisper_spec.bench.made_audio import Spoken, music, podcast, words_outside
from whisper_spec.bench.metrics import machine_info, normalize, word_error_rate
from whisper_spec.bench.peers import load_peers
from whisper_spec.longform.pipeline import transcribe
from whisper_spec.models.load import load_pair
from whisper_spec.models.pair import decoder_precision
from whisper_spec.options import DecodingOptions
from whisper_spec.speech.audio import SAMPLE_RATE, load_audio

MARGIN = 0.5  # seconds a word or cue may reach past its utterance's speech


def made_set(folder: Path, recordings: int, per_recording: int) -> tuple[list[Path], list[list[Spoken]], list[dict]]:
    """The podcast-style recordings (LibriSpeech test-other clips, per_recording each), written to folder."""
    rows = [r for r in manifest_rows() if r["set"] == "librispeech"]
    paths, spans, clips = [], [], []
    for index in range(recordings):
        group = rows[index * per_recording : (index + 1) * per_recording]
        audio, spoken = podcast([(load_audio(str(SPEECH / r["path"])), r["text"], "en") for r in group], seed=index)
        paths.append(folder / f"podcast_{index}.wav")
        soundfile.write(paths[-1], audio, SAMPLE_RATE)
        spans.append(spoken)
        clips += group
    return paths, spans, clips


def repeated_sentences(texts: list[str]) -> list[str]:
    """Segment texts of 3 or more words that the transcript has more than once."""
    counts = Counter(normalize(t, "en") for t in texts if len(t.split()) >= 3)
    return [text for text, count in counts.items() if count > 1]


def cues_off(segments: list[tuple[float, float]], spoken: list[Spoken]) -> int:
    """Segments that cover no utterance, or start or end more than MARGIN outside those they cover."""
    off = 0
    for start, end in segments:
        covered = [s for s in spoken if s.start < end and start < s.end]
        off += bool(not covered or start < covered[0].start - MARGIN or end > covered[-1].end + MARGIN)
    return off


def measure(segments: list[dict], spoken: list[Spoken], reference: str) -> dict:
    """The figures of one recording's segments ({"start", "end", "text", "words": [[start, end], ...]})."""
    words = [tuple(w) for s in segments for w in s["words"]]
    invented = [s["text"] for s in segments
                if words_outside([tuple(w) for w in s["words"]] or [(s["start"], s["end"])], spoken, MARGIN)]
    return {"words": len(words), "invented_words": int(words_outside(words, spoken, MARGIN)), "invented_segments": invented,
            "repeated_sentences": repeated_sentences([s["text"] for s in segments]),
            "cues": len(segments), "cues_off": cues_off([(s["start"], s["end"]) for s in segments], spoken),
            "text": " ".join(s["text"].strip() for s in segments), "reference": reference,
            "speech": [[s.start, s.end] for s in spoken], "segments": segments}


def ours(transcript) -> list[dict]:
    return [{"start": float(s.start), "end": float(s.end), "text": s.text,
             "words": [[float(w.start), float(w.end)] for w in s.words]} for s in transcript.segments]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="base")
    parser.add_argument("--recordings", type=int, default=3)
    parser.add_argument("--per-recording", type=int, default=8, help="LibriSpeech clips in each recording")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--peers", default="faster-whisper")
    parser.add_argument("--output", type=Path)
    args = parse_args(parser, recordings=1, per_recording=2, peers="none")

    pair = load_pair(args.model)
    report = {"machine": machine_info(pair.device), "model": args.model, "decoders": decoder_precision(pair.main),
              "batch_size": args.batch_size, "margin_seconds": MARGIN}
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        paths, spans, clips = made_set(folder, args.recordings, args.per_recording)
        soundfile.write(folder / "music_only.wav", music(20.0, seed=101), SAMPLE_RATE)
        soundfile.write(folder / "sub_second.wav", music(0.3, seed=102), SAMPLE_RATE)
        extras = [folder / "music_only.wav", folder / "sub_second.wav"]
        audio_hours = sum(soundfile.info(p).duration for p in paths) / 3600
        references = [" ".join(s.text for s in spoken) for spoken in spans]
        report["audio_seconds"] = round(audio_hours * 3600, 1)
        results = {}
        for name, speculation in (("main-only", "off"), ("speculative", "on")):
            options = DecodingOptions(speculation=speculation, word_timestamps=True)
            start = time.perf_counter()
            transcripts = list(transcribe(pair, [*map(str, paths), *map(str, extras)], options, batch_size=args.batch_size))
            seconds = time.perf_counter() - start
            one_by_one = [t.text for t in transcribe(pair, [str(SPEECH / c["path"]) for c in clips],
                                                     DecodingOptions(speculation=speculation), batch_size=args.batch_size)]
            results[name] = {"seconds": round(seconds, 2), "recordings": [ours(t) for t in transcripts[: len(paths)]],
                             "extras": {p.stem: t.text for p, t in zip(extras, transcripts[len(paths):])},
                             "clips_wer": word_error_rate([c["text"] for c in clips], one_by_one, ["en"] * len(clips))}
            progress({"config": name, "seconds": round(seconds, 2)})
        peers, left_out = load_peers(pair, args.model, tuple(p for p in args.peers.split(",") if p != "none"), folder,
                                     lambda line: print(line, file=sys.stderr))
        report["left_out"] = left_out
        for peer in peers.values():
            results["faster-whisper int8, batched with VAD"] = _peer_result(peer, paths, extras, clips, args.batch_size)
            peer.close()
    report["configs"] = {name: _config_entry(result, spans, references, audio_hours) for name, result in results.items()}
    if {"main-only", "speculative"} <= set(results):
        report["speculative_equals_main_only"] = results["main-only"]["recordings"] == results["speculative"]["recordings"]
    report["summary"] = {name: {k: c[k] for k in ("wer", "clips_one_by_one_wer", "invented_words_per_hour",
                                                  "repeated_sentences", "cues_off", "cues", "seconds")}
                         | {"extras": c["extras"]} for name, c in report["configs"].items()}
    progress(report["summary"])
    return write_report(report, args.output)


def _peer_result(peer, paths: list[Path], extras: list[Path], clips: list[dict], batch_size: int) -> dict:
    """faster-whisper's batched pipeline over the recordings and the extras, and the clips one by one."""
    start = time.perf_counter()
    timed = [peer.transcribe_long_timed(load_audio(str(p)), batch_size, int8=True, language=None)
             for p in [*paths, *extras]]
    seconds = time.perf_counter() - start
    clip_texts = [peer.transcribe_long_timed(load_audio(str(SPEECH / c["path"])), batch_size, int8=True,
                                             language=None)["segments"] for c in clips]
    return {"seconds": round(seconds, 2), "recordings": [t["segments"] for t in timed[: len(paths)]],
            "extras": {p.stem: "".join(s["text"] for s in t["segments"]).strip()
                       for p, t in zip(extras, timed[len(paths):])},
            "clips_wer": word_error_rate([c["text"] for c in clips], ["".join(s["text"] for s in t) for t in clip_texts],
                                         ["en"] * len(clips))}


def _config_entry(result: dict, spans: list, references: list[str], audio_hours: float) -> dict:
    """A configuration's figures: WER, words invented over music and pauses, repeated sentences, cues off."""
    recordings = [measure(segments, spoken, reference)
                  for segments, spoken, reference in zip(result["recordings"], spans, references)]
    hypotheses = [r["text"] for r in recordings]
    wer = word_error_rate(references, hypotheses, ["en"] * len(references))
    invented = sum(r["invented_words"] for r in recordings)
    return {
        "seconds": result["seconds"], "wer": round(100 * wer, 2), "clips_one_by_one_wer": round(100 * result["clips_wer"], 2),
        "invented_words": invented, "invented_words_per_hour": round(invented / audio_hours, 1),
        "repeated_sentences": sum(len(r["repeated_sentences"]) for r in recordings),
        "cues": sum(r["cues"] for r in recordings), "cues_off": sum(r["cues_off"] for r in recordings),
        "extras": result["extras"], "recordings": recordings}


if __name__ == "__main__":
    sys.exit(main())
