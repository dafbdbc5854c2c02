"""Live transcription: a buffer re-decoded every update with its confirmed text as prompt and prefix,
drafting from its last hypothesis; every update's tokens the main model's own for that buffer; text
confirmed where two updates agree."""

import numpy as np
import pytest
import soundfile
from conftest import main_alone, speech

from whisper_spec.bench.metrics import word_error_rate
from whisper_spec.decode.decoding import decode_encoded, encode_batch
from whisper_spec.decode.encoding import pair_features
from whisper_spec.longform.pipeline import transcribe
from whisper_spec.models.load import load_pair
from whisper_spec.options import DecodingOptions
from whisper_spec.serve.live import LiveStream, finish, update
from whisper_spec.speech.audio import SAMPLE_RATE, load_audio

RECORDINGS = ["longform/bill_gates-TED-next-epidemic-excerpt.flac",
              "longform/librispeech-test-other_1688-142285_0000-0009.flac"]
SECONDS, STEP = 32.0, 1.0


@pytest.mark.slow
def test_two_streams_share_updates_each_exact_and_the_confirmed_text_is_the_recordings(tmp_path):
    """Two recordings played a second at a time into two streams updated together (a second of silence
    before one), once drafting from the last hypothesis alone (the default, "auto") and once with the
    assistant drafting past it ("on"): every update's tokens, in both, equal a main-only decoding of
    the same buffer with the same prompt, prefix and end floor; the drafts save main-model passes
    (with the assistant, most of them); buffers are trimmed; the confirmed text at the end is the
    offline transcript's, give or take a word."""
    pair = load_pair("base")
    audio = [load_audio(speech(p))[: int(SECONDS * SAMPLE_RATE)] for p in RECORDINGS]
    audio[1] = np.concatenate([np.zeros(SAMPLE_RATE, np.float32), audio[1]])[: len(audio[0])]
    modes = {speculation: [LiveStream(language="en") for _ in audio] for speculation in ("auto", "on")}
    passes = {"auto": 0, "on": 0, "main-only": 0}
    reference_options = main_alone(DecodingOptions(timestamps=True))
    trimmed = prompted = False
    step = int(STEP * SAMPLE_RATE)
    for at in range(0, len(audio[0]), step):
        found = {}
        for speculation, streams in modes.items():
            for stream, samples in zip(streams, audio):
                stream.feed(samples[at : at + step])
            updates = update(pair, streams, DecodingOptions(timestamps=True, speculation=speculation))
            found[speculation] = [u for u in updates if u.tokens]
            passes[speculation] += sum(u.stats.main_forwards for u in found[speculation])
        decoded = found["auto"]
        # one main-only reference for both: the same buffers, prompts, prefixes and end floors
        assert [(u.prompt, u.prefix, u.end_floor, len(u.audio)) for u in found["on"]] == [
            (u.prompt, u.prefix, u.end_floor, len(u.audio)) for u in decoded], at / SAMPLE_RATE
        mel, _ = pair_features(pair, [u.audio for u in decoded])
        encoded, _ = encode_batch(pair, mel, reference_options)
        reference, _ = decode_encoded(pair, encoded, reference_options, languages=["en"] * len(decoded),
                                      end_floors=[u.end_floor for u in decoded],
                                      prompts=[u.prompt or None for u in decoded], prefixes=[u.prefix for u in decoded])
        for speculation, updates in found.items():
            assert [u.tokens for u in updates] == [r.tokens for r in reference], (speculation, at / SAMPLE_RATE)
        passes["main-only"] += sum(r.stats.main_forwards for r in reference)
        trimmed |= any(s.offset > 0 for s in modes["auto"])
        prompted |= len({len(u.prompt) for u in decoded}) > 1  # rows of several prompt lengths in one batch
    assert trimmed and prompted, (trimmed, prompted)
    assert passes["auto"] < passes["main-only"] and 2 * passes["on"] < passes["main-only"], passes
    for index, samples in enumerate(audio):
        soundfile.write(tmp_path / f"{index}.wav", samples, SAMPLE_RATE)
        offline = next(transcribe(pair, [tmp_path / f"{index}.wav"], DecodingOptions(language="en"))).text
        for speculation, streams in modes.items():
            finish(pair, streams[index])
            live = pair.main.tokenizer.decode(streams[index].confirmed)
            assert word_error_rate([offline], [live], ["en"]) < 0.08, (speculation, offline, live)


