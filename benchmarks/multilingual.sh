#!/usr/bin/env bash
# The Hugging Face blog's VoxPopuli comparison (large-v2 + tiny on Dutch there) on this machine:
# whisper base + its distilled assistant on the shared FLEURS recordings in German, Spanish, French
# and Portuguese (no VoxPopuli audio is available offline), batch 1 and 4, float and int8, with the
# peers; the report has acceptance, tokens per main forward and decoding speedup per language.
#   HUB=1        sanchit-gandhi/voxpopuli_dummy from the hub instead (online; Dutch)
#   SETS=a,b     other manifest sets (e.g. add thorsten_de,dutch_vl_tts,mls_polish: languages it was not trained on)
#   OUT=DIR      where the report goes (default benchmarks/results/multilingual_<device>)
set -euo pipefail
cd "$(dirname "$0")/.."
device=$(python -c 'import torch; print("cuda" if torch.cuda.is_available() else "cpu")')
if [ "${HUB:-0}" = 1 ]; then
  source=(sanchit-gandhi/voxpopuli_dummy --split validation --language nl)
else
  source=(../shared/data/speech/manifest.jsonl --set "${SETS:-fleurs_de,fleurs_es,fleurs_fr,fleurs_pt}")
fi
exec whisper-spec bench "${source[@]}" --int8 --output-dir "${OUT:-benchmarks/results/multilingual_$device}" "$@"
