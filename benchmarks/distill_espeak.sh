#!/usr/bin/env bash
# Does other text help the multilingual assistant? The shipped assistant's recipe trained again with
# ~12 min a language (de, es, fr, pt) of espeak-ng speech reading thousands of distinct sentences
# (benchmarks/espeak_corpus.py) added to its training audio, then measured on the FLEURS recordings
# (never trained on) and the 78 LibriSpeech clips (English must not get worse), at batch 1 with the
# defaults. Writes DIR/fleurs/ and DIR/librispeech/ (bench reports) and
# DIR/assistant_card.md (the assistant's card; its weights stay in a temporary folder unless
# ASSISTANT=DIR keeps them there). Needs the Debian packages espeak_corpus.py names.
# Teacher labels for ~1,500 windows: about an hour on 2 CPU cores, unless cached.
#   OUT=DIR      default benchmarks/results/distill_espeak_cpu
set -euo pipefail
cd "$(dirname "$0")/.."
source benchmarks/_shipped_recipe.sh
speech=../shared/data/speech
out=${OUT:-benchmarks/results/distill_espeak_cpu}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
assistant=${ASSISTANT:-$work/assistant}
mkdir -p "$out"
python benchmarks/espeak_corpus.py --minutes 12 --output "$work/espeak"
whisper-spec distill --audio "$speech/unlabeled/librispeech-train-clean-100" "$speech/unlabeled/tts_multilingual" \
  "$work/espeak/manifest.jsonl" --output "$assistant" "${SHIPPED_RECIPE[@]}"
whisper-spec bench "$speech/manifest.jsonl" --set fleurs_de,fleurs_es,fleurs_fr,fleurs_pt --batch-sizes 1 \
  --repeats 1 --peers none --assistant "$assistant" -o "$out/fleurs" -q
whisper-spec bench "$speech/manifest.jsonl" --set librispeech --batch-sizes 1 --repeats 1 --peers none \
  --assistant "$assistant" -o "$out/librispeech" -q
cp "$assistant/README.md" "$out/assistant_card.md"
