"""Kept: a bounded store of things costly to make again (a batch shape's caches, a pass's logit
rules, a captured round), the least recently used dropped first."""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Generic, Hashable, TypeVar

Value = TypeVar("Value")


class Kept(Generic[Value]):
    def __init__(self, size: int):
        self.size = size
        self._entries: OrderedDict[Hashable, Value] = OrderedDict()

    def recall(self, key: Hashable) -> Value | None:
        """The entry of key, now the most recently used; None where there is none."""
        if key not in self._entries:
            return None
        self._entries.move_to_end(key)
        return self._entries[key]

    def keep(self, key: Hashable, value: Value) -> Value:
        """value, kept under key as the most recently used (the least recently used dropped past size)."""
        self._entries[key] = value
        self._entries.move_to_end(key)
        if len(self._entries) > self.size:
            self._entries.popitem(last=False)
        return value

    def get(self, key: Hashable, make: Callable[[], Value]) -> Value:
        """The entry of key, made by make() where there is none."""
        value = self.recall(key)
        return self.keep(key, make()) if value is None else value

    def newest(self) -> Hashable | None:
        """The most recently used key (None: nothing kept)."""
        return next(reversed(self._entries), None)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries


class DecoderKept:
    """What a decoder keeps between batches, held by the decoder itself so that it belongs to the
    loaded pair: two pairs in one process never share it, and releasing a pair releases it (no
    module-level store holds a model, a cache or a graph)."""

    # batch shapes whose self-attention caches and (stable) cross-attention states are kept, most
    # recently used last: a job alternating batch sizes (the bench interleaves batch 1 and 4) finds
    # each shape's buffers, and CUDA graphs captured on them, again
    SHAPES = 4
    # logit rules of recent (timestamps, device, vocabulary): making them takes vocabulary-wide ops and
    # a host read, and every decoding pass needs them (twice with a draft vocabulary)
    RULES = 16
    # whole rounds captured with this decoder as the main model, by configuration: capturing costs a
    # warm-up round and the capture, more than a short window's few rounds save
    WHOLE_ROUNDS = 8

    def __init__(self):
        self.self_attention: Kept = Kept(self.SHAPES)  # caches.self_attention_caches
        self.cross: Kept = Kept(self.SHAPES)  # caches.stable_cross
        self.rules: Kept = Kept(self.RULES)  # rules.LogitRules.kept
        self.whole_rounds: Kept = Kept(self.WHOLE_ROUNDS)  # fixed_shapes.whole_rounds
        self.step_graphs = None  # graphs.StepGraphs, made at its first capture
