#!/usr/bin/env bash
# Draft settings re-checked now that compiled draft steps cost less: --draft-tokens and
# --draft-confidence pairs on the first 40 LibriSpeech clips at batch 1, each run timing main-only,
# eager drafts and compiled drafts side by side (compare decoding speedups within a run: the
# machine's speed drifts between runs). Writes DIR/k<K>_c<C>/report.{json,md}.
#   OUT=DIR      default benchmarks/results/draft_tuning_cpu
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-benchmarks/results/draft_tuning_cpu}
for setting in "4 0.8" "4 0.7" "6 0.8" "6 0.7" "8 0.6"; do
  set -- $setting
  whisper-spec bench ../shared/data/speech/manifest.jsonl --set librispeech --limit 40 --repeats 1 \
    --peers none --batch-sizes 1 --compile --draft-tokens "$1" --draft-confidence "$2" \
    -o "$out/k$1_c$2" --quiet
  rm -f "$out/k$1_c$2"/*.png
done
