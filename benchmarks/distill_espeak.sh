#!/usr/bin/env bash
# The shipped base assistant, made again: its recipe on the unlabeled LibriSpeech and TTS audio plus
# ~12 min a language (de, es, fr, pt) of espeak-ng speech reading thousands of distinct sentences
# (benchmarks/espeak_corpus.py), then measured on the FLEURS recordings (never trained on) and the
# 78 LibriSpeech clips, at batch 1 with the defaults. Writes DIR/fleurs/ and DIR/librispeech/ (bench
# reports) and DIR/assistant_card.md (the assistant's card; its weights stay in a temporary folder
# unless ASSISTANT=DIR keeps them there, e.g. whisper_spec/assistants/base). Extra arguments go to
# distill after the shipped recipe (benchmarks/_shipped_recipe.sh): the first espeak-trained
# assistant, benchmarks/results/distill_espeak_cpu, had `--draft-vocab 16384 --steps 500`.
# Needs the Debian packages espeak_corpus.py names. Teacher labels for ~1,500 windows: about 90 min
# on 2 CPU cores, unless cached; training about 40 min; peak memory about 21 GB.
#   OUT=DIR      default benchmarks/results/distill_espeak_vocab20k_cpu
set -euo pipefail
cd "$(dirname "$0")/.."
source benchmarks/_shipped_recipe.sh
speech=../shared/data/speech
out=${OUT:-benchmarks/results/distill_espeak_vocab20k_cpu}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
assistant=${ASSISTANT:-$work/assistant}
mkdir -p "$out"
python benchmarks/espeak_corpus.py --minutes 12 --output "$work/espeak"
whisper-spec distill --audio "$speech/unlabeled/librispeech-train-clean-100" "$speech/unlabeled/tts_multilingual" \
  "$work/espeak/manifest.jsonl" --output "$assistant" "${SHIPPED_RECIPE[@]}" "$@"
whisper-spec bench "$speech/manifest.jsonl" --set fleurs_de,fleurs_es,fleurs_fr,fleurs_pt --batch-sizes 1 \
  --repeats 1 --peers none --assistant "$assistant" -o "$out/fleurs" -q
whisper-spec bench "$speech/manifest.jsonl" --set librispeech --batch-sizes 1 --repeats 1 --peers none \
  --assistant "$assistant" -o "$out/librispeech" -q
cp "$assistant/README.md" "$out/assistant_card.md"
