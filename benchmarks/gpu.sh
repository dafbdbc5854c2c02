#!/usr/bin/env bash
# The GPU check in one command: on a CUDA machine, everything under OUT, in this order (most wanted first):
#   cuda_tests.txt  pytest -m cuda: speculative == main-only in float16 and bfloat16 at batch 1-16 (real
#                   base + shipped assistant; random models at 1-4), text and timestamps, CUDA graphs
#                   against eager, a kept round graph replaying another batch, flash cross-attention
#                   against written out, the int8 kernel on CUDA, a pre-quantized directory building no
#                   float decoder weight
#   step_profile.json  where a token's time goes at batch 1 under torch.profiler, eager and compiled:
#                   wall and device microseconds, host syncs, kernels a token and the device's costliest
#                   kernels (benchmarks/experiments/gpu_step_profile.py, 16 clips)
#   librispeech/    whisper-spec bench on the 78 LibriSpeech clips, --device cuda, float16, eager and
#                   --compile (every step of a round through torch.compile, main-only and speculative),
#                   batch 1 and 4, with the transformers and faster-whisper peers where installed
#   cuda_tests_compiled.txt  the CUDA tests of compiled rounds (each case compiles graphs of its own)
#   wide_batches/   the same clips in float16 at batch 8 and 16, main-only against speculative
#   memory.json     GPU memory of the loaded pair and peak while decoding, float16 against int8
#   cuda_libraries.json  which cuBLAS a process without torch loads (CTranslate2's PyPI build wants CUDA
#                   12's libcublas.so.12): why the faster-whisper peer could not run, where it could not
#   serve_load_16.json, serve_load_32.json  whisper-spec serve on the GPU under 16 and 32 concurrent clients
#                   (--max-batch 16 against 1, 60 s each; benchmarks/serve_load.py)
#   summary.md      one table of all of it, with the targets (also printed)
# Usage:
#   benchmarks/gpu.sh [OUT]        default OUT: benchmarks/results/gpu_<GPU name>
#   GPU_CHECK_SECONDS=N benchmarks/gpu.sh OUT   within a lease of N seconds: each part capped and given at
#                                  most what is left (under 20 s: skipped); OUT/out_of_time.txt names those cut
#   GPU_BENCH_ARGS="--repeats 1 --peers none"   more bench flags (the last of a flag wins)
#   benchmarks/gpu.sh --dry OUT    CPU, 2 clips, no CUDA tests: the script's own check (the test suite runs it)
# WHISPER_SPEC_SPEECH=DIR: the shared speech folder where ../shared/data/speech is not beside the checkout.
# Exits 1 if a CUDA test or the exactness check failed, or a part ran out of time; every part runs regardless.
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
budget=${GPU_CHECK_SECONDS:-0} started=$SECONDS
: > "$out/out_of_time.txt"
part() {  # part CAP_SECONDS NAME COMMAND...
  local cap=$1 name=$2; shift 2
  if [ "$budget" = 0 ]; then "$@"; return; fi
  local left=$(( budget - (SECONDS - started) - 10 ))
  if [ $left -lt 20 ]; then echo "$name: skipped, out of time" | tee -a "$out/out_of_time.txt" >&2; return 1; fi
  local limit=$(( left < cap ? left : cap )) rc=0
  timeout $limit "$@" || rc=$?
  [ $rc != 124 ] || echo "$name: stopped after $limit s" | tee -a "$out/out_of_time.txt" >&2
  return $rc
}
status=0
python benchmarks/cuda_libraries.py > "$out/cuda_libraries.json" || status=1
if [ $dry = 0 ]; then
  part 150 "CUDA tests" python -m pytest -m cuda -q -n 0 -p no:cacheprovider -k "not compiled" tests/test_cuda.py 2>&1 \
    | tee "$out/cuda_tests.txt" || status=1
  part 150 "step profile" python benchmarks/experiments/gpu_step_profile.py --device cuda --clips 16 \
    --variants flash-cross,compiled --output "$out/step_profile.json" > /dev/null || status=1
fi
part 300 "LibriSpeech bench" whisper-spec bench "$speech/manifest.jsonl" --set librispeech --device $device \
  --speculation on "${bench[@]}" ${GPU_BENCH_ARGS:-} --output-dir "$out/librispeech" 2>&1 | tee "$out/bench.log" || status=1
if [ $dry = 0 ]; then
  part 150 "compiled CUDA tests" python -m pytest -m cuda -q -n 0 -p no:cacheprovider -k compiled tests/test_cuda.py \
    2>&1 | tee "$out/cuda_tests_compiled.txt" || status=1
fi
part 120 "wide batches" whisper-spec bench "$speech/manifest.jsonl" --set librispeech --device $device --no-int8 \
  --speculation on --peers none "${wide[@]}" ${GPU_BENCH_ARGS:-} --output-dir "$out/wide_batches" 2>&1 | tee -a "$out/bench.log" || status=1
part 90 "memory" python benchmarks/gpu_memory.py --device $device "${memory[@]}" --output "$out/memory.json" > /dev/null \
  || status=1
if [ $dry = 0 ]; then
  for clients in 16 32; do
    part 200 "serve load, $clients clients" python benchmarks/serve_load.py --device cuda --clients $clients --seconds 60 \
      --max-batch 16 --peers none --output "$out/serve_load_$clients.json" > /dev/null || status=1
  done
fi
[ -s "$out/out_of_time.txt" ] || rm "$out/out_of_time.txt"
python benchmarks/gpu_summary.py "$out" | tee "$out/summary.md" || status=1
exit $status
