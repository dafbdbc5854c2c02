"""Load on `whisper-spec serve`: concurrent clients sending real clips and long files for a fixed time.

Each configuration is a server in a process of its own on loopback: ours at --max-batch N (default 4)
and at --max-batch 1, and faster-whisper-server (PyPI, on the same CTranslate2 weights, int8, greedy,
its batched pipeline at the same batch size) where installed. A bounded asyncio client keeps --clients
requests in flight for --seconds, each client sending the next file of the set (LibriSpeech clips and
long-form files, in turn) as soon as its last one is answered; requests still in flight at the end are
waited for and counted. Reported per configuration: requests answered, failed (non-200) and lost
(no answer), throughput in audio seconds per second, p50/p95 latency, the batches' mean size (ours,
from /health), the server's peak resident memory, and the share of responses equal to the offline
transcript (`whisper-spec transcribe`'s text for the file, computed first in this process).

    python benchmarks/serve_load.py --clients 8 --seconds 120 --output benchmarks/results/serve_load_epyc_cpu.json
    python benchmarks/serve_load.py --dry --output /tmp/serve_load.json   # 2 clients, 10 s, no peer
    python benchmarks/serve_load.py --device cuda --clients 32 --max-batch 16 --peers none   # on a GPU
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import soundfile
from _common import SPEECH, command_line_pair, manifest_rows, parse_args, progress, write_report

from whisper_spec.bench.metrics import machine_info
from whisper_spec.longform.pipeline import transcribe
from whisper_spec.models.sources import ct2_source
from whisper_spec.options import DecodingOptions


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def peak_rss_mb(pid: int) -> float | None:
    try:
        line = next(l for l in Path(f"/proc/{pid}/status").read_text().splitlines() if l.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return None
    return round(int(line.split()[1]) / 1024, 1)


class ServerProcess:
    """A server started with this command line, answering GET `ready` when loaded."""

    def __init__(self, command: list[str], port: int, ready: str = "/health", env: dict | None = None):
        self.url = f"http://127.0.0.1:{port}"
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                        env={**os.environ, **(env or {})})
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{command[0]} ended ({self.process.returncode}): {self.process.stderr.read()[-2000:]}")
            try:
                if httpx.get(self.url + ready, timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.5)
        self.process.kill()
        raise RuntimeError(f"{command} did not answer {ready} in 300 s")

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=120)


async def load(url: str, files: list[tuple[Path, float]], clients: int, seconds: float) -> list[dict]:
    """clients loops of requests for `seconds`, each sending the next file as soon as its last is answered."""
    answered, next_file = [], iter(range(1 << 30))
    deadline = time.monotonic() + seconds

    async def client(http: httpx.AsyncClient) -> None:
        while time.monotonic() < deadline:
            path, duration = files[next(next_file) % len(files)]
            start = time.monotonic()
            try:
                response = await http.post(f"{url}/v1/audio/transcriptions", data={"model": "whisper-1"},
                                           files={"file": (path.name, path.read_bytes())})
                status, text = response.status_code, response.json().get("text") if response.status_code == 200 else None
            except httpx.HTTPError as error:
                status, text = type(error).__name__, None
            answered.append({"file": path.name, "seconds": time.monotonic() - start, "status": status, "text": text,
                             "audio_seconds": duration, "ended": time.monotonic()})

    async with httpx.AsyncClient(timeout=600) as http:
        await asyncio.gather(*(client(http) for _ in range(clients)))
    return answered


def summary(answered: list[dict], offline: dict[str, str], wall: float) -> dict:
    ok = [a for a in answered if a["status"] == 200]
    latencies = sorted(a["seconds"] for a in ok)
    return {"requests": len(answered), "ok": len(ok), "failed": len(answered) - len(ok),
            "equal_to_offline": sum(a["text"] == offline[a["file"]] for a in ok),
            "audio_seconds": round(sum(a["audio_seconds"] for a in ok), 1), "wall_seconds": round(wall, 2),
            "throughput_audio_s_per_s": round(sum(a["audio_seconds"] for a in ok) / wall, 3),
            "p50_seconds": round(statistics.median(latencies), 3) if latencies else None,
            "p95_seconds": round(latencies[max(0, int(0.95 * len(latencies)) - 1)], 3) if latencies else None,
            "mismatched": sorted({a["file"] for a in ok if a["text"] != offline[a["file"]]})}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--max-batch", type=int, default=4)
    parser.add_argument("--clips", type=int, default=12, help="LibriSpeech clips in the set, beside 2 long-form files")
    parser.add_argument("--device", default=None, help="our servers' --device (default: theirs)")
    parser.add_argument("--peers", default="faster-whisper-server")
    parser.add_argument("--output", type=Path)
    args = parse_args(parser, clients=2, seconds=10.0, clips=3, peers="none")

    rows = manifest_rows()
    clips = [SPEECH / r["path"] for r in rows if r["set"] == "librispeech"][: args.clips]
    long = [SPEECH / r["path"] for r in rows if r["set"] == "longform"][:2]
    files = [(p, soundfile.info(p).duration) for p in [*clips, *long]]
    device = ["--device", args.device] if args.device else []
    pair = command_line_pair(*device)  # what `whisper-spec serve` loads with these flags
    offline = {p.name: t.text for p, t in zip([p for p, _ in files],
                                               transcribe(pair, [str(p) for p, _ in files], DecodingOptions()))}
    report = {"machine": machine_info(pair.device), "clients": args.clients, "seconds": args.seconds,
              "files": {p.name: round(d, 2) for p, d in files}, "configs": {}}
    del pair
    gc.collect()

    configs = {f"whisper-spec --max-batch {args.max_batch}": args.max_batch, "whisper-spec --max-batch 1": 1}
    runs = []
    for name, batch in configs.items():
        port = free_port()
        runs.append((name, [sys.executable, "-c", "from whisper_spec.cli import run; run()", "serve", "--port", str(port),
                            "--max-batch", str(batch), "-q", *device], port, "/health", None))
    left_out = _add_peer_server(args, runs)
    report["left_out"] = left_out
    for name, command, port, ready, env in runs:
        report["configs"][name] = _measured(ServerProcess(command, port, ready, env), files, offline, args)
        progress({"config": name} | {k: v for k, v in report["configs"][name].items() if k != "mismatched"})
    ours = report["configs"]
    batched, single = ours[f"whisper-spec --max-batch {args.max_batch}"], ours["whisper-spec --max-batch 1"]
    report["speedup_over_max_batch_1"] = round(batched["throughput_audio_s_per_s"] / single["throughput_audio_s_per_s"], 3)
    return write_report(report, args.output)


def _add_peer_server(args, runs: list) -> dict:
    """faster-whisper-server on the same CTranslate2 weights, int8, at our batch size, added to the
    runs where installed; what was left out and why."""
    if "faster-whisper-server" not in args.peers.split(","):
        return {}
    try:
        import faster_whisper_server  # noqa: F401
    except ImportError:
        return {"faster-whisper-server": "not installed (pip install faster-whisper-server)"}
    config = Path(tempfile.mkdtemp()) / "models.yaml"
    config.write_text(
        f"batch_size: {args.max_batch}\nmodels:\n  - name: whisper-1\n    path: {ct2_source('base')}\n"
        f"    model_options: {{device: cpu, compute_type: int8, cpu_threads: {os.cpu_count()}}}\n"
        "    transcribe_options: {beam_size: 1, condition_on_previous_text: false}\n")
    port = free_port()
    runs.append((f"faster-whisper-server int8, batch {args.max_batch}",
                 [sys.executable, "-m", "faster_whisper_server", "--config", str(config), "--host", "127.0.0.1",
                  "--port", str(port)], port, "/health", None))
    return {}


def _measured(server: ServerProcess, files: list, offline: dict, args) -> dict:
    """One server under the load after a warm-up request: throughput, latency, texts against offline,
    peak memory, and for ours the mean batch its scheduler ran."""
    warm = files[0][0]  # the first request's one-time costs (a lazily loaded model) are not the load's
    httpx.post(f"{server.url}/v1/audio/transcriptions", data={"model": "whisper-1"},
               files={"file": (warm.name, warm.read_bytes())}, timeout=600).raise_for_status()
    before = httpx.get(server.url + "/health", timeout=5).json()
    start = time.monotonic()
    answered = asyncio.run(load(server.url, files, args.clients, args.seconds))
    wall = time.monotonic() - start
    after = httpx.get(server.url + "/health", timeout=5).json()
    result = summary(answered, offline, wall) | {"peak_rss_mb": peak_rss_mb(server.process.pid)}
    if "batches" in after:
        batches = after["batches"] - before["batches"]
        result["mean_batch"] = round((after["batch_windows"] - before["batch_windows"]) / batches, 3) if batches else None
    result["exit_code"] = server.stop()
    return result


if __name__ == "__main__":
    sys.exit(main())
