"""State belongs to the loaded pair: two pairs in one process decode independently, and releasing a
pair releases its buffers (no module-level store holds a model, a cache, rules or a graph)."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import torch
from conftest import perturbed_decoder, random_model

from whisper_spec.decode.decoding import decode_windows
from whisper_spec.models.pair import WhisperPair
from whisper_spec.options import DecodingOptions, VadOptions

CPU = torch.device("cpu")
OPTIONS = DecodingOptions(language="en", temperature=(0.0,), speculation="on")


def _pair(seed: int) -> WhisperPair:
    main = random_model(seed)
    return WhisperPair(main, perturbed_decoder(main, 0.1, seed + 100), CPU, torch.float32)


def _mel(seed: int, batch: int) -> torch.Tensor:
    return torch.randn(batch, 80, 3000, generator=torch.Generator().manual_seed(seed))


def _tokens(pair: WhisperPair, mel: torch.Tensor) -> list[list[int]]:
    return [r.tokens for r in decode_windows(pair, mel, OPTIONS)[0]]


def _speech(pair: WhisperPair) -> list[tuple[int, int]]:
    """The pair's voice activity detector over 40 s of a tone that starts and stops."""
    seconds = np.arange(40 * 16000) / 16000
    tone = (0.3 * np.sin(2 * np.pi * 220 * seconds) * ((seconds // 5) % 2)).astype(np.float32)
    return pair.speech_detector.regions(tone, VadOptions(), 30.0)


def test_two_pairs_in_one_process_decode_as_each_does_alone():
    """Pairs decoding in turn, at batch shapes the other also uses, write what each writes on its own,
    and each keeps its buffers and rules in its own decoders."""
    mels = [_mel(1, 2), _mel(2, 1)]
    alone = [[_tokens(_pair(seed), mel) for mel in mels] for seed in (0, 1)]
    first, second = _pair(0), _pair(1)
    interleaved = [[], []]
    for mel in mels + mels:
        for pair, found in zip((first, second), interleaved):
            found.append(_tokens(pair, mel))
    assert interleaved[0] == alone[0] * 2 and interleaved[1] == alone[1] * 2
    assert alone[0] != alone[1]  # the two pairs write different things: the comparison could fail
    assert first.speech_detector is not second.speech_detector and _speech(first) == _speech(second)
    mine, theirs = first.main.decoder.kept, second.main.decoder.kept
    assert len(mine.self_attention) == len(theirs.self_attention) == 2  # batch 2 and batch 1
    assert len(mine.rules) and len(theirs.rules)
    kept_tensors = {id(t) for caches in mine.self_attention._entries.values() for c in caches for t in (c.k, c.v)}
    assert not kept_tensors & {id(t) for caches in theirs.self_attention._entries.values() for c in caches
                               for t in (c.k, c.v)}


def _tensors() -> int:
    gc.collect()  # type(), not isinstance: a dead weak proxy among the objects raises on isinstance
    return sum(1 for o in gc.get_objects() if issubclass(type(o), torch.Tensor))


def test_releasing_a_pair_releases_its_models_and_buffers():
    """After a pair decodes and finds speech and is dropped, its decoders and voice activity model are
    gone and the process holds no more tensors than before it was loaded: nothing outside the pair
    kept its caches, rules, states or models."""
    first = _pair(3)
    _tokens(first, _mel(3, 2))  # first use of everything a decoding touches (imports, lazy tables)
    _speech(first)
    del first
    before = _tensors()
    pair = _pair(4)
    _tokens(pair, _mel(4, 2))
    _tokens(pair, _mel(5, 1))
    _speech(pair)
    decoders = [weakref.ref(pair.main.decoder), weakref.ref(pair.assistant.decoder),
                weakref.ref(pair.speech_detector.model)]
    assert len(pair.main.decoder.kept.self_attention) == 2 and _tensors() > before
    del pair
    assert _tensors() == before
    assert all(ref() is None for ref in decoders)
