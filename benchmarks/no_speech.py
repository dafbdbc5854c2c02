"""The no-speech rule: what it removes from sounds without speech, and that it leaves speech alone.

Sounds made here (6 s each: white noise at -30 dBFS, brown-noise room tone, mains hum with faint
hiss, digital silence) and the shared speech (LibriSpeech 78 clips, the FLEURS sets) are
transcribed with the default options and with the rule off (`no_speech_threshold=None`), main
model alone. The report gives each sound's text both ways, and per speech set the WER both ways
and how many transcripts the rule changed.

    python benchmarks/no_speech.py --output benchmarks/results/no_speech_cpu.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import soundfile
from _common import SPEECH, manifest_rows, parse_args, progress, write_report

from whisper_spec.bench.metrics import machine_info, word_error_rate
from whisper_spec.longform.pipeline import transcribe
from whisper_spec.models.load import load_pair
from whisper_spec.models.pair import decoder_precision
from whisper_spec.options import DecodingOptions

SETS = ("librispeech", "fleurs_de", "fleurs_es", "fleurs_fr", "fleurs_pt", "fleurs_en")


def made_sounds(folder: Path) -> list[Path]:
    rng = np.random.default_rng(0)
    n = 16000 * 6
    sounds = {
        "white_noise_-30dBFS": 0.03 * rng.standard_normal(n),
        "room_tone_brown_noise": np.cumsum(rng.standard_normal(n)) * 5e-4,
        "hum_50Hz_and_hiss": 0.01 * np.sin(2 * np.pi * 50 * np.arange(n) / 16000) + 1e-3 * rng.standard_normal(n),
        "digital_silence": np.zeros(n),
    }
    paths = []
    for name, sound in sounds.items():
        paths.append(folder / f"{name}.wav")
        soundfile.write(paths[-1], (sound - sound.mean()).astype(np.float32), 16000)
    return paths


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="base")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--limit", type=int, default=None, help="first N files of each speech set")
    parser.add_argument("--output", type=Path, default=None)
    args = parse_args(parser, limit=1)

    pair = load_pair(args.model, None)
    rule, no_rule = DecodingOptions(), DecodingOptions(no_speech_threshold=None)
    thresholds = {"no_speech_threshold": rule.no_speech_threshold, "logprob_threshold": rule.logprob_threshold,
                  "compression_ratio_threshold": rule.compression_ratio_threshold}
    report = {"machine": machine_info(pair.device), "model": args.model, "decoders": decoder_precision(pair.main),
              "options": thresholds, "sounds": {}, "speech": {}}
    with tempfile.TemporaryDirectory() as folder:
        sounds = made_sounds(Path(folder))
        texts = {name: [t.text for t in transcribe(pair, sounds, options, batch_size=args.batch_size)]
                 for name, options in (("rule", rule), ("no_rule", no_rule))}
        for i, path in enumerate(sounds):
            report["sounds"][path.stem] = {"text": texts["rule"][i], "text_without_rule": texts["no_rule"][i]}
    progress(report["sounds"])
    rows = manifest_rows()
    for name in SETS:
        files = [r for r in rows if r["set"] == name][: args.limit]
        paths = [SPEECH / r["path"] for r in files]
        languages = {str(p): r["language"] for p, r in zip(paths, files)}
        texts = {key: [t.text for t in transcribe(pair, paths, options, batch_size=args.batch_size,
                                                   languages=languages)]
                 for key, options in (("rule", rule), ("no_rule", no_rule))}
        references, codes = [r["text"] for r in files], [r["language"] for r in files]
        entry = {"files": len(files),
                 "wer": word_error_rate(references, texts["rule"], codes),
                 "wer_without_rule": word_error_rate(references, texts["no_rule"], codes),
                 "transcripts_changed_by_rule": sum(a != b for a, b in zip(texts["rule"], texts["no_rule"]))}
        report["speech"][name] = entry
        progress({name: entry})
    return write_report(report, args.output)


if __name__ == "__main__":
    sys.exit(main())
