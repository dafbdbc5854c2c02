"""CUDA graphs of decoder steps and of whole rounds: a batch-1 step of a small decoder is a few hundred kernel launches
of microseconds each, so on a GPU the launches, not the arithmetic, set its time (gpt-fast's
lesson). A step is captured once per input shape and replayed; replays run the captured kernels,
so their results are the eager step's, bit for bit.

A captured step reads and writes the memory it was captured with: the decoder's KV caches and
cross-attention states must stay where they are (caches.BatchCaches reuses the caches while the
batch shape holds and copies new cross-attention states into the old ones), so graphs are kept
per layout of those buffers. A job alternating batch sizes (the bench interleaves batch 1 and 4)
finds its buffers back at the same addresses, and its graphs with them.

Each layout's graphs share one private memory pool, dropped with them: the caching allocator
cannot reopen a pool whose graphs are all gone (torch's "use_count > 0" internal assert).
"""

from __future__ import annotations

import warnings
from typing import Callable

import torch
from torch import Tensor

from ..models.attention import DecoderCaches


def buffer_layout(caches: DecoderCaches) -> tuple:
    """Where a decoder's caches and cross-attention states lie, and their shapes."""
    return tuple((t.data_ptr(), tuple(t.shape)) for t in caches.tensors())


def _warm_up(fn: Callable, *inputs: Tensor) -> None:
    """fn(*inputs) once off the default stream, as CUDA graphs require before a capture."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn(*inputs)
    torch.cuda.current_stream().wait_stream(stream)


class _Captured:
    def __init__(self, fn: Callable[..., Tensor | tuple[Tensor, ...]], inputs: tuple[Tensor, ...]):
        """fn's warm-up on copies of inputs; an error there is the step's own (capture() comes after)."""
        self.fn = fn  # kept: the graph reads the tensors fn holds (rules' masks) where they were at capture
        self.inputs = tuple(x.clone() for x in inputs)
        _warm_up(fn, *self.inputs)

    def capture(self, pool) -> None:
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, pool=pool):
            self.output = self.fn(*self.inputs)

    def __call__(self, inputs: tuple[Tensor, ...]) -> Tensor | tuple[Tensor, ...]:
        for static, x in zip(self.inputs, inputs):
            static.copy_(x)
        self.graph.replay()
        # clones: the next replay overwrites the static outputs
        if isinstance(self.output, tuple):
            return tuple(x.clone() for x in self.output)
        return self.output.clone()


class StepGraphs:
    """One decoder's captured steps, kept across batches. A capture that fails (an op that cannot be
    captured, too little memory) is reported once, and the decoder's steps run eagerly from then on;
    a step that fails on its own (its warm-up raises) raises, and the graphs stay on."""

    MAX_LAYOUTS = 4  # batch shapes whose graphs are kept (each holds its own memory pool)

    def __init__(self):
        self.failed = False
        # by buffer layout, oldest first: (that layout's pool, its graphs by step name and input shapes)
        self._layouts: dict[tuple, tuple[object, dict[tuple, _Captured]]] = {}

    def __call__(self, caches: DecoderCaches, name, fn: Callable[..., Tensor | tuple[Tensor, ...]], *inputs: Tensor):
        """fn(*inputs), fn a step of the decoder on these caches."""
        if self.failed:
            return fn(*inputs)
        layout = buffer_layout(caches)
        if layout not in self._layouts:
            if len(self._layouts) == self.MAX_LAYOUTS:
                del self._layouts[next(iter(self._layouts))]
            self._layouts[layout] = (torch.cuda.graph_pool_handle(), {})
        pool, graphs = self._layouts[layout]
        key = (name, tuple(x.shape for x in inputs))
        captured = graphs.get(key)
        if captured is None:
            captured = _Captured(fn, inputs)  # a step that fails as it runs (a compile error) raises here
            try:
                captured.capture(pool)
            except Exception as error:  # noqa: BLE001 - any capture failure: eager is always correct
                warnings.warn(f"CUDA graphs turned off: capturing a decoder step failed ({error})", stacklevel=2)
                self.failed = True
                self._layouts.clear()
                return fn(*inputs)
            graphs[key] = captured
        return captured(inputs)


class RoundGraph:
    """A whole decoding round captured as one CUDA graph (fixed_shapes.fixed_round): it reads and
    writes the batch's state and the decoders' caches in place, so a replay is the next round, its
    one launch in place of a round's hundreds. Captured per batch (the state is the batch's own),
    in a private memory pool freed with it."""

    def __init__(self, run_round: Callable[[], None]):
        self.run_round = run_round  # kept: the graph reads the tensors it holds where they were at capture
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):  # recorded, not run: the state stays as it was
            run_round()

    def replay(self) -> None:
        self.graph.replay()


def capture_round(run_round: Callable[[], None]) -> RoundGraph | None:
    """Run one round (the warm-up) and capture it for the rounds after; None, with a warning, where
    the capture fails: the rounds then run step by step. An error of the round itself is raised."""
    _warm_up(run_round)
    try:
        return RoundGraph(run_round)
    except Exception as error:  # noqa: BLE001 - any capture failure: step by step is always correct
        warnings.warn(f"CUDA graphs turned off for whole rounds: capturing one failed ({error})", stacklevel=2)
        return None


def step_graphs(decoder) -> StepGraphs:
    """The decoder's captured steps, kept by the decoder (kept.DecoderKept; made at first use)."""
    if decoder.kept.step_graphs is None:
        decoder.kept.step_graphs = StepGraphs()
    return decoder.kept.step_graphs
