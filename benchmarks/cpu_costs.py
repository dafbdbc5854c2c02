"""Where CPU time goes, per 30 s window and per decoder step, next to CTranslate2 on the same weights.

Times, interleaved over repeats (medians): the encoder per window (ours float32, int8 and bfloat16,
the CPU defaults without and with AMX; CTranslate2 float32 and int8 where installed, in
faster-whisper's process of its own), the main decoder's cross-attention keys and
values of a window (float32, int8 beside the int8 encoder, int8 decoder beside a float32 encoder),
ours (float32) on a batch of 4 windows in
one pass against window by window (with the minor page faults each takes: why
encoding.encoder_states goes window by window on CPU), and the main decoder per step, main-only
greedy on LibriSpeech clips, float32 and int8 (bfloat16 rows on aten's int8-weight kernel, the CPU
default, and float32 rows on the row-int8 kernel), plus the ops that take the
step's time (torch profiler, self time per step) and their sum: a step's time beyond it is Python
and dispatch between the ops; the output projection of each by rows in a call (int8 also through
aten's int8-weight kernel). And the parts of a speculative round at batch 1 (the same three main
decoders + the shipped assistant): a main call scoring 1-5 positions and an assistant draft step (eager, and
compiled as --compile does), in one-token main steps. The numbers that decide what to make
faster next.

    python benchmarks/cpu_costs.py --clips 8 --output benchmarks/results/cpu_costs.json
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from pathlib import Path

import torch
from _common import SPEECH, manifest_rows, median_ms, parse_args, write_report

from whisper_spec.bench.metrics import machine_info
from whisper_spec.bench.peers import FasterWhisperPeer
from whisper_spec.decode.decoding import decode_encoded, decode_windows
from whisper_spec.decode.drafts import compiled_draft_logits, draft_logits
from whisper_spec.decode.encoding import encode
from whisper_spec.decode.stats import DecodingStats
from whisper_spec.models.attention import DecoderCaches
from whisper_spec.models.load import load_pair
from whisper_spec.models.sources import ct2_source
from whisper_spec.options import DecodingOptions
from whisper_spec.speech.audio import batch_features, load_audio


def _encoder_seconds(pair, mel: torch.Tensor) -> float:
    start = time.perf_counter()
    with torch.inference_mode():
        pair.main.encoder(mel)
    return time.perf_counter() - start


def _cross_kv_seconds(pair, states: torch.Tensor) -> float:
    """The main decoder's cross-attention keys and values of one window's encoder states."""
    start = time.perf_counter()
    with torch.inference_mode():
        pair.main.decoder.cross_states(states)
    return time.perf_counter() - start


def _projection_ms_by_rows(pair, repeats: int, int8_activations: bool = True) -> dict:
    """ms of the main decoder's output projection (51865 x 512 for base) by rows in one call: its
    kernel's cost as verification adds rows (int8: quantize.row_int8_mm, or with int8_activations
    False aten's fused int8-weight kernel on the bfloat16 rows; float32: oneDNN's packed one)."""
    projection, d_model, dtype = pair.main.decoder.proj_out, pair.main.dims.d_model, pair.main.decoder.dtype
    if not int8_activations:
        projection = projection.rows(torch.arange(projection.out_features))
        projection.int8_activations = False
    with torch.inference_mode():
        return {rows: round(median_ms(functools.partial(projection, torch.randn(rows, d_model, dtype=dtype)), repeats), 2)
                for rows in (1, 2, 4, 5, 8, 16)}


def _batched_encoder(pair, mels: list[torch.Tensor], repeats: int) -> dict:
    """Seconds and minor page faults per batch of 4 windows: the encoder on the batch in one pass,
    and window by window, alternating."""
    import resource

    batches = [torch.cat(mels[i : i + 4]) for i in range(0, len(mels) - 3, 4)]
    results = {"one pass": ([], []), "window by window": ([], [])}
    runs = {"one pass": lambda mel: pair.main.encoder(mel),
            "window by window": lambda mel: [pair.main.encoder(window) for window in mel.split(1)]}
    with torch.inference_mode():
        for _ in range(repeats):
            for mel in batches:
                for name, run in runs.items():
                    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                    start = time.perf_counter()
                    run(mel)
                    results[name][0].append(time.perf_counter() - start)
                    results[name][1].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults)
    return {name: {"seconds_per_batch": statistics.median(seconds), "minor_faults_per_batch": statistics.median(faults)}
            for name, (seconds, faults) in results.items()}


def _ct2_encoders(model: str) -> dict:
    """CTranslate2's encoder, float32 and int8, as calls returning seconds per window; it runs in
    faster-whisper's process of its own (in this one it would slow every torch step measured after it)."""
    try:
        import faster_whisper  # noqa: F401
    except ImportError:
        return {}
    source = ct2_source(model)
    if source is None:
        return {}
    peer = FasterWhisperPeer(source, torch.device("cpu"))
    return {f"ctranslate2 {kind}": functools.partial(peer.encoder_seconds, int8=kind == "int8")
            for kind in ("float32", "int8")}


