"""One table from a GPU check's folder (benchmarks/gpu.sh): the CUDA tests' outcome, speed, WER,
microseconds a token and warm-up seconds (captures, compiling) per configuration, memory float
against int8, the main decoder's bandwidth floor, and the issue's targets next to what was measured.
Usage: python benchmarks/gpu_summary.py OUT  (prints markdown)"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _run(report: dict, name: str) -> dict | None:
    return next((c for c in report["configs"] if c["name"] == name), None)


def _ratio(a: dict | None, b: dict | None, key: str) -> float | None:
    if a is None or b is None or not a.get(key) or not b.get(key):
        return None
    return b[key] / a[key]


# datasheet HBM bandwidth, bytes a second: the floor of a decoder step that reads every weight once
PEAK_BANDWIDTH = {"H200": 4.8e12, "H100": 3.35e12}


def _microseconds_a_token(config: dict) -> float | None:
    if not config.get("decoding_seconds") or not config.get("generated_tokens"):
        return None
    return 1e6 * config["decoding_seconds"] / config["generated_tokens"]


def _fmt(value, pattern: str = "{:.2f}x") -> str:
    return "—" if value is None else pattern.format(value)


def _profile_lines(path: Path) -> list[str]:
    """The step profile's figures a token, per variant and mode (gpu_step_profile.py)."""
    if not path.is_file():
        return []
    profile = json.loads(path.read_text())
    lines = [f"step profile ({profile['clips']} clips, batch {profile['batch']}):", "",
             "| variant | mode | wall us / token | device busy us / token | device kernels / token | "
             "host syncs / token | identical clips |", "|---|---|---:|---:|---:|---:|---|"]
    for variant, figures in profile["variants"].items():
        if "error" in figures:
            lines.append(f"| {variant} | failed: {figures['error'].splitlines()[0][:200]} | | | | | |")
        for mode, m in figures.get("modes", {}).items():
            lines.append(f"| {variant} | {mode} | {_fmt(m.get('wall_us_a_token'), '{:.0f}')} | "
                         f"{_fmt(m.get('device_busy_us_a_token'), '{:.0f}')} | "
                         f"{_fmt(m.get('device_kernels_a_token'), '{:.0f}')} | "
                         f"{_fmt(m.get('host_syncs_a_token'), '{:.2f}')} | "
                         f"{_fmt(figures.get('identical'), '{}/' + str(profile['clips'])) if mode == 'speculative' else ''} |")
    return lines + [""]


def _cuda_library_lines(path: Path) -> list[str]:
    """What the faster-whisper peer needs of this machine and what it found (cuda_libraries.py)."""
    if not path.is_file():
        return []
    probe = json.loads(path.read_text())
    found = ", ".join(name for name, loads in probe["loadable"].items() if loads) or "none"
    packages = ", ".join(f"{name} {version}" for name, version in probe["packages"].items() if version)
    return [f"cuBLAS loadable without torch: {found} (CTranslate2's PyPI build needs libcublas.so.12; "
            f"installed: {packages})", ""]


def summary(folder: Path) -> str:
    lines = [f"# GPU check: {folder.name}", ""] + _test_lines(folder)
    lines += _profile_lines(folder / "step_profile.json")
    lines += _cuda_library_lines(folder / "cuda_libraries.json")
    report_file = folder / "librispeech" / "report.json"
    if not report_file.is_file():
        return "\n".join(lines + ["LibriSpeech bench: no report (not run, or cut short)"]) + "\n"
    report = json.loads(report_file.read_text())
    wide_file = folder / "wide_batches" / "report.json"
    wide = json.loads(wide_file.read_text()) if wide_file.is_file() else {"configs": [], "check": {"passed": True}}
    lines += _bench_lines(report, wide)
    targets = _speed_targets(report)
    memory_file = folder / "memory.json"
    if memory_file.is_file():
        memory = json.loads(memory_file.read_text())
        lines += _memory_lines(memory, report["machine"])
        reduction = memory["int8_reduction"]
        targets += [("int8: lower decoder weight memory", reduction.get("decoder_weight_bytes"), 0.35),
                    ("int8: lower peak while decoding", reduction.get("peak_decoding_bytes"), 0.20)]
    return "\n".join(lines + _target_lines(targets)) + "\n"


def _test_lines(folder: Path) -> list[str]:
    """The CUDA tests' last lines, and where the run was cut short."""
    lines = []
    for name, label in (("cuda_tests.txt", "CUDA tests"), ("cuda_tests_compiled.txt", "CUDA tests of compiled rounds")):
        tests = folder / name
        if tests.is_file():
            tail = [line for line in tests.read_text().splitlines() if line.strip()]
            lines += [f"{label}: {tail[-1] if tail else 'no output'}", ""]
    if not (folder / "cuda_tests.txt").is_file():
        lines += ["CUDA tests: not run (dry mode, or out of time)", ""]
    cut = folder / "out_of_time.txt"
    if cut.is_file():
        lines += [f"out of time: {'; '.join(cut.read_text().split(chr(10))).strip('; ')}", ""]
    return lines


