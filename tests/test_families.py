"""The checkpoint families users bring, as random-weight copies at tiny dimensions (tests/families.py):
each pair loads (shared or own encoder as its layout says), decodes a long recording with timestamps and
word timestamps speculatively to exactly what the main model alone writes, and its decoder prompt and
greedy tokens are transformers' `generate`'s for the same checkpoint. Tiny random models: the fast tier
(so the AVX2 pass of CI runs them too), but for whisper.cpp's reading of them."""

import pytest
import soundfile
import torch
from conftest import mel_of, speech
from families import FAMILIES, PAIRS, build_families
from transformers import WhisperForConditionalGeneration

from whisper_spec.decode.decoding import decode_windows
from whisper_spec.longform.pipeline import transcribe
from whisper_spec.models.load import load_pair
from whisper_spec.options import DecodingOptions
from whisper_spec.speech.audio import SAMPLE_RATE, load_audio

LONG = "longform/bill_gates-TED-next-epidemic-excerpt.flac"
# random weights rarely end a text: a few tokens a window are what the checks need
OPTIONS = dict(word_timestamps=True, temperature=(0.0,), max_length=40)


@pytest.fixture(scope="module")
def families(tmp_path_factory):
    folder = tmp_path_factory.mktemp("families")
    built = build_families(folder)
    soundfile.write(folder / "long.wav", load_audio(speech(LONG))[: 40 * SAMPLE_RATE], SAMPLE_RATE)
    return built, folder / "long.wav"


@pytest.mark.parametrize("main, assistant", PAIRS)
def test_each_pair_decodes_a_long_recording_speculatively_as_its_main_model_alone(families, main, assistant):
    built, recording = families
    pair = load_pair(built[main], built[assistant])
    assert pair.shares_encoder == FAMILIES[assistant].causal  # decoder-only: the main encoder's; seq2seq: its own
    assert pair.main.alignment_heads == ()  # large-v3's heads name layers these decoders lack: dropped
    language = "en" if pair.main.special.multilingual else None
    results = {mode: next(transcribe(pair, [recording], DecodingOptions(language=language, speculation=mode, **OPTIONS)))
               for mode in ("off", "on")}
    alone, drafted = results["off"], results["on"]
    assert drafted.stats.drafted > 0 and drafted.stats.windows > 1
    assert drafted.text == alone.text and alone.text
    for mine, theirs in zip(drafted.segments, alone.segments, strict=True):
        assert (mine.start, mine.end, mine.tokens) == (theirs.start, theirs.end, theirs.tokens)
        assert [(w.word, w.start, w.end) for w in mine.words] == [(w.word, w.start, w.end) for w in theirs.words]
        assert mine.words


@pytest.mark.parametrize("name", [name for name, family in FAMILIES.items() if not family.causal])
def test_each_family_decodes_as_transformers_generate(families, name):
    """The greedy tokens after the decoder prompt (v3's ids one later from <|translate|> on; no language
    or task tokens for an English-only model), with and without timestamps."""
    built, _ = families
    mel = mel_of([speech("librispeech/dev-clean/1272-128104-0000.flac")], n_mels=FAMILIES[name].mels)
    pair = load_pair(built[name], None, int8=False, encoder_precision="float32")
    reference = WhisperForConditionalGeneration.from_pretrained(built[name], dtype=torch.float32).eval()
    special = pair.main.special
    language = "en" if special.multilingual else None
    for timestamps in (False, True):
        prompt = special.prompt(language, "transcribe", timestamps)  # <|yue|> shifts v3's task tokens
        assert (special.translate, special.transcribe) == ((50359, 50360) if "v3" in name else (50358, 50359)
                                                            if special.multilingual else (50357, 50358))
        ours, _ = decode_windows(pair, mel, DecodingOptions(language=language, timestamps=timestamps, speculation="off",
                                                            temperature=(0.0,), max_length=len(prompt) + 12))
        kwargs = dict(language=language, task="transcribe") if language else {}
        # generate returns the tokens after its decoder prompt: equal ones say the prompts are equal too
        theirs = [t for t in reference.generate(mel, max_new_tokens=12, return_timestamps=timestamps, **kwargs)[0].tolist()
                  if t != special.eot]
        # with timestamps, a text cut at max_new_tokens is decoded again from its last whole segment, and
        # generate returns both passes: compare its first, up to where its timestamps start again
        stamps = [(i, t) for i, t in enumerate(theirs) if t >= special.timestamp_begin]
        again = next((i for (_, before), (i, t) in zip(stamps, stamps[1:]) if t < before), len(theirs))
        assert ours[0].tokens[:again] == theirs[:again] and again >= 4, (name, timestamps)


GGML_CHECK = """
import json, sys
import _pywhispercpp as whisper
from whisper_spec.models.ggml import write_ggml
from whisper_spec.models.load import load_model
for folder, float16 in json.loads(sys.argv[1]):
    path = write_ggml(folder, f"{folder}/ggml-{float16}.bin", float16=float16)
    model = load_model(folder, int8=False)
    special, tokenizer = model.special, model.tokenizer
    context = whisper.whisper_init_from_file_with_params(str(path), whisper.whisper_context_default_params())
    read = dict(vocabulary=whisper.whisper_n_vocab(context), mels=whisper.whisper_model_n_mels(context),
                layers=(whisper.whisper_model_n_audio_layer(context), whisper.whisper_model_n_text_layer(context)),
                multilingual=bool(whisper.whisper_is_multilingual(context)),
                specials=[f(context) for f in (whisper.whisper_token_eot, whisper.whisper_token_sot,
                          whisper.whisper_token_not, whisper.whisper_token_beg, whisper.whisper_token_prev)])
    expected = dict(vocabulary=model.dims.n_vocab, mels=model.dims.n_mels,
                    layers=(model.dims.n_audio_layer, model.dims.n_text_layer), multilingual=special.multilingual,
                    specials=[special.eot, special.sot, special.no_timestamps, special.timestamp_begin, special.previous])
    assert read == expected, (folder, read, expected)
    texts = [(i, whisper.whisper_token_to_bytes(context, i)) for i in range(0, special.eot, 97)]
    wrong = [i for i, text in texts if text.decode("utf-8", "replace") != tokenizer.decode([i])
             and "\\ufffd" not in tokenizer.decode([i])]
    assert not wrong, (folder, wrong[:5])
    whisper.whisper_free(context)
print("ok")
"""


@pytest.mark.slow
def test_each_family_is_written_as_a_ggml_file_whisper_cpp_reads_with_our_vocabulary(families):
    """whisper.cpp (pywhispercpp's build, in a process of its own: ggml's threads would stay in this
    one) loads the file written from each seq2seq family, float16 and float32, checking every tensor's
    name, shape and size as it reads: its vocabulary size, mel bins, layers and special-token ids are
    ours (v3's one later from <|translate|> on; English-only ids), and its tokens' bytes are our tokenizer's."""
    import json
    import subprocess
    import sys

    pytest.importorskip("pywhispercpp")
    built, _ = families
    folders = [[str(built[name]), float16] for name, family in FAMILIES.items() if not family.causal
               for float16 in (True, False)]
    done = subprocess.run([sys.executable, "-c", GGML_CHECK, json.dumps(folders)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
