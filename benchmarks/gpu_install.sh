#!/usr/bin/env bash
# On the GPU machine: joins the pieces benchmarks/gpu_bundle.sh made (.gpu/N/bundle.tar.*), installs
# the wheels into /tmp/site and whisper-spec from this checkout (no network), and writes /tmp/gpu_env
# (PYTHONPATH, PATH, WHISPER_SPEC_SPEECH) for `. /tmp/gpu_env` before benchmarks/gpu.sh.
#   --keep: only copy this call's pieces to /tmp/gpu_pieces (the next call's working tree drops them)
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p /tmp/gpu_pieces /tmp/gpu_bundle
cp .gpu/*/bundle.tar.* /tmp/gpu_pieces/ 2>/dev/null || true
if [ "${1:-}" = --keep ]; then ls /tmp/gpu_pieces; exit 0; fi
cat /tmp/gpu_pieces/bundle.tar.* | tar -C /tmp/gpu_bundle -xf -
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site /tmp/gpu_bundle/wheels/*.whl
PYTHONPATH=/tmp/site python3 -m pip install -q --no-index --no-deps --no-build-isolation --upgrade --target /tmp/site .
cat > /tmp/gpu_env <<ENV
# -P: no checkout on sys.path, so \`import whisper_spec\` finds the installed package (with its cli)
export PYTHONPATH=/tmp/site\${PYTHONPATH:+:\$PYTHONPATH} PATH=/tmp/site/bin:\$PATH PYTHONSAFEPATH=1
export WHISPER_SPEC_SPEECH=/tmp/gpu_bundle/speech PYTHONUNBUFFERED=1
ENV
echo "installed: $(ls /tmp/gpu_bundle/wheels | tr '\n' ' ')"
