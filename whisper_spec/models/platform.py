"""What the device and this CPU decide, in one place.

Kernels, their exactness and the measured policies differ by device kind and CPU instruction set.
Everything that tells them apart lives here: the loaders' defaults (decoder and encoder precision),
how modules are prepared for a device (packed weights, attention dtype, int8 kernels, one encoder
window a call), the probes of which kernels run and which compute a decoder position alike however
many positions share a call, and a `Platform` record resolved once per loaded pair that decoding
reads. model.py, quantize.py, decoding.py and encoding.py ask the record or the settings it put on
the modules; none of them tests the device itself. The reasons and figures behind each choice: docs/decisions.md.
"""

from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from .model import Decoder, Encoder, Linear
from .quantize import (
    ROW_INT8_ENGINE,
    Int8Linear,
    compiled_dequantize_mm,
    dynamic_int8_available,
    pack_row_int8,
    quantize_per_channel,
    row_int8_mm,
)
from .row_invariance import make_row_invariant

# speculation="auto": the most rows x assistant frames of a batch whose rounds draft, by device kind
# and main decoder precision ("float" or "int8"); a pair not listed always drafts (AVX2 CPUs: drafting
# measured to pay up to four full windows). Decisions, "Automatic speculation limit", "Defaults by CPU kind".
AUTO_MAX_DRAFT_FRAMES: dict[tuple[str, str], int] = {
    ("cpu", "int8"): 3 * 1500, ("cpu-amx", "int8"): 1500, ("cuda", "float"): 0}


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work, so a timer read after it measures that work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def check_device(device: torch.device) -> None:
    """A device torch can use, else a one-line error."""
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device} asked for, but torch sees no CUDA device")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise ValueError(f"device {device} asked for, but torch sees {torch.cuda.device_count()} CUDA device(s)")


def device_type(device: torch.device) -> str:
    """"cpu" or "cuda": the device as other libraries name it (CTranslate2, for the bench's peers)."""
    return device.type


def counts_allocator_memory(device: torch.device) -> bool:
    """Whether a peak memory is the device allocator's (CUDA) rather than the process's resident set."""
    return device.type == "cuda"


def gpu_name(device: torch.device) -> str | None:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else None


def cpu_has_amx() -> bool:
    """Whether oneDNN may use AMX tiles here (its bfloat16 and int8 matrix units, Xeon Sapphire Rapids
    on): the CPU has them and neither ONEDNN_MAX_CPU_ISA nor ATen's capability holds kernels below them."""
    probe = getattr(torch.cpu, "_is_amx_tile_supported", None)
    limit = (os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or "ALL").upper()
    return bool(probe and probe()) and ("AMX" in limit or limit in ("ALL", "DEFAULT")) and not cpu_limited_to_avx2()


def cpu_limited_to_avx2() -> bool:
    """Whether ATen runs AVX2 kernels at most: an AVX2-only CPU (no AVX-512), or one held to them by
    ATEN_CPU_CAPABILITY=avx2 (as .ci/run's second pass does, with oneDNN's, MKL's and fbgemm's limits)."""
    return torch.backends.cpu.get_cpu_capability() == "AVX2"


def device_kind(device: torch.device) -> str:
    """What measured policies are keyed on: "cuda", or the CPU as its kernels see it: "cpu-amx" (AMX
    tiles), "cpu-avx2" (AVX2 kernels at most), else "cpu" (AVX-512 without AMX, and other CPUs)."""
    if device.type != "cpu":
        return device.type
    return "cpu-amx" if cpu_has_amx() else "cpu-avx2" if cpu_limited_to_avx2() else "cpu"


# ---------------------------------------------------------------------------- int8 kernels


_KERNELS: dict[tuple[str, torch.dtype], str] = {}  # kernel_for's answers


def kernel_for(device_type: str, dtype: torch.dtype) -> str:
    """The fastest int8 matmul that runs here: 'row_int8' (float32 on CPU, see row_int8_mm),
    'int8pack_mm', 'compiled' or 'dequantize'.

    Probed once per device type and dtype, outside any compiled code: a compiled caller (the
    compiled draft step) reads the answer as a constant (a functools.cache would be traced through,
    the probe's ops compiled into every step)."""
    key = (device_type, dtype)
    if key not in _KERNELS:
        _KERNELS[key] = _probe_kernel(device_type, dtype)
    return _KERNELS[key]


