"""`whisper-spec serve`: the real server in its own process, reached over loopback by the official
openai client and by plain HTTP; every response compared with what the pipeline gives offline."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from conftest import speech
from whisper_spec.cli.main import main, pair_args
from whisper_spec.cli.parser import build_parser

from whisper_spec.longform.pipeline import transcribe
from whisper_spec.models.load import load_pair
from whisper_spec.options import DecodingOptions
from whisper_spec.outputs.writers import render

KEY = "test-key"
CLIPS = ["librispeech/test-clean/1089-134686-0000.flac", "librispeech/dev-clean/1272-128104-0000.flac",
         "fleurs/fleurs-de-001.ogg", "librispeech/test-clean/1089-134686-0001.flac"]
LONG = "longform/librispeech-test-other_1688-142285_0000-0009.flac"  # 67 s: speech chunks in several windows


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`whisper-spec serve` started in a process of its own, on a free loopback port."""

    def __init__(self, *flags: str):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from whisper_spec.cli import run; run()", "serve", "--port", str(self.port), "-q", *flags],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server ended ({self.process.returncode}): {self.process.stdout.read()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.5)
        self.stop()
        raise RuntimeError("the server did not answer /health in 180 s")

    def health(self) -> dict:
        return httpx.get(f"{self.url}/health", timeout=5).json()

    def post(self, path: str, *, fields: dict | None = None, name: str | None = None, content: bytes | None = None,
             key: str | None = KEY, task: str = "transcriptions", timeout: float = 300) -> httpx.Response:
        data = {"model": "whisper-1", **(fields or {})}
        body = Path(path).read_bytes() if content is None else content
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.post(f"{self.url}/v1/audio/{task}", data=data, files={"file": (name or Path(path).name, body)},
                          headers=headers, timeout=timeout)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=120)


@pytest.fixture(scope="module")
def server():
    running = Server("--api-key", KEY, "--max-upload-mb", "3")
    yield running
    assert running.stop() == 0


@pytest.fixture(scope="module")
def offline():
    """What `whisper-spec transcribe` gives: the pair the command line loads (as the server does),
    files transcribed alone with the options a response format asks for."""
    pair = load_pair(**pair_args(build_parser().parse_args(["serve"])))

    def result(path: str, **options):
        return next(transcribe(pair, [path], DecodingOptions(**options)))

    return result


def _error(response: httpx.Response) -> dict:
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"], error
    assert "\n" not in error["message"]
    return error


@pytest.mark.slow
def test_the_openai_client_gets_what_transcribe_gives(server, offline):
    from openai import OpenAI

    client = OpenAI(base_url=f"{server.url}/v1", api_key=KEY)
    clip = str(speech(CLIPS[0]))
    with open(clip, "rb") as audio:
        text = client.audio.transcriptions.create(model="whisper-1", file=audio)
    assert text.text == offline(clip).text
    with open(clip, "rb") as audio:
        verbose = client.audio.transcriptions.create(model="whisper-1", file=audio, response_format="verbose_json",
                                                     timestamp_granularities=["word", "segment"])
    timed = offline(clip, timestamps=True, word_timestamps=True)
    assert verbose.text == timed.text and verbose.language == "english" and verbose.duration == pytest.approx(timed.duration)
    assert [(s.start, s.end, s.text) for s in verbose.segments] == [(round(s.start, 3), round(s.end, 3), s.text)
                                                                    for s in timed.segments]
    assert [w.word for w in verbose.words] == [w.word.strip() for s in timed.segments for w in s.words]
    with open(clip, "rb") as audio:
        srt = client.audio.transcriptions.create(model="whisper-1", file=audio, response_format="srt")
    assert srt == render(offline(clip, timestamps=True), "srt")
    german = str(speech(CLIPS[2]))
    with open(german, "rb") as audio:
        translated = client.audio.translations.create(model="whisper-1", file=audio)
    assert translated.text == offline(german, task="translate").text
    assert client.models.list().data[0].id == "base"


@pytest.mark.slow
def test_concurrent_requests_share_batches_and_each_gets_its_own_transcript(server, offline):
    """Eight clients at once (four clips, a 67 s file of several speech chunks, each twice, json and
    srt): every response is the file's offline transcript, and the decoder's batches held more than
    one request's windows."""
    before = server.health()
    jobs = [(str(speech(p)), fmt) for p in [*CLIPS[:3], LONG] for fmt in ("json", "srt")]
    with ThreadPoolExecutor(len(jobs)) as pool:
        responses = list(pool.map(lambda job: server.post(job[0], fields={"response_format": job[1]}), jobs))
    for (path, fmt), response in zip(jobs, responses):
        assert response.status_code == 200, response.text
        expected = offline(path, timestamps=fmt == "srt")
        assert (response.json()["text"] if fmt == "json" else response.text) == (
            expected.text if fmt == "json" else render(expected, "srt")), path
    after = server.health()
    assert after["finished"] - before["finished"] == len(jobs) and after["in_flight"] == 0
    batches, windows = after["batches"] - before["batches"], after["batch_windows"] - before["batch_windows"]
    assert windows / batches > 1.5, (batches, windows)


