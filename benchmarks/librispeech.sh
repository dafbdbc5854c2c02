#!/usr/bin/env bash
# The Hugging Face blog's LibriSpeech comparison (large-v2 + distil-large-v2 there) on this machine:
# whisper base + its distilled assistant on the 78 shared LibriSpeech clips, batch 1 and 4, float
# and int8, with the transformers and faster-whisper rows. Extra arguments go to `whisper-spec bench`.
#   HUB=1        hf-internal-testing/librispeech_asr_dummy from the hub instead (online)
#   OUT=DIR      where the report goes (default benchmarks/results/librispeech_<device>)
set -euo pipefail
cd "$(dirname "$0")/.."
device=$(python -c 'import torch; print("cuda" if torch.cuda.is_available() else "cpu")')
if [ "${HUB:-0}" = 1 ]; then
  source=(hf-internal-testing/librispeech_asr_dummy --config clean --split validation --language en)
else
  source=(../shared/data/speech/manifest.jsonl --set librispeech)
fi
exec whisper-spec bench "${source[@]}" --int8 --output-dir "${OUT:-benchmarks/results/librispeech_$device}" "$@"
