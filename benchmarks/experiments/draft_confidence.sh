#!/usr/bin/env bash
# --draft-confidence re-checked for the shipped multilingual assistant with the CPU defaults:
# 0.8, 0.9 and 0.95 (4 draft tokens) on the 28 FLEURS clips in German, Spanish, French and
# Portuguese and the 78 LibriSpeech clips, batch 1; each run times main-only beside speculative
# decoding, int8 decoders (the default) and float32 ones (compare speedups within a run: the
# machine's speed drifts between runs). Writes DIR/<fleurs|librispeech>_c<C>/report.{json,md}.
#   OUT=DIR      default benchmarks/results/draft_confidence_cpu
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-benchmarks/results/draft_confidence_cpu}
for confidence in 0.8 0.9 0.95; do
  for sets in fleurs_de,fleurs_es,fleurs_fr,fleurs_pt librispeech; do
    name=$([ "$sets" = librispeech ] && echo librispeech || echo fleurs)_c$confidence
    whisper-spec bench ../shared/data/speech/manifest.jsonl --set "$sets" --repeats 1 --peers none \
      --batch-sizes 1 --draft-confidence "$confidence" -o "$out/$name" --quiet
    rm -f "$out/$name"/*.png
  done
done