def _probe_kernel(device_type: str, dtype: torch.dtype) -> str:
    """The probe's weight has the layout every real one is given (fresh, contiguous, aligned) and
    an odd row count like the vocabulary's: a kernel that crashes rather than raises is not caught."""
    device = torch.device(device_type)
    x = torch.randn(2, 64, dtype=dtype, device=device)
    weight, scales = quantize_per_channel(torch.randn(33, 64))
    if device_type == "cpu" and dtype == torch.float32 and ROW_INT8_ENGINE in torch.backends.quantized.supported_engines:
        try:
            row_int8_mm(x, pack_row_int8(weight, scales))
            return "row_int8"
        except (RuntimeError, NotImplementedError, AttributeError):
            pass
    try:
        torch.ops.aten._weight_int8pack_mm(x, weight.to(device), scales.to(device=device, dtype=dtype))
        return "int8pack_mm"
    except (RuntimeError, NotImplementedError, AttributeError):
        pass
    try:
        compiled_dequantize_mm()(x, weight.to(device), scales.to(device=device, dtype=dtype))
        return "compiled"
    except Exception:  # noqa: BLE001 - no compiler backend here: fall back, and say so
        return "dequantize"


# ATen's fused int8 kernel shares blocks of 4 rows among threads block-row first, so from 5 rows on one
# thread gets a whole block's product; 4 rows a call share out the output channels instead, each row's
# result the same (decisions, "int8 kernel calls of 4 rows on CPU").
KERNEL_ROW_BLOCK = 4


def prepare_int8(module: nn.Module, device: torch.device, dtypes) -> None:
    """Give the module's int8 linears their kernel for activations of each of these dtypes on the
    device (added to any they have: a tied embedding serves decoders of two dtypes), and on CPU
    fused-kernel calls of at most KERNEL_ROW_BLOCK rows."""
    for linear in module.modules():
        if isinstance(linear, Int8Linear):
            linear.kernels = {**linear.kernels, **{dtype: kernel_for(device.type, dtype) for dtype in dtypes}}
            linear.row_block = KERNEL_ROW_BLOCK if device.type == "cpu" else None


# ---------------------------------------------------------------------------- loaders' defaults


# int8 decoders' activations by CPU kind where both int8 kernels run: float32 rows on the row-int8
# kernel (quantize.row_int8_mm) where bfloat16 has no instructions of its own; elsewhere bfloat16 rows
# on aten's fused int8-weight kernel. Decisions, "Defaults by CPU kind".
INT8_ROWS_BY_KIND: dict[str, str] = {"cpu-avx2": "float32"}


def cpu_int8_dtype() -> str | None:
    """The activation dtype int8 decoders run fastest with on this CPU: INT8_ROWS_BY_KIND's (bfloat16
    where not listed) where its kernel runs, else the other's; None where neither kernel runs.
    Decisions, "int8 decoders by default on CPU, and their activations"."""
    runs = [dtype for dtype, its_kernel_runs in (("bfloat16", kernel_for("cpu", torch.bfloat16) == "int8pack_mm"),
                                                 ("float32", kernel_for("cpu", torch.float32) == "row_int8"))
            if its_kernel_runs]
    preferred = INT8_ROWS_BY_KIND.get(device_kind(torch.device("cpu")), "bfloat16")
    return preferred if preferred in runs else next(iter(runs), None)


def default_int8(device: torch.device) -> bool:
    """Whether decoders' linears go int8 when not told: on CPU wherever a fast int8 kernel runs
    (cpu_int8_dtype); elsewhere float, as int8 weights save GPU memory, not time. Decisions, "int8
    decoders by default on CPU"."""
    return device.type == "cpu" and cpu_int8_dtype() is not None


def idle_cores(readings: int = 3) -> int | None:
    """The cores this process may use that no other process keeps busy now: a busy core shared by
    two of torch's threads makes every parallel region wait for a time slice (benchmarks/threads.py).
    From /proc/loadavg's count of runnable threads, the fewest of a few readings 10 ms apart, less
    this one; None where that cannot be read (not Linux)."""
    try:
        cores = len(os.sched_getaffinity(0))
        running = []
        for reading in range(readings):
            if reading:
                time.sleep(0.01)
            running.append(int(Path("/proc/loadavg").read_text().split()[3].split("/")[0]))
    except (OSError, AttributeError, ValueError, IndexError):
        return None
    return max(1, cores - (min(running) - 1))


