"""Where an assistant's own int8 linears should leave the fused kernel for a float GEMM on the
dequantized weight (platform.ASSISTANT_DENSE_ROWS): milliseconds of one call of each own linear shape
of the default pair's assistant, at row counts from a batch-4 step to a prompt's first read, through
forward (the fused kernel in blocks of KERNEL_ROW_BLOCK rows) and many_rows; the two interleaved,
median of --repeats. Writes JSON; prints the smallest row count from which many_rows is faster for
every shape (decisions, "Live transcription").

    python benchmarks/experiments/dense_rows.py --output benchmarks/results/dense_rows_epyc_cpu.json
"""
import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import median_ms  # noqa: E402

from whisper_spec.bench.metrics import machine_info  # noqa: E402
from whisper_spec.models.load import load_pair  # noqa: E402
from whisper_spec.models.quantize import Int8Linear  # noqa: E402

ROWS = (4, 8, 12, 16, 20, 24, 32, 48, 64, 96)


def _shape_timings(linear: Int8Linear, dtype: torch.dtype, repeats: int) -> dict:
    dense_rows, linear.dense_rows = linear.dense_rows, None  # forward on the fused kernel
    found = {}
    try:
        with torch.inference_mode():
            for rows in ROWS:
                x = torch.randn(rows, linear.in_features, dtype=dtype)
                fused, dense = (lambda: linear(x)), (lambda: linear.many_rows(x))
                pairs = [(median_ms(fused, repeats), median_ms(dense, repeats)) for _ in range(3)]  # interleaved
                found[rows] = {"fused_ms": round(min(p[0] for p in pairs), 4), "dense_ms": round(min(p[1] for p in pairs), 4)}
    finally:
        linear.dense_rows = dense_rows
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    pair = load_pair("base")
    shared = {id(m) for m in pair.main.decoder.modules()}
    own = {}
    for linear in pair.assistant.decoder.modules():
        if isinstance(linear, Int8Linear) and id(linear) not in shared:
            own.setdefault((linear.in_features, linear.out_features), linear)
    dtype = pair.assistant.decoder.dtype
    shapes = {f"{i}->{o}": _shape_timings(linear, dtype, args.repeats) for (i, o), linear in own.items()}
    faster = [rows for rows in ROWS if all(s[rows]["dense_ms"] < s[rows]["fused_ms"] for s in shapes.values())]
    report = {"machine": machine_info(pair.device), "threads": torch.get_num_threads(), "dtype": str(dtype),
              "current_dense_rows": pair.assistant.decoder.blocks[0].mlp.fc1.dense_rows, "shapes": shapes,
              "dense_faster_for_every_shape_from": faster[0] if faster else None, "dense_faster_at": faster}
    print(json.dumps(report, indent=1))
    if args.output:
        args.output.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