def _step_costs(pair, mels: list[torch.Tensor], top: int) -> dict:
    """ms per main forward (decoding seconds over main forwards, unprofiled), and the top ops' self
    time per step (profiled apart, the encoder left out)."""
    options = DecodingOptions(language="en", speculation="off")
    decode_windows(pair, mels[0], options)  # warm-up
    seconds = forwards = 0
    for mel in mels:
        _, stats = decode_windows(pair, mel, options)
        seconds, forwards = seconds + stats.decoding_seconds, forwards + stats.main_forwards
    profiled_forwards, ops = 0, {}
    for mel in mels:
        encoded = encode(pair, mel, None, DecodingStats())
        with torch.profiler.profile() as profile:
            _, stats = decode_encoded(pair, encoded, options)
        profiled_forwards += stats.main_forwards
        for event in profile.key_averages():
            total = ops.setdefault(event.key, [0.0, 0])
            total[0] += event.self_cpu_time_total / 1000
            total[1] += event.count
    ranked = sorted(ops.items(), key=lambda item: -item[1][0])[:top]
    # what the ops' own time leaves of a step: Python and dispatch between them
    ops_ms = sum(ms for ms, _ in ops.values()) / profiled_forwards
    return {"ms_per_main_forward": 1000 * seconds / forwards, "main_forwards": forwards,
            "ops_ms_per_step": round(ops_ms, 3), "op_calls_per_step": round(sum(c for _, c in ops.values()) / profiled_forwards, 1),
            "top_ops_ms_per_step": [{"op": name, "ms": round(ms / profiled_forwards, 3),
                                     "calls": round(calls / profiled_forwards, 1)} for name, (ms, calls) in ranked]}


