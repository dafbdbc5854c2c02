"""The decoder's attention kernels alone on a GPU, at base's shapes in float16 (8 heads of 64):
self-attention over a 457-position cache under a mask (an additive bias, -inf where blocked),
cross-attention over 1500 frames without one, for 1 and 8 rows and windows of 1 and 5 positions. Per SDPA backend
(cuDNN, flash, memory-efficient, math) and the written-out attention (attention.attend): the first
call's seconds (cuDNN builds a plan per new shape there), microseconds a call replayed from a CUDA
graph (how decoding runs them), and the largest difference from the written-out result. Random
inputs: no model weights needed.
Usage: python benchmarks/experiments/gpu_attention_kernels.py [--output OUT.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: no install needed (nor soundfile)
from whisper_spec.models.attention import attend

BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}
CALLS_A_GRAPH = 20


def inputs(rows: int, width: int, keys: int, masked: bool, device, dtype):
    q = torch.randn(rows, 8, width, 64, device=device, dtype=dtype)
    k, v = (torch.randn(rows, 8, keys, 64, device=device, dtype=dtype) for _ in range(2))
    blocked = None
    if masked:  # each row's window at its own positions, the cache past them stale
        last = torch.randint(width, keys // 2, (rows,), device=device)
        positions = last[:, None] - width + 1 + torch.arange(width, device=device)
        blocked = torch.arange(keys, device=device) > positions[:, None, :, None]
    return q, k, v, blocked


def attention_bias(blocked, dtype):
    """The mask as F.scaled_dot_product_attention's additive attn_mask: -inf where a query may not attend."""
    return torch.zeros(blocked.shape, dtype=dtype, device=blocked.device).masked_fill(blocked, float("-inf"))


def kernel(name: str, blocked, dtype):
    if name == "written-out":
        return lambda q, k, v: attend(q, k, v, blocked, 0)
    bias = None if blocked is None else attention_bias(blocked, dtype)

    def sdpa(q, k, v):
        with sdpa_kernel([BACKENDS[name]]):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    return sdpa


def measure(fn, q, k, v, reference) -> dict:
    start = time.perf_counter()
    try:
        out = fn(q, k, v)
        torch.cuda.synchronize()
    except RuntimeError as error:  # a backend that does not take these inputs
        return {"error": str(error).splitlines()[0][:200]}
    first = time.perf_counter() - start
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn(q, k, v)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(CALLS_A_GRAPH):
            fn(q, k, v)
    graph.replay()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(10):
        begin.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end) * 1000 / CALLS_A_GRAPH)
    return {"first_call_seconds": first, "us_a_call": sorted(times)[len(times) // 2],
            "max_abs_difference": float((out.float() - reference.float()).abs().max())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    device, dtype = torch.device("cuda"), torch.float16
    torch.manual_seed(0)
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cases": []}
    for attention, keys, masked in (("self", 457, True), ("cross", 1500, False)):
        for rows in (1, 8):
            for width in (1, 5):
                q, k, v, blocked = inputs(rows, width, keys, masked, device, dtype)
                reference = attend(q, k, v, blocked, 0)
                case = {"attention": attention, "rows": rows, "width": width, "keys": keys, "kernels": {}}
                for name in ("written-out", *BACKENDS):
                    case["kernels"][name] = measure(kernel(name, blocked, dtype), q, k, v, reference)
                report["cases"].append(case)
                print(attention, rows, width, {n: round(r.get("us_a_call", -1), 1) for n, r in case["kernels"].items()},
                      {n: round(r.get("first_call_seconds", -1), 3) for n, r in case["kernels"].items()}, file=sys.stderr)
    if args.output:
        args.output.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
