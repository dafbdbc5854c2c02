"""The report: per configuration WER, times, speedups, acceptance and memory, the exactness check,
and its markdown table and plots."""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict
from pathlib import Path

from ..decode.stats import DecodingStats, round_costs
from ..models.pair import decoder_precision, encoder_precision
from ..models.platform import counts_allocator_memory
from .metrics import machine_info, word_error_rate

REPORT_VERSION = 1


def _config_entry(pair, config, runs: dict, utterances, references: list, languages: list[str], by_language: dict
                  ) -> dict:
    """A configuration's figures: WER, identity with its baseline, seconds, speedups against main-only
    at its batch size and precision, acceptance, tokens, memory, and the same by language."""
    run = runs[config.name]
    baseline = runs.get(config.baseline)
    # speedups against main-only at the same batch size and precision (int8 against int8)
    float_main = runs.get(f"main{' int8' * config.int8} b{config.batch_size}")
    total = statistics.median(run.total_seconds)
    wer = word_error_rate(references, run.texts, languages)
    differing = [] if baseline is None else [
        u.id for u, a, b in zip(utterances, run.tokens, baseline.tokens) if a != b
    ]
    stats = run.stats
    entry = {
        "name": config.name, "engine": config.engine, "batch_size": config.batch_size,
        "speculative": config.speculative, "int8": config.int8, "compiled": config.compiled,
        "wer": wer,
        "identical_to": config.baseline if baseline is not None else None,
        "identical_fraction": None if baseline is None else 1 - len(differing) / len(utterances),
        "differing_utterances": differing,
        "total_seconds": total,
        "total_seconds_all": run.total_seconds,
        "warm_up_seconds": run.warm_up_seconds,
        "encoder_seconds": statistics.median(run.encoder_seconds) if stats else None,
        "decoding_seconds": statistics.median(run.decoding_seconds) if stats else None,
        "speedup": statistics.median(float_main.total_seconds) / total if float_main else None,
        "decoding_speedup": None,
        "acceptance": stats.acceptance if stats else None,
        "tokens_per_main_forward": stats.tokens_per_main_forward if stats else None,
        "generated_tokens": stats.generated if stats else sum(len(t) + 1 for t in run.tokens),
        "tokens_per_second": None,
        "by_language": by_language[config.name],
        "round_costs": (round_costs(stats, baseline.stats)
                        if stats and config.speculative and baseline is not None and baseline.stats else None),
        "drafted_by_position": stats.drafted_by_position if stats else [],
        "accepted_by_position": stats.accepted_by_position if stats else [],
        "peak_memory_bytes": run.peak_memory_bytes,
        "peak_memory_kind": "cuda_max_allocated" if counts_allocator_memory(pair.device) else "process_rss",
    }
    seconds = entry["decoding_seconds"] or total
    entry["tokens_per_second"] = entry["generated_tokens"] / seconds if seconds else None
    if stats and float_main is not None and float_main.decoding_seconds:
        entry["decoding_speedup"] = statistics.median(float_main.decoding_seconds) / entry["decoding_seconds"]
        main_by_language = by_language[f"main{' int8' * config.int8} b{config.batch_size}"]
        for language, figures in entry["by_language"].items():
            main_seconds = main_by_language[language]["decoding_seconds"]
            figures["decoding_speedup"] = main_seconds / figures["decoding_seconds"] if figures["decoding_seconds"] else None
    return entry


def build_report(pair, utterances, configs, runs, options, model, data, languages) -> dict:
    # a reference is what was said: for translation only English speech has the text to score against
    references = [u.text if options.task == "transcribe" or language == "en" else None
                  for u, language in zip(utterances, languages)]
    # once per run: a speculative configuration's per-language speedups read its main-only run's
    by_language = {config.name: _by_language(runs[config.name], references, languages) for config in configs}
    results = [_config_entry(pair, config, runs, utterances, references, languages, by_language) for config in configs]
    failures = check_exactness(results)
    return {
        "report_version": REPORT_VERSION,
        "machine": machine_info(pair.device),
        "model": model,
        "assistant": pair.assistant.name if pair.assistant is not None else None,
        "assistant_precision": decoder_precision(pair.assistant) if pair.assistant is not None else None,
        "dtype": str(pair.dtype).removeprefix("torch."),
        "encoder_precision": encoder_precision(pair.main),
        "int8_kernel": None,
        "options": asdict(options),
        # speculation="auto" drafts in batches of at most this many rows x assistant frames (None: every batch)
        "auto_max_draft_frames": pair.platform.auto_max_draft_frames,
        "data": {"source": None, **data, "utterances": len(utterances), "audio_seconds": sum(u.seconds for u in utterances),
                 "languages": sorted({language for language in languages})},
        "configs": results,
        "check": {"passed": not failures, "failures": failures},
    }