def _call_costs(pair, mel: torch.Tensor, repeats: int, position: int = 24) -> dict:
    """ms of one main decoder call scoring 1..5 positions (logits at each, the whole cache attended,
    as verification does) and of one assistant draft step (one position, the positions in use
    attended, logits on its draft vocabulary), on a real window's encoder states, batch 1: what a
    speculative round costs against the one-token steps it replaces."""
    options = DecodingOptions()
    n_ctx = pair.main.dims.n_text_ctx + options.max_draft_tokens + 1  # decoding's cache length
    main, assistant = pair.main.decoder, pair.assistant.decoder
    encoded = encode(pair, mel, None, DecodingStats())
    main_caches = DecoderCaches(encoded.main, main.new_caches(1, n_ctx))
    assistant_caches = DecoderCaches(encoded.assistant, assistant.new_caches(1, n_ctx))
    token = pair.main.special.eot
    timed_ms = functools.partial(median_ms, repeats=repeats)

    def main_call(width: int):
        tokens = torch.full((1, width), token)
        positions = torch.arange(position, position + width)[None]
        return lambda: main.logits(main.features(tokens, positions, main_caches))

    def draft_step(step):
        tokens, positions = torch.full((1, 1), token), torch.tensor([[position]])
        return lambda: step(assistant, assistant_caches, position + 1, tokens, positions)

    with torch.inference_mode():
        main_ms = {width: timed_ms(main_call(width)) for width in range(1, 6)}
        start = time.perf_counter()
        draft_step(compiled_draft_logits)()
        compile_seconds = time.perf_counter() - start
        draft_ms = {"eager": timed_ms(draft_step(draft_logits)), "compiled": timed_ms(draft_step(compiled_draft_logits))}
    return {"main_call_ms_by_positions": main_ms,
            "main_call_in_one_token_steps": {w: round(ms / main_ms[1], 2) for w, ms in main_ms.items()},
            "assistant_draft_step_ms": draft_ms,
            "assistant_draft_step_in_one_token_steps": {name: round(ms / main_ms[1], 2) for name, ms in draft_ms.items()},
            # the first compiled step's seconds, compilation included (less where inductor's disk cache has it)
            "draft_step_first_compiled_call_seconds": round(compile_seconds, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="base")
    parser.add_argument("--clips", type=int, default=8, help="LibriSpeech clips (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--top", type=int, default=12, help="ops listed per step (default: %(default)s)")
    parser.add_argument("--output", type=Path, default=None)
    args = parse_args(parser, clips=4, repeats=1)

    clips = [SPEECH / r["path"] for r in manifest_rows() if r["set"] == "librispeech"][: args.clips]
    # float32 encoders where the decoder is measured: its steps read the encoder states only
    precisions = {"float32": {"int8": False}, "int8/bfloat16": {"int8": True, "dtype": "bfloat16"}, "int8/float32": {"int8": True}}
    pairs = {name: load_pair(args.model, None, encoder_precision="float32", **precision)
             for name, precision in precisions.items()}
    ours = {"whisper-spec float32": pairs["float32"],
            "whisper-spec int8": load_pair(args.model, None, encoder_precision="int8"),
            "whisper-spec bfloat16": load_pair(args.model, None, encoder_precision="bfloat16")}
    mels = [batch_features([load_audio(p)], pairs["float32"].main.dims.n_mels) for p in clips]
    encoders = _ct2_encoders(args.model)
    times: dict[str, list[float]] = {**{name: [] for name in ours}, **{name: [] for name in encoders}}
    # float32 projections; int8 beside an int8 encoder (the CPU default); with int8 decoders and a float encoder
    cross_kv_pairs = {"float32": pairs["float32"], "int8 (beside an int8 encoder)": ours["whisper-spec int8"],
                      "int8 decoder, float32 encoder": pairs["int8/bfloat16"]}
    cross_kv_times: dict[str, list[float]] = {name: [] for name in cross_kv_pairs}
    with torch.inference_mode():
        states = [pairs["float32"].main.encoder(mel) for mel in mels[:3]]
    for pair in cross_kv_pairs.values():
        _cross_kv_seconds(pair, states[0])
    for name, encoder in encoders.items():
        encoder(mels[0].numpy())  # warm-up
    for pair in ours.values():
        _encoder_seconds(pair, mels[0])
    for _ in range(args.repeats):
        for mel in mels[:3]:
            for name, pair in ours.items():
                times[name].append(_encoder_seconds(pair, mel))
            for name, encoder in encoders.items():
                times[name].append(encoder(mel.numpy()))
        for window in states:
            for name, pair in cross_kv_pairs.items():
                cross_kv_times[name].append(_cross_kv_seconds(pair, window))
    report = {
        "machine": machine_info(torch.device("cpu")), "model": args.model, "clips": len(clips),
        "encoder_seconds_per_window": {name: statistics.median(t) for name, t in times.items()},
        "cross_kv_seconds_per_window": {name: statistics.median(t) for name, t in cross_kv_times.items()},
        "encoder_batch_of_4": _batched_encoder(pairs["float32"], mels, args.repeats),
        # dry: one clip's decoding by one precision checks the step costs (the batched encoder needs four clips)
        "decoder": {name: _step_costs(pair, mels[:1] if args.dry else mels, args.top)
                    for name, pair in list(pairs.items())[: 1 if args.dry else None]},
        "output_projection_ms_by_rows": {
            "float32": _projection_ms_by_rows(pairs["float32"], 20 * args.repeats),
            "int8": _projection_ms_by_rows(pairs["int8/bfloat16"], 20 * args.repeats),
            "int8, aten int8pack_mm": _projection_ms_by_rows(pairs["int8/bfloat16"], 20 * args.repeats,
                                                             int8_activations=False)},
        # dry: one precision's round parts (each compiles the draft step)
        "speculative_round_parts": {name: _call_costs(load_pair(args.model, **precision), mels[0], repeats=30 * args.repeats)
                                    for name, precision in list(precisions.items())[: 1 if args.dry else None]},
    }
    return write_report(report, args.output)


if __name__ == "__main__":
    raise SystemExit(main())
