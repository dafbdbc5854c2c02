"""Live transcription: a buffer re-decoded every update, drafting from its last hypothesis; every
update's tokens the main model's own for that buffer; text confirmed where two updates agree."""

import pytest
import soundfile
from conftest import main_alone, speech

from whisper_spec.audio import SAMPLE_RATE, load_audio
from whisper_spec.bench.metrics import word_error_rate
from whisper_spec.decoding import decode_windows
from whisper_spec.encoding import pair_features
from whisper_spec.live import LiveStream, finish, update
from whisper_spec.load import load_pair
from whisper_spec.options import DecodingOptions
from whisper_spec.pipeline import transcribe

RECORDINGS = ["longform/librispeech-test-other_1688-142285_0000-0009.flac",
              "longform/bill_gates-TED-next-epidemic-excerpt.flac"]
SECONDS, STEP = 36.0, 2.0


@pytest.mark.slow
def test_two_streams_share_updates_each_exact_and_the_confirmed_text_is_the_recordings(tmp_path):
    """Two recordings played 2 s at a time into two streams updated together: every update's tokens
    equal a main-only decoding of the same buffer; hints save most main-model passes; the confirmed text
    at the end is the offline transcript's, give or take a few words at the trims."""
    pair = load_pair("base")
    audio = [load_audio(speech(p))[: int(SECONDS * SAMPLE_RATE)] for p in RECORDINGS]
    streams = [LiveStream(language="en") for _ in audio]
    options = DecodingOptions(timestamps=True)
    passes = {"hinted": 0, "main-only": 0}
    trimmed = False
    step = int(STEP * SAMPLE_RATE)
    for at in range(0, len(audio[0]), step):
        for stream, samples in zip(streams, audio):
            stream.feed(samples[at : at + step])
        buffers = [s.audio.copy() for s in streams]
        updates = update(pair, streams, options)
        reference, _ = decode_windows(pair, pair_features(pair, buffers)[0], main_alone(options), languages=["en", "en"])
        assert [u.tokens for u in updates] == [r.tokens for r in reference], at / SAMPLE_RATE
        passes["hinted"] += sum(u.stats.main_forwards for u in updates)
        passes["main-only"] += sum(r.stats.main_forwards for r in reference)
        trimmed |= any(s.offset > 0 for s in streams)
    assert trimmed and passes["hinted"] * 2 < passes["main-only"], passes
    for index, (stream, samples) in enumerate(zip(streams, audio)):
        finish(pair, stream)
        soundfile.write(tmp_path / f"{index}.wav", samples, SAMPLE_RATE)
        offline = next(transcribe(pair, [tmp_path / f"{index}.wav"], DecodingOptions(language="en"))).text
        live = pair.main.tokenizer.decode(stream.confirmed)
        assert word_error_rate([offline], [live], ["en"]) < 0.15, (offline, live)
