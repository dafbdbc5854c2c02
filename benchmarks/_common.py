"""What the benchmark scripts share: where the shared data lies and how reports are written."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
# WHISPER_SPEC_SPEECH: a copy of the speech folder elsewhere (a GPU machine that ../shared does not reach)
SPEECH = Path(os.environ.get("WHISPER_SPEC_SPEECH", SHARED / "speech"))


def manifest_rows() -> list[dict]:
    return [json.loads(line) for line in (SPEECH / "manifest.jsonl").read_text().splitlines() if line.strip()]


def write_report(report: dict, output: Path | None) -> int:
    """Print the report as JSON and write it to output when given."""
    if output:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


def progress(entry: dict) -> None:
    print(json.dumps(entry), file=sys.stderr)