@pytest.mark.slow
def test_the_live_command_plays_a_file_at_real_time_and_reads_pcm_on_stdin(tmp_path):
    """`whisper-spec live --realtime FILE` and `whisper-spec live -` with the same audio as raw PCM: the
    confirmed text printed, the final transcript written as srt and txt, its text the offline one's give
    or take two (the first second's words are the least sure); a second argument that is a file is refused in one line."""
    import subprocess
    import sys

    clip = speech(RECORDINGS[1])
    audio = load_audio(clip)[: 12 * SAMPLE_RATE]
    soundfile.write(tmp_path / "clip.wav", audio, SAMPLE_RATE)
    command = [sys.executable, "-c", "from whisper_spec.cli import run; run()", "live", "-f", "srt", "-f", "txt",
               "--language", "en"]
    played = subprocess.run([*command, "--realtime", str(tmp_path / "clip.wav"), "-o", str(tmp_path / "played")],
                            capture_output=True, text=True, timeout=300)
    pcm = (np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes()
    piped = subprocess.run([*command, "-", "-o", str(tmp_path / "piped")], input=pcm, capture_output=True, timeout=300)
    assert played.returncode == 0 and piped.returncode == 0, (played.stderr, piped.stderr)
    pair = load_pair("base")
    offline = next(transcribe(pair, [tmp_path / "clip.wav"], DecodingOptions(language="en"))).text
    for folder, printed, name in ((tmp_path / "played", played.stdout, "clip"), (tmp_path / "piped", piped.stdout.decode(), "live")):
        text = (folder / f"{name}.txt").read_text()
        assert word_error_rate([offline], [text], ["en"]) < 0.15 and word_error_rate([offline], [printed], ["en"]) < 0.15
        assert "-->" in (folder / f"{name}.srt").read_text()
    refused = subprocess.run([*command, str(clip)], capture_output=True, text=True, timeout=300)
    assert refused.returncode != 0 and refused.stderr.strip().count("\n") == 0 and str(clip) in refused.stderr


@pytest.mark.slow
def test_the_servers_live_socket_gives_the_librarys_updates_and_shares_batches():
    """`whisper-spec serve`'s WebSocket: two clients stream recordings at real time, a second a message;
    every update's confirmed and tentative text is what live.update gives for the stream's audio up to
    that update (its "seconds"), the final message holds the transcript and its segments, and /health
    shows the two streams' updates sharing batches. A bad language is refused with an error message."""
    import json as jsonlib
    import time
    from concurrent.futures import ThreadPoolExecutor

    from test_serve import Server
    from websockets.sync.client import connect

    seconds = 12
    # what the socket's 16-bit samples are
    pcm = [(np.clip(load_audio(speech(p))[: seconds * SAMPLE_RATE], -1, 1) * 32767).astype("<i2") for p in RECORDINGS]

    def stream_over_socket(samples):
        got, started = [], time.monotonic()
        with connect(f"ws://127.0.0.1:{server.port}/v1/audio/live?language=en") as socket:
            for second, at in enumerate(range(0, len(samples), SAMPLE_RATE)):
                time.sleep(max(0.0, started + second - time.monotonic()))
                socket.send(samples[at : at + SAMPLE_RATE].tobytes())
                while True:
                    try:
                        got.append(jsonlib.loads(socket.recv(timeout=0)))
                    except TimeoutError:
                        break
            socket.send(jsonlib.dumps({"type": "end"}))
            while got[-1:] == [] or got[-1]["type"] == "update":
                got.append(jsonlib.loads(socket.recv(timeout=120)))
        return got

    server = Server()
    try:
        with ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(stream_over_socket, pcm))
        health = server.health()
        with connect(f"ws://127.0.0.1:{server.port}/v1/audio/live?language=klingon") as socket:
            refused = jsonlib.loads(socket.recv(timeout=30))
    finally:
        server.stop()
    pair = load_pair("base")
    for samples, messages in zip(pcm, answers):
        *updates, final = messages
        audio, stream = samples.astype(np.float32) / 32768.0, LiveStream(language="en")
        for message in updates:
            assert message["type"] == "update"
            stream.feed(audio[round(stream.seconds * SAMPLE_RATE) : round(message["seconds"] * SAMPLE_RATE)])
            result = update(pair, [stream])[0]
            decode = pair.main.tokenizer.decode
            assert (message["confirmed"], message["tentative"]) == (decode(result.confirmed), decode(result.tentative))
        assert updates[-1]["seconds"] == seconds
        finish(pair, stream)
        assert final["type"] == "final" and final["text"] == pair.main.tokenizer.decode(stream.confirmed).strip()
        assert final["segments"] and final["language"] == "english"
    assert health["live_streams"] == 2 and health["mean_live_batch"] > 1, health
    assert refused["type"] == "error" and "klingon" in refused["message"]


