#!/usr/bin/env bash
# A multilingual batch job: the shared FLEURS recordings in German, English, Spanish, French and
# Portuguese, one manifest line each with its language, through `whisper-spec batch` with the
# defaults; DIR/summary.json has the assistant's acceptance per language, DIR/*.txt the transcripts.
#   OUT=DIR      where the job writes (default benchmarks/results/multilingual_batch_<device>; must not exist)
# Extra arguments go to `whisper-spec batch`.
set -euo pipefail
cd "$(dirname "$0")/../.."
device=$(python -c 'import torch; print("cuda" if torch.cuda.is_available() else "cpu")')
out=${OUT:-benchmarks/results/multilingual_batch_$device}
if [ -e "$out" ]; then echo "$out exists: remove it or set OUT" >&2; exit 2; fi
jobs=$(mktemp -d)/jobs.jsonl
trap 'rm -rf "$(dirname "$jobs")"' EXIT
python - ../shared/data/speech > "$jobs" <<'PY'
import json, pathlib, sys
speech = pathlib.Path(sys.argv[1]).resolve()
for line in (speech / "manifest.jsonl").read_text().splitlines():
    row = json.loads(line)
    if row["set"].startswith("fleurs_"):
        print(json.dumps({"path": str(speech / row["path"]), "language": row["language"]}))
PY
whisper-spec batch "$jobs" -o "$out" -f txt "$@"