def _by_language(run, references: list[str | None], languages: list[str]) -> dict[str, dict]:
    """Per language: utterances, WER, acceptance, tokens per main forward and decoding seconds (of
    the last repeat; a batch's seconds are shared equally by its rows, so at batch 1 they are the
    language's own, in a mixed batch an estimate)."""
    out = {}
    for language in sorted(set(languages)):
        rows = [i for i, row_language in enumerate(languages) if row_language == language]
        stats = DecodingStats()
        for i in rows if run.per_utterance else []:
            stats.add(run.per_utterance[i])
        out[language] = {
            "utterances": len(rows),
            "wer": word_error_rate([references[i] for i in rows], [run.texts[i] for i in rows], [language] * len(rows)),
            "acceptance": stats.acceptance,
            "tokens_per_main_forward": stats.tokens_per_main_forward,
            "decoding_seconds": stats.decoding_seconds if run.per_utterance else None,
            "decoding_speedup": None,
        }
    return out


def check_exactness(results: list[dict]) -> list[str]:
    """Greedy speculative runs must equal their main-only run: every utterance's tokens, and WER."""
    by_name = {r["name"]: r for r in results}
    failures = []
    for r in results:
        if r["engine"] != "whisper-spec" or not r["speculative"]:
            continue
        main = by_name.get(r["identical_to"])
        if main is None:
            continue
        if r["differing_utterances"]:
            failures.append(f"{r['name']}: tokens differ from {main['name']} in {len(r['differing_utterances'])} "
                            f"utterances: {', '.join(r['differing_utterances'][:10])}")
        if r["wer"] != main["wer"]:
            failures.append(f"{r['name']}: WER {r['wer']} differs from {main['name']} WER {main['wer']}")
    return failures


def _precisions(report: dict) -> str:
    """The precisions the configurations ran at: the float pair's dtype, and the int8 decoders' rows."""
    if not any(r["int8"] for r in report["configs"] if r["engine"] == "whisper-spec"):
        return report["dtype"]
    return f"{report['dtype']}; int8 decoders on {report.get('int8_dtype') or report['dtype']} rows"


