"""Which dtype and key layout the decoders' attention should have on a CPU, measured in one run:
one pair (the command line's defaults: int8 decoders on bfloat16 rows, the shipped assistant), its
attention switched between
- "float32": both decoders in float32, keys stored head_dim-major (the default; model.keys_in_memory),
- "float32 row-major keys": the same products on keys stored position-major (the default before),
- "bfloat16 main": the main decoder's keys, values and products in bfloat16, the assistant's in float32,
- "bfloat16 both": the assistant's in bfloat16 too.
Each configuration's queries are padded as query_rows finds for its dtype and key layout (row
invariance).

Per batch of clips, for each batch size: the batch is encoded once, each configuration computes its
cross-attention keys and values from those encoder states, then decodes main-only and speculative
(drafting in every round), the configurations and policies in an order rotated batch by batch so
that the machine's drifts weigh on all alike. Reports decoding seconds, whether speculative equals
main-only in each configuration (it must), WER per configuration and set, how many transcripts
differ from float32's, and how many windows' greedy text failed the fallback checks (a loop) and was
decoded again at a higher temperature. --windows: each recording cut into consecutive 30 s windows,
decoded with timestamps, as the long-audio pipeline decodes full windows (no WER: no reference text
a window). Decisions, "Attention stays float32 on CPU" and "Keys stored transposed on CPU".

    python benchmarks/experiments/attention_dtype.py --sets librispeech,fleurs_de,fleurs_es,fleurs_fr,fleurs_pt,fleurs_en \
        --batch-sizes 1,4 --output benchmarks/results/attention_dtype_epyc_cpu/attention_dtype.json
    python benchmarks/experiments/attention_dtype.py --sets longform --windows --batch-sizes 4 \
        --output benchmarks/results/attention_dtype_epyc_cpu/attention_dtype_longform_windows.json
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/_common.py
from _common import SPEECH, command_line_pair, manifest_rows, write_report  # noqa: E402
from tqdm import tqdm  # noqa: E402

from whisper_spec.bench.metrics import machine_info, word_error_rate  # noqa: E402
from whisper_spec.decode.decoding import decode_encoded  # noqa: E402
from whisper_spec.decode.encoding import encode, encoder_states  # noqa: E402
from whisper_spec.decode.stats import DecodingStats  # noqa: E402
from whisper_spec.models.pair import decoder_precision  # noqa: E402
from whisper_spec.models.row_invariance import query_rows
from whisper_spec.options import DecodingOptions  # noqa: E402
from whisper_spec.speech.audio import N_SAMPLES, batch_features, load_audio  # noqa: E402

# (main, assistant) attention dtypes, keys head_dim-major
CONFIGS = {"float32": (torch.float32, torch.float32, True), "float32 row-major keys": (torch.float32, torch.float32, False),
           "bfloat16 main": (torch.bfloat16, torch.float32, True), "bfloat16 both": (torch.bfloat16, torch.bfloat16, True)}
POLICIES = ("off", "on")


def _configure(pair, config: str) -> None:
    main, assistant, transposed_keys = CONFIGS[config]
    pair.main.decoder.attention_dtype = main
    pair.main.decoder.exact_queries = query_rows(main, transposed_keys)
    pair.assistant.decoder.attention_dtype = assistant
    for decoder in (pair.main.decoder, pair.assistant.decoder):
        decoder.transposed_keys = transposed_keys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", default="librispeech", help="manifest sets, comma-separated")
    parser.add_argument("--batch-sizes", default="1,4")
    parser.add_argument("--limit", type=int, default=None, help="first N clips of each set")
    parser.add_argument("--windows", action="store_true",
                        help="cut each clip into consecutive 30 s windows, decoded with timestamps as long audio is")
    parser.add_argument("--configs", default=",".join(CONFIGS), help="of: " + ", ".join(CONFIGS) + "; the first is the reference")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    configs = args.configs.split(",")

    pair = command_line_pair()
    if not pair.platform.row_invariant:
        raise SystemExit("this CPU's decoder kernels are not row-invariant: attention dtype is not what decides here")
    report = {"machine": machine_info(pair.device), "main": decoder_precision(pair.main),
              "assistant": decoder_precision(pair.assistant), "default_main_attention": str(pair.main.decoder.cache_dtype),
              "query_rows": {config: query_rows(main, transposed) for config, (main, _, transposed) in CONFIGS.items()},
              "sets": {}}
    for name in args.sets.split(","):
        rows = [r for r in manifest_rows() if r["set"] == name][: args.limit]
        clips = [load_audio(SPEECH / r["path"]) for r in rows]
        if args.windows:  # no reference text a window: WER is not reported
            rows = [{"language": r["language"], "text": None} for r, clip in zip(rows, clips) for _ in range(0, len(clip), N_SAMPLES)]
            clips = [clip[start : start + N_SAMPLES] for clip in clips for start in range(0, len(clip), N_SAMPLES)]
        mels = [batch_features([clip], pair.main.dims.n_mels) for clip in clips]
        options = DecodingOptions(timestamps=args.windows)
        report["sets"][name] = by_batch = {}
        for batch_size in (int(b) for b in args.batch_sizes.split(",")):
            seconds, tokens, fallbacks = _timed(pair, configs, rows, mels, options, batch_size, f"{name}, batch {batch_size}")
            eot = pair.main.special.eot
            texts = {config: [pair.main.tokenizer.decode([t for t in ts if t < eot]) for ts in tokens[config, "off"]]
                     for config in configs}
            by_batch[batch_size] = {
                config: {"decoding_seconds": {policy: round(seconds[config, policy], 2) for policy in POLICIES},
                         "speculative_over_main_only": round(seconds[config, "off"] / seconds[config, "on"], 3),
                         "speculative_identical_to_main_only": tokens[config, "on"] == tokens[config, "off"],
                         "temperature_fallbacks": fallbacks[config, "off"],
                         "wer": None if args.windows else round(100 * word_error_rate(
                             [r["text"] for r in rows], texts[config], [r["language"] for r in rows]), 2),
                         "transcripts_differing_from_the_first": sum(
                             a != b for a, b in zip(tokens[config, "off"], tokens[configs[0], "off"]))}
                for config in configs}
        report["sets"][name]["clips" if not args.windows else "windows"] = len(rows)
    return write_report(report, args.output)


def _timed(pair, configs: list[str], rows: list[dict], mels: list, options: DecodingOptions, batch_size: int,
           label: str) -> tuple[dict, dict, dict]:
    """Each configuration and policy over the clips in batches, taking turns batch by batch after a
    warm-up of each one's shapes: decoding seconds, tokens and temperature fallbacks by (config, policy)."""
    runs = [(config, policy) for config in configs for policy in POLICIES]
    seconds = dict.fromkeys(runs, 0.0)
    tokens = {run: [] for run in runs}
    fallbacks = dict.fromkeys(runs, 0)  # windows whose greedy text failed the checks (a loop): decoded again, sampling
    batches = range(0, len(rows), batch_size)
    for i, start in enumerate(tqdm(batches, desc=label, unit="batch")):
        languages = [r["language"] for r in rows[start : start + batch_size]]
        mel = torch.cat(mels[start : start + batch_size])
        with torch.inference_mode():
            states = list(encoder_states(pair.main, mel).split(1))
        encoded = {}
        for config in configs:
            _configure(pair, config)
            encoded[config] = encode(pair, mel, None, DecodingStats(), known_states=states)
        if i == 0:  # warm-up of each configuration's shapes
            for config, policy in runs:
                _configure(pair, config)
                decode_encoded(pair, encoded[config], replace(options, speculation=policy), languages=languages)
        for config, policy in runs[i % len(runs) :] + runs[: i % len(runs)]:
            _configure(pair, config)
            results, stats = decode_encoded(pair, encoded[config], replace(options, speculation=policy),
                                            languages=languages)
            seconds[config, policy] += stats.decoding_seconds
            tokens[config, policy] += [r.tokens for r in results]
            fallbacks[config, policy] += sum(r.temperature > 0 for r in results)
    return seconds, tokens, fallbacks


if __name__ == "__main__":
    raise SystemExit(main())
