#!/usr/bin/env bash
# On the GPU machine: joins the pieces benchmarks/gpu_bundle.sh made (.gpu/N/bundle.tar.*), installs
# the wheels into /tmp/site and whisper-spec from this checkout (no network), and writes /tmp/gpu_env
# (PYTHONPATH, PATH, WHISPER_SPEC_SPEECH) for `. /tmp/gpu_env` before benchmarks/gpu.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p /tmp/gpu_bundle
for piece in $(ls .gpu/*/bundle.tar.* | xargs -n1 basename | sort); do cat .gpu/*/"$piece"; done |
  tar -C /tmp/gpu_bundle -xf -
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site /tmp/gpu_bundle/wheels/*.whl
PYTHONPATH=/tmp/site python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/site .
cat > /tmp/gpu_env <<ENV
export PYTHONPATH=/tmp/site\${PYTHONPATH:+:\$PYTHONPATH} PATH=/tmp/site/bin:\$PATH
export WHISPER_SPEC_SPEECH=/tmp/gpu_bundle/speech PYTHONUNBUFFERED=1
ENV
echo "installed: $(ls /tmp/gpu_bundle/wheels | tr '\n' ' ')"