def markdown_table(report: dict) -> str:
    """A table shaped like the Hugging Face blog's: time, WER and speedup per configuration."""
    lines = [
        f"{report['model']} + {report['assistant'] or 'no assistant'}, {report['data']['utterances']} utterances "
        f"({report['data']['audio_seconds']:.0f} s), {report['machine']['device']}, {_precisions(report)}; speedups "
        "against main-only at the same batch size and precision",
        "",
        "| configuration | time (s) | WER (%) | speedup | acceptance | tokens / main forward | identical |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]

    def fmt(value, pattern):
        return "—" if value is None else pattern.format(value)

    for r in report["configs"]:
        lines.append(
            f"| {r['name']} | {r['total_seconds']:.1f} | {fmt(r['wer'] and 100 * r['wer'], '{:.2f}')} | "
            f"{fmt(r['speedup'], '{:.2f}x')} | {fmt(r['acceptance'], '{:.3f}')} | "
            f"{fmt(r['tokens_per_main_forward'], '{:.2f}')} | {fmt(r['identical_fraction'], '{:.0%}')} |"
        )
    speculative = [r for r in report["configs"] if r["speculative"] and r["engine"] == "whisper-spec"]
    if len(report["data"]["languages"]) > 1 and speculative:
        lines += ["", "| configuration | language | utterances | WER (%) | acceptance | tokens / main forward "
                  "| decoding speedup |", "|---|---|---:|---:|---:|---:|---:|"]
        for r in speculative:
            for language, f in r["by_language"].items():
                lines.append(f"| {r['name']} | {language} | {f['utterances']} | {fmt(f['wer'] and 100 * f['wer'], '{:.2f}')} | "
                             f"{fmt(f['acceptance'], '{:.3f}')} | {fmt(f['tokens_per_main_forward'], '{:.2f}')} | "
                             f"{fmt(f['decoding_speedup'], '{:.2f}x')} |")
    costed = [r for r in speculative if r.get("round_costs")]
    if costed:
        lines += ["", "Why: a speculative round's parts in main-only steps, and the tokens a round keeps (all rows)",
                  "", "| configuration | main step (ms) | verification | draft step | draft steps / round | rest "
                  "| round | tokens / round | main-only tokens / step | decoding speedup over main-only |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in costed:
            c = r["round_costs"]
            lines.append(f"| {r['name']} | {c['main_step_ms']:.2f} | {fmt(c['verify_in_main_steps'], '{:.2f}')} | "
                         f"{fmt(c['draft_step_in_main_steps'], '{:.2f}')} | {c['draft_steps_per_round']:.2f} | "
                         f"{fmt(c['rest_in_main_steps'], '{:.2f}')} | {fmt(c['round_in_main_steps'], '{:.2f}')} | "
                         f"{c['tokens_per_round']:.2f} | {c['main_only_tokens_per_step']:.2f} | {c['decoding_speedup']:.2f}x |")
    for name, reason in report.get("left_out", {}).items():
        lines += ["", f"{name}: left out ({reason})"]
    lines.append("")
    checked = any(c["engine"] == "whisper-spec" and c["speculative"] for c in report["configs"])
    passed = ("passed (speculative output identical to main-only output)" if checked
              else "nothing to check (no speculative configuration ran)")
    lines.append("check: " + (passed if report["check"]["passed"] else "FAILED: " + "; ".join(report["check"]["failures"])))
    return "\n".join(lines) + "\n"


def plot_report(report: dict, output_dir: Path) -> list[Path]:
    """time_by_config.png (seconds per configuration, grouped by batch size) and
    acceptance_by_position.png (acceptance of the i-th drafted token)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    output_dir.mkdir(parents=True, exist_ok=True)
    configs = report["configs"]
    fig, ax = plt.subplots(figsize=(max(6, len(configs) * 0.8), 4))
    colors = {"whisper-spec": "tab:blue", "transformers": "tab:orange", "faster-whisper": "tab:green",
              "whisper.cpp": "tab:red"}
    bars = ax.bar(range(len(configs)), [c["total_seconds"] for c in configs],
                  color=[colors[c["engine"]] if not c["speculative"] else "tab:purple" for c in configs])
    for bar, c in zip(bars, configs):
        if c["speedup"]:
            ax.annotate(f"{c['speedup']:.2f}x", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(configs)), [c["name"] for c in configs], rotation=30, ha="right")
    ax.set_ylabel("seconds (features + encoder + decoder)")
    ax.set_title(f"{report['model']}: time by configuration ({report['data']['utterances']} utterances)")
    fig.tight_layout()
    time_plot = output_dir / "time_by_config.png"
    fig.savefig(time_plot, dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    for c in configs:
        drafted, accepted = c["drafted_by_position"], c["accepted_by_position"]
        if any(drafted):
            rates = [a / d if d else float("nan") for a, d in zip(accepted, drafted)]
            ax.plot(range(1, len(rates) + 1), rates, marker="o", label=c["name"])
    ax.set_xlabel("draft position")
    ax.set_ylabel("accepted / drafted")
    ax.set_ylim(0, 1.02)
    ax.set_title("acceptance by draft position")
    if ax.lines:
        ax.legend(fontsize=8)
    fig.tight_layout()
    acceptance_plot = output_dir / "acceptance_by_position.png"
    fig.savefig(acceptance_plot, dpi=120)
    plt.close(fig)
    return [time_plot, acceptance_plot]


def write_outputs(report: dict, output_dir: Path) -> list[Path]:
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (output_dir / "report.md").write_text(markdown_table(report))
    return [output_dir / "report.json", output_dir / "report.md", *plot_report(report, output_dir)]