@pytest.mark.slow
def test_the_live_page_in_chromium_shows_what_its_microphone_hears(tmp_path):
    """GET /live in a real headless Chromium whose fake microphone plays a recording: two tabs stream it
    at once (sharing the decoder's batches, /health), and each page shows the recording's words (most of
    the offline transcript's, in order)."""
    import json as jsonlib
    import shutil
    import subprocess
    import time

    from test_serve import Server, _free_port
    from websockets.sync.client import connect

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:  # .ci/run installs it
        pytest.skip("no chromium here (apt-get install chromium): the page is driven by a real browser only")
    seconds = 16
    clip = tmp_path / "microphone.wav"
    soundfile.write(clip, load_audio(speech(RECORDINGS[0]))[: seconds * SAMPLE_RATE], SAMPLE_RATE, subtype="PCM_16")
    pair = load_pair("base")
    offline = next(transcribe(pair, [clip], DecodingOptions(language="en"))).text
    server, debugging = Server(), _free_port()
    page = f"{server.url}/live?autostart=1&language=en"
    chromium = subprocess.Popen(
        [browser, "--headless=new", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}",
         "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream", "--autoplay-policy=no-user-gesture-required",
         f"--use-file-for-fake-audio-capture={clip}%noloop", f"--remote-debugging-port={debugging}", page],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        import httpx

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                httpx.put(f"http://127.0.0.1:{debugging}/json/new?{page}", timeout=5)  # the second tab
                break
            except httpx.TransportError:
                time.sleep(0.5)
        tabs = [t for t in httpx.get(f"http://127.0.0.1:{debugging}/json/list", timeout=5).json() if t["type"] == "page"]
        assert len(tabs) == 2, tabs

        def shown(tab) -> str:
            with connect(tab["webSocketDebuggerUrl"], max_size=None) as socket:
                socket.send(jsonlib.dumps({"id": 1, "method": "Runtime.evaluate", "params": {
                    "expression": "document.getElementById('confirmed').textContent + "
                                  "document.getElementById('tentative').textContent", "returnByValue": True}}))
                # a tab still loading has no such elements yet: nothing shown so far
                return jsonlib.loads(socket.recv(timeout=30))["result"]["result"].get("value", "")

        texts, started = ["", ""], time.monotonic()
        changed = started
        deadline = started + seconds + 150  # a busy machine lags the live updates behind the audio
        while time.monotonic() < deadline:
            now = [shown(tab) for tab in tabs]
            changed, texts = (time.monotonic() if now != texts else changed), now
            if all(_heard(offline, text) >= 0.8 for text in texts):
                break
            # the clip has played and the pages have shown nothing new for 15 s: what they show is final
            if time.monotonic() > started + seconds and time.monotonic() - changed > 15 and all(texts):
                break
            time.sleep(1)
        health = server.health()
    finally:
        chromium.terminate()
        chromium.wait(30)
        server.stop()
    # the page shows what the socket sends (the text's quality is test_two_streams...'s, on fixed steps; a
    # browser's timing varies with the machine's load, and with it the updates' audio)
    for text in texts:
        assert _heard(offline, text) >= 0.6, (offline, text)
    assert health["live_streams"] == 2 and health["mean_live_batch"] > 1, health


def _heard(reference: str, text: str) -> float:
    """The share of the reference's words (normalized) that text has, in order."""
    import difflib

    from whisper_spec.bench.metrics import normalize

    words = [normalize(t, "en").split() for t in (reference, text)]
    matched = sum(b.size for b in difflib.SequenceMatcher(None, *words, autojunk=False).get_matching_blocks())
    return matched / max(len(words[0]), 1)