def _environment_threads() -> int | None:
    try:
        return max(1, int(os.environ["OMP_NUM_THREADS"]))
    except (KeyError, ValueError):
        return None


_THREADS_CHOSEN = False  # torch's thread count is the process's: chosen once, by the first load without a count


def use_threads(threads: int | None) -> int:
    """Set torch's CPU threads for the process before a pair loads (its kernels' row invariance is
    probed with the threads that will run them): `threads` where given; else, the first time,
    OMP_NUM_THREADS where the environment sets it (a count the user or a test runner's worker chose)
    or the idle cores (idle_cores), as the command line does; after that the count already set."""
    global _THREADS_CHOSEN
    if threads is None and not _THREADS_CHOSEN:
        threads = _environment_threads() or idle_cores()
    if threads is not None:
        torch.set_num_threads(threads)
        _THREADS_CHOSEN = True
    return torch.get_num_threads()


def default_device() -> torch.device:
    """Where load_pair and the command line decode unless told: the first CUDA device where there is one."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def default_precision(device: torch.device, int8: bool | None = None, dtype: str | torch.dtype | None = None
                      ) -> tuple[bool, str | torch.dtype]:
    """int8 decoders and the activation dtype as the command line and load_pair load them, where not given:
    int8 per default_int8; float16 on CUDA; on CPU cpu_int8_dtype with int8 decoders, else float32."""
    if int8 is None:
        int8 = default_int8(device)
    if device.type == "cuda":
        return int8, dtype or "float16"
    return int8, dtype or ((cpu_int8_dtype() or "bfloat16") if int8 else "float32")


def default_encoder_precision(device: torch.device, dtype: torch.dtype) -> str:
    """The encoder's precision where the caller does not say: on CPU bfloat16 where the CPU has AMX,
    else int8 linears where DynamicInt8Linear runs, else float32; elsewhere the activation dtype.
    Decisions, "Encoder precision by CPU"."""
    if device.type != "cpu":
        return str(dtype).removeprefix("torch.")
    if cpu_has_amx():
        return "bfloat16"
    return "int8" if dynamic_int8_available() else "float32"


def dynamic_int8_runs(device: torch.device) -> bool:
    """Whether int8 encoder linears (DynamicInt8Linear, oneDNN's CPU GEMM) run on this device."""
    return device.type == "cpu" and dynamic_int8_available()


def int8_assistant_in_bfloat16(device: torch.device) -> bool:
    """Whether an int8 assistant of a float32 main model computes in bfloat16: wherever aten's fused
    int8-weight kernel, the fastest for one-row steps, runs (load.assistant_precision)."""
    return device.type != "cpu" or kernel_for("cpu", torch.bfloat16) == "int8pack_mm"


# ---------------------------------------------------------------------------- modules for a device


def onednn_packed(weight: Tensor) -> Tensor | None:
    """oneDNN's blocked copy of a float32 CPU weight, None where oneDNN does not run. Packed for 16
    rows, its kernel computes every row alike whatever the row count, which F.linear's float32
    kernels do not, and is faster at decoding's row counts (decisions, "Packed float32 linears")."""
    if weight.device.type != "cpu" or weight.dtype != torch.float32 or weight.is_meta:
        return None
    try:
        return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), 16)
    except (AttributeError, RuntimeError):
        return None