@pytest.mark.slow
def test_what_the_server_refuses_it_refuses_as_openai_does(server, tmp_path):
    clip = str(speech(CLIPS[0]))
    assert server.post(clip, key=None).status_code == 401
    assert _error(server.post(clip, key="wrong"))["code"] == "invalid_api_key"
    assert httpx.get(f"{server.url}/v1/models", timeout=5).status_code == 401
    missing = server.post(clip, fields={"model": "gpt-4o-transcribe"})
    assert missing.status_code == 404 and _error(missing)["param"] == "model"
    for fields, param in (({"response_format": "xml"}, "response_format"), ({"temperature": "2"}, "temperature"),
                          ({"timestamp_granularities[]": "word"}, "timestamp_granularities[]"),
                          ({"language": "klingon"}, "language"), ({"beam_size": "5"}, "beam_size")):
        refused = server.post(clip, fields=fields)
        assert refused.status_code == 400 and _error(refused)["param"] == param, (fields, refused.text)
    assert _error(server.post(clip, fields={"language": "de"}, task="translations"))["param"] == "language"
    not_audio = server.post(clip, name="notes.mp3", content=b"these are not the samples you are looking for" * 50)
    assert not_audio.status_code == 400 and "notes.mp3" in _error(not_audio)["message"]
    empty = server.post(clip, name="empty.wav", content=b"")
    assert empty.status_code == 400 and "empty.wav" in _error(empty)["message"]
    too_big = server.post(clip, name="big.wav", content=b"\0" * (4 * 1024 * 1024))
    assert too_big.status_code == 413 and _error(too_big)["code"] == "file_too_large"
    assert server.post(clip).status_code == 200  # and it still serves
    # the live socket: its key as a header or (a browser's way) in the query, else an error message
    from websockets.sync.client import connect

    socket_url = f"ws://127.0.0.1:{server.port}/v1/audio/live"
    for url, headers in ((socket_url, None), (f"{socket_url}?api_key=wrong", None)):
        with connect(url, additional_headers=headers) as socket:
            assert json.loads(socket.recv(timeout=30))["code"] == "invalid_api_key"
    for url, headers in ((f"{socket_url}?api_key={KEY}", None), (socket_url, {"Authorization": f"Bearer {KEY}"})):
        with connect(url, additional_headers=headers) as socket:
            socket.send(json.dumps({"type": "end"}))
            assert json.loads(socket.recv(timeout=30))["type"] == "final"


@pytest.mark.slow
def test_a_client_that_leaves_takes_its_windows_out_and_disturbs_no_one(server, offline):
    before = server.health()
    with pytest.raises(httpx.TimeoutException):
        server.post(str(speech(LONG)), timeout=1.0)
    clip = str(speech(CLIPS[1]))
    response = server.post(clip)
    assert response.status_code == 200 and response.json()["text"] == offline(clip).text
    deadline = time.monotonic() + 60
    while server.health()["cancelled"] == before["cancelled"] and time.monotonic() < deadline:
        time.sleep(0.2)
    after = server.health()
    assert after["cancelled"] == before["cancelled"] + 1 and after["in_flight"] == 0


@pytest.mark.slow
def test_a_full_queue_answers_503_and_sigterm_lets_requests_in_flight_finish(offline):
    server = Server("--max-queue", "1", "--max-batch", "1")
    try:
        long = str(speech(LONG))
        with ThreadPoolExecutor(3) as pool:
            responses = list(pool.map(lambda _: server.post(long, key=None), range(3)))
        busy = [r for r in responses if r.status_code == 503]
        assert busy and all(r.headers["retry-after"] and _error(r)["code"] == "server_busy" for r in busy)
        assert all(r.status_code == 200 for r in responses if r.status_code != 503)
        with ThreadPoolExecutor(1) as pool:
            in_flight = pool.submit(server.post, long, key=None)
            while server.health()["in_flight"] == 0 and not in_flight.done():
                time.sleep(0.05)
            server.process.send_signal(signal.SIGTERM)
            response = in_flight.result()
        assert response.status_code == 200 and response.json()["text"] == offline(long).text
        assert server.process.wait(timeout=60) == 0
        with pytest.raises(httpx.TransportError):
            server.post(long, key=None, timeout=5)
    finally:
        server.stop()


def test_a_server_beyond_loopback_needs_a_key(capsys):
    assert main(["serve", "--host", "0.0.0.0"]) == 2
    assert "--api-key" in capsys.readouterr().err
