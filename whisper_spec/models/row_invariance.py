"""Row invariance, probed: which padding makes this CPU's kernels compute a decoder position alike
however many positions and rows share a call (decisions, "Exactness on CPU: row-invariant kernels, else fixed shapes"), and a decoder set up
so where some padding does."""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from .attention import attend, keys_in_memory
from .model import Decoder, Linear, padded_rows
from .quantize import Int8Linear

# the row counts a call may be padded to, in the probes of row invariance
PROBED_ROW_COUNTS = (1, 2, 4, 8, 16)


def _rows_alike(product, x: Tensor, min_rows: int) -> bool:
    """Whether product(rows, min_rows) gives each of x's rows (dim -2) the result it gives that row
    alone, bit for bit, whatever rows share the call: x is cut into calls of 2, 3, 4, 5, 9 and 17 rows."""
    alone = torch.cat([product(row, min_rows) for row in x.split(1, dim=-2)], dim=-2)
    return all(torch.equal(torch.cat([product(rows, min_rows) for rows in x.split(count, dim=-2)], dim=-2), alone)
               for count in (2, 3, 4, 5, 9, 17))


def fewest_rows_alike(product, x: Tensor) -> int | None:
    """The fewest rows (of PROBED_ROW_COUNTS) that padding every call to makes product(rows,
    min_rows) compute each row alike whatever the row count, None where none does. Measured, not
    assumed: GEMM libraries pick micro-kernels and summation orders by row count, differently
    between instruction sets."""
    return next((min_rows for min_rows in PROBED_ROW_COUNTS if _rows_alike(product, x, min_rows)), None)


_LINEAR_ROWS: dict[tuple, int | None] = {}  # linear_rows' answers


def linear_rows(linear: Linear, dtype: torch.dtype) -> int | None:
    """The fewest rows from which this linear's kernel computes every row alike, probed once per
    shape, dtype, kernel and thread count. Int8 kernels compute rows alike at any count
    (quantize.int8pack_mm): not probed."""
    if not isinstance(linear, Linear):
        return 1
    key = (linear.in_features, linear.out_features, dtype, linear.bias is not None,
           linear.packed is not None and dtype == torch.float32, torch.get_num_threads())
    if key not in _LINEAR_ROWS:
        # a half-precision result hides most differences in the float32 sums behind its rounding
        # (one element in thousands shows one): enough rows that ~2^18 elements are compared
        n_rows = 18 if dtype == torch.float32 else max(18, -(-2**18 // linear.out_features))
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(n_rows, linear.in_features, generator=generator).to(device=linear.weight.device, dtype=dtype)
        with torch.no_grad():
            _LINEAR_ROWS[key] = fewest_rows_alike(lambda rows, min_rows: padded_rows(linear.product, rows, min_rows), x)
    return _LINEAR_ROWS[key]


@functools.cache
def query_rows(dtype: torch.dtype = torch.float32, transposed_keys: bool = False) -> int:
    """The fewest query rows from which this CPU's batched matmuls in dtype compute every row alike
    whatever the row count; 0 where none up to 16 does (attention then goes a query at a time).
    Probed on the attention's shapes in a one-window step (8 heads of 64, a window of keys, base's
    cache) with keys laid out as the decoder keeps them (model.keys_in_memory), with this process's
    threads."""
    generator = torch.Generator().manual_seed(0)
    queries = torch.randn(8, 18, 64, generator=generator).to(dtype)
    keys_values = [(keys_in_memory(torch.randn(8, n_keys, 64, generator=generator).to(dtype), transposed_keys),
                    torch.randn(8, n_keys, 64, generator=generator).to(dtype)) for n_keys in (465, 1500)]
    rows = fewest_rows_alike(lambda q, min_queries: torch.cat(
        [attend(q, k, v, None, min_queries) for k, v in keys_values], dim=-1), queries)
    return rows or 0


def make_row_invariant(decoder: Decoder, device: torch.device) -> bool:
    """Where a decoder position's result can be made not to depend on how many positions and rows
    share a call (CPU: each linear padded to the rows its kernel needs, attention's queries padded),
    set the decoder up so and say True. Elsewhere (cuBLAS and fused kernels choose algorithms by
    shape), or where a linear's probe finds no padding (bfloat16 float linears under oneDNN's
    AVX512_CORE kernels), False: decoding gives every main call one shape."""
    if device.type != "cpu":
        return False
    linears = [m for m in decoder.modules() if isinstance(m, (Linear, Int8Linear))]
    rows = [linear_rows(linear, decoder.dtype) for linear in linears]
    if any(n is None for n in rows):
        return False
    for linear, n in zip(linears, rows):
        if isinstance(linear, Linear):
            linear.pad_rows = n
    decoder.exact_queries = query_rows(decoder.cache_dtype, decoder.transposed_keys)
    return True