def prepare(module: nn.Module, device: torch.device) -> None:
    """Set a loaded encoder's or decoder's modules up for the device: a decoder's float32 CPU
    linears packed for oneDNN and its keys and values in float32 on CPU (half-precision batched
    matmuls are unvectorised without bfloat16 instructions, and with them round the attention
    scores: decisions, "Attention stays float32 on CPU"); off CPU (where no call is row-invariant
    anyway) its cross-attention through flash attention where that runs and its vocabulary
    projection's rows aligned; a CPU encoder run one window a call. Idempotent; a packed copy does
    not follow later changes to its weight."""
    cpu = device.type == "cpu"
    for part in module.modules():
        if isinstance(part, Decoder):
            for linear in part.modules():
                if isinstance(linear, Linear) and linear.packed is None:
                    linear.packed = onednn_packed(linear.weight)
            part.attention_dtype = torch.float32 if cpu else None
            part.flash_cross_attention = flash_attention_runs(device, part.cache_dtype)
            part.transposed_keys = cpu  # written-out attention's q k^T reads them in rows
            if not cpu:
                part.align_vocab_rows()
            # on CPU float32 too: the output projection's int8 activations (Int8Linear.int8_activations)
            prepare_int8(part, device, {part.dtype, torch.float32} if cpu else {part.dtype})
        elif isinstance(part, Encoder):
            # batched passes page-fault their large activations, and a window's states would depend on
            # its batch (decisions, "One encoder window a call on CPU")
            part.one_window_a_call = cpu


# an assistant's calls of this many rows or more (a round's first step reads the tokens since its cache
# last did: a prompt, a hint) through a float GEMM on the dequantized weight (Int8Linear.many_rows): on
# CPU the fused kernel runs them in blocks of KERNEL_ROW_BLOCK rows at about half that GEMM's speed
ASSISTANT_DENSE_ROWS = 16


def prepare_assistant(decoder: Decoder, main: Decoder, device: torch.device) -> None:
    """An assistant's own int8 linears (not those it shares with main, whose results must not depend
    on a call's width) take wide calls through a float GEMM on CPU: its drafts need not be exact. Not
    its vocabulary projection (one row a batch row): dequantizing its 10M weights costs more than the
    fused kernel's call at any row count measured (benchmarks/experiments/dense_rows.py)."""
    fused = {id(module) for module in main.modules()}
    if decoder.proj_out is not None:
        fused |= {id(module) for module in decoder.proj_out.modules()}
    for linear in decoder.modules():
        if isinstance(linear, Int8Linear) and id(linear) not in fused:
            linear.dense_rows = ASSISTANT_DENSE_ROWS if device.type == "cpu" else None


@functools.cache
def flash_attention_runs(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether flash attention's kernel runs on this (non-CPU) device in dtype (half precision on
    recent GPUs): tried once on a tiny input."""
    if device.type == "cpu":
        return False
    q = torch.zeros(1, 1, 1, 64, device=device, dtype=dtype)
    try:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            F.scaled_dot_product_attention(q, q, q)
        return True
    except RuntimeError:
        return False


# ---------------------------------------------------------------------------- the record


@dataclass(frozen=True)
class Platform:
    """What decoding a pair on its device does differently, resolved once when the pair is made."""

    kind: str  # device_kind: what measured policies are keyed on
    row_invariant: bool  # main calls of any shape give a position the same logits (else: fixed-width calls)
    cuda_graphs: bool  # decoder steps can be replayed from CUDA graphs
    # what DecodingOptions.compile puts through torch.compile: "drafts" (CPU: fuses the one-row draft
    # step) or "rounds" (GPUs: a fixed-shape round's draft, verification and bookkeeping steps, each
    # then replayed from CUDA graphs: fewer, fused kernels in every graph)
    compiles: str
    assistant_skips_padding: bool  # an assistant attends to the audio's frames only (not on GPUs: one graph shape)
    auto_max_draft_frames: int | None  # speculation="auto": rows x assistant frames that still draft; None: no limit
    # fixed-shape rounds run between two host reads of "every row done": reads stall a GPU's queue, and
    # rounds after the last row ended change nothing; on CPU a read costs nothing, an extra round a step
    rounds_per_read: int = 1


def resolve(main: Decoder, assistant: Decoder | None, device: torch.device) -> Platform:
    """Prepare the pair's decoders for the device and probe the main decoder's row invariance."""
    for decoder in (main, assistant):
        if decoder is not None:
            prepare(decoder, device)
    kind = device_kind(device)
    precision = "int8" if isinstance(main.blocks[0].mlp.fc1, Int8Linear) else "float"
    return Platform(kind=kind, row_invariant=make_row_invariant(main, device), cuda_graphs=device.type == "cuda",
                    compiles="drafts" if device.type == "cpu" else "rounds", assistant_skips_padding=device.type == "cpu",
                    auto_max_draft_frames=AUTO_MAX_DRAFT_FRAMES.get((kind, precision)),
                    rounds_per_read=4 if device.type == "cuda" else 1)