def _bench_lines(report: dict, wide: dict) -> list[str]:
    """The device, the exactness check and a row a configuration of the LibriSpeech bench."""
    machine = report["machine"]
    failures = [f for r in (report, wide) if not r["check"]["passed"] for f in r["check"]["failures"]]
    check = f"FAILED: {failures}" if failures else "passed"
    lines = [f"device: {machine.get('gpu', machine['device'])}, torch {machine['torch']}, "
             f"{report['data']['utterances']} utterances, exactness check {check}", ""]
    lines += [f"{name}: left out ({reason})" for name, reason in report.get("left_out", {}).items()]
    lines += [""] if report.get("left_out") else []
    lines += ["| configuration | time (s) | decoding (s) | us / token | WER (%) | speedup | decoding speedup | "
              "acceptance | identical | warm-up (s) |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c in report["configs"] + wide["configs"]:
        lines.append(f"| {c['name']} | {c['total_seconds']:.1f} | {_fmt(c.get('decoding_seconds'), '{:.1f}')} | "
                     f"{_fmt(_microseconds_a_token(c), '{:.0f}')} | "
                     f"{100 * c['wer']:.2f} | {_fmt(c.get('speedup'))} | {_fmt(c.get('decoding_speedup'))} | "
                     f"{_fmt(c.get('acceptance'), '{:.3f}')} | {_fmt(c.get('identical_fraction'), '{:.0%}')} | "
                     f"{_fmt(c.get('warm_up_seconds'), '{:.1f}')} |")
    return lines


def _speed_targets(report: dict) -> list[tuple]:
    """The GPU issue's targets: main-only b1 at or under 600 us a token, speculation 1.6x at b1 and 1.3x at
    b4; eager and, where the bench ran them, compiled; and 2x transformers' assisted generation."""
    targets = []
    for compiled in ("", " compiled"):
        main_b1 = _run(report, f"main{compiled} b1")
        if main_b1 is None:
            continue
        targets += [
            (f"main{compiled} b1, us a token", _microseconds_a_token(main_b1), 600.0),
            (f"speculative{compiled} b1 / main{compiled} b1, decoding",
             _ratio(_run(report, f"speculative{compiled} b1"), main_b1, "decoding_seconds"), 1.6),
            (f"speculative{compiled} b4 / main{compiled} b4, decoding",
             _ratio(_run(report, f"speculative{compiled} b4"), _run(report, f"main{compiled} b4"), "decoding_seconds"),
             1.3),
        ]
    targets.append(("speculative b1 / transformers assisted b1, end to end",
                    _ratio(_run(report, "speculative b1"), _run(report, "transformers assisted b1"), "total_seconds"), 2.0))
    return targets


def _memory_lines(memory: dict, machine: dict) -> list[str]:
    """Memory a configuration (loaded pair, decoder weights, peak while decoding) and a main decoder
    step's floor at the GPU's bandwidth."""
    lines = ["", "| memory | loaded pair (MiB) | decoder weights (MiB) | peak decoding (MiB) |", "|---|---:|---:|---:|"]
    for name, run in memory["runs"].items():
        lines.append(f"| {name} ({run['dtype']}{', int8 ' + str(run['int8_kernel']) if run['int8'] else ''}) | "
                     f"{run['loaded_bytes'] / 2**20:.0f} | {run['decoder_weight_bytes'] / 2**20:.0f} | "
                     f"{run['peak_decoding_bytes'] / 2**20:.0f} |")
    gpu = next((name for name in PEAK_BANDWIDTH if name in str(machine.get("gpu", ""))), None)
    if gpu:
        step = memory["runs"]["float"]["main_decoder_weight_bytes"]
        lines += ["", f"floor of a main decoder step: {step / 2**20:.0f} MiB of weights at {gpu}'s "
                      f"{PEAK_BANDWIDTH[gpu] / 1e12:.2f} TB/s = {1e6 * step / PEAK_BANDWIDTH[gpu]:.0f} us"]
    return lines


def _target_lines(targets: list[tuple]) -> list[str]:
    lines = ["", "| target | measured | wanted |", "|---|---:|---:|"]
    for name, value, wanted in targets:
        if name.startswith("int8"):
            shown, want = _fmt(value, "{:.0%}"), f">= {wanted:.0%}"
        elif name.endswith("us a token"):
            shown, want = _fmt(value, "{:.0f}"), f"<= {wanted:.0f}"
        else:
            shown, want = _fmt(value), f">= {wanted:.1f}x"
        lines.append(f"| {name} | {shown} | {want} |")
    return lines

if __name__ == "__main__":
    print(summary(Path(sys.argv[1])), end="")
