#!/usr/bin/env bash
# What limits the multilingual assistant: the shipped assistant's recipe trained again with half
# its multilingual TTS audio (one of the two voices a language), then both measured on the FLEURS
# recordings (de, es, fr, pt; never trained on) at batch 1. Writes DIR/one_voice/ (bench report and
# that assistant's card) and DIR/curve.json: training minutes and FLEURS acceptance per language,
# one voice against two (the shipped assistant's figures from benchmarks/results/multilingual_cpu,
# run first). The teacher cache of the shipped recipe makes the labels free. Extra arguments go to
# distill after the shipped recipe: the committed curve is the TTS-only assistant's, shipped then,
# whose options were `--draft-vocab 16384 --steps 500` (give those to reproduce it).
#   OUT=DIR      default benchmarks/results/distill_data_curve_cpu
set -euo pipefail
cd "$(dirname "$0")/../.."
source benchmarks/_shipped_recipe.sh
speech=../shared/data/speech
out=${OUT:-benchmarks/results/distill_data_curve_cpu}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/tts_one_voice" "$out"
for language in de en es fr pt; do
  first=$(ls "$speech/unlabeled/tts_multilingual/$language"-*.ogg | head -1)
  ln -s "$(realpath "$first")" "$work/tts_one_voice/"
done
whisper-spec distill --audio "$speech/unlabeled/librispeech-train-clean-100" "$work/tts_one_voice" \
  --output "$work/assistant" "${SHIPPED_RECIPE[@]}" "$@"
whisper-spec bench "$speech/manifest.jsonl" --set fleurs_de,fleurs_es,fleurs_fr,fleurs_pt --batch-sizes 1 \
  --repeats 1 --peers none --assistant "$work/assistant" -o "$out/one_voice" -q
cp "$work/assistant/README.md" "$out/one_voice/assistant_card.md"
python - "$speech" "$work/tts_one_voice" "$out" <<'PY'
import json, pathlib, sys
import soundfile
speech, one_voice, out = (pathlib.Path(p) for p in sys.argv[1:])
def minutes(files):
    by_language = {}
    for f in files:
        language = f.name.split("-")[0]
        by_language[language] = by_language.get(language, 0) + soundfile.info(str(f)).duration / 60
    return {k: round(v, 1) for k, v in sorted(by_language.items())}
def acceptance(report):
    config = next(c for c in json.loads(report.read_text())["configs"] if c["name"] == "speculative b1")
    return {"overall": config["acceptance"], "decoding_speedup": config["decoding_speedup"],
            **{k: f["acceptance"] for k, f in config["by_language"].items()}}
curve = {
    "one_voice": {"tts_minutes": minutes(one_voice.glob("*.ogg")), "fleurs_acceptance_b1": acceptance(out / "one_voice/report.json")},
    "two_voices": {"tts_minutes": minutes((speech / "unlabeled/tts_multilingual").glob("*.ogg")),
                   "fleurs_acceptance_b1": acceptance(pathlib.Path("benchmarks/results/multilingual_cpu/report.json"))},
}
(out / "curve.json").write_text(json.dumps(curve, indent=2) + "\n")
print(json.dumps(curve, indent=2))
PY
