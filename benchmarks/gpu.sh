#!/usr/bin/env bash
# The GPU check in one command: on a CUDA machine, in about 7 minutes (H200), everything under OUT:
#   cuda_tests.txt  pytest -m cuda: speculative == main-only in float16 and bfloat16 at batch 1-16 (real
#                   base + shipped assistant; random models at 1-4), text and timestamps, CUDA graphs
#                   against eager, a kept round graph replaying another batch, flash cross-attention
#                   against written out,
#                   the int8 kernel on CUDA, a pre-quantized directory building no float decoder weight
#   librispeech/    whisper-spec bench on the 78 LibriSpeech clips, --device cuda, float16, eager and
#                   --compile (every step of a round through torch.compile, main-only and speculative),
#                   batch 1 and 4, with the transformers and faster-whisper peers where installed
#   wide_batches/   the same clips in float16 at batch 8 and 16, main-only against speculative
#   memory.json     GPU memory of the loaded pair and peak while decoding, float16 against int8
#   step_profile.json  where a token's time goes at batch 1 under torch.profiler, eager and compiled:
#                   host work, syncs, kernels a token and the device's costliest kernels
#                   (benchmarks/experiments/gpu_step_profile.py)
#   summary.md      one table of all of it, with the targets (also printed)
# Usage:
#   benchmarks/gpu.sh [OUT]        default OUT: benchmarks/results/gpu_<GPU name>
#   benchmarks/gpu.sh --dry OUT    CPU, 2 clips, no CUDA tests: the script's own check (the test suite runs it)
# WHISPER_SPEC_SPEECH=DIR: the shared speech folder where ../shared/data/speech is not beside the checkout.
# Exits 1 if a CUDA test or the exactness check failed; every part runs regardless.
set -uo pipefail
cd "$(dirname "$0")/.."
dry=0
if [ "${1:-}" = --dry ]; then dry=1; shift; fi
speech=${WHISPER_SPEC_SPEECH:-../shared/data/speech}
if [ $dry = 1 ]; then
  out=${1:?--dry needs an output folder}
  device=cpu bench=(--int8 --limit 2 --repeats 1 --peers faster-whisper) memory=(--limit 2)
  wide=(--limit 2 --repeats 1 --batch-sizes 2)
else
  gpu=$(python -c 'import torch; print(torch.cuda.get_device_name().split()[1].lower())') || exit 1
  out=${1:-benchmarks/results/gpu_$gpu}
  device=cuda bench=(--compile) memory=() wide=(--batch-sizes 8,16)
fi
mkdir -p "$out"
status=0
if [ $dry = 0 ]; then
  python -m pytest -m cuda -q -p no:cacheprovider tests/test_cuda.py 2>&1 | tee "$out/cuda_tests.txt" || status=1
fi
whisper-spec bench "$speech/manifest.jsonl" --set librispeech --device $device --speculation on "${bench[@]}" \
  --output-dir "$out/librispeech" 2>&1 | tee "$out/bench.log" || status=1
whisper-spec bench "$speech/manifest.jsonl" --set librispeech --device $device --no-int8 --speculation on \
  --peers none "${wide[@]}" \
  --output-dir "$out/wide_batches" 2>&1 | tee -a "$out/bench.log" || status=1
python benchmarks/gpu_memory.py --device $device "${memory[@]}" --output "$out/memory.json" > /dev/null || status=1
if [ $dry = 0 ]; then
  python benchmarks/experiments/gpu_step_profile.py --device cuda --variants flash-cross,compiled \
    --output "$out/step_profile.json" > /dev/null || status=1
fi
python benchmarks/gpu_summary.py "$out" | tee "$out/summary.md" || status=1
exit $status
