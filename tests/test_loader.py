"""Loader: shared-encoder and own-encoder assistants, exports, and incompatible pairs."""

import pytest
import torch
from conftest import mel_of, speech

from whisper_spec.decode.decoding import decode_windows
from whisper_spec.models.export import save_model
from whisper_spec.models.load import load_pair
from whisper_spec.models.model import Decoder
from whisper_spec.models.pair import IncompatiblePair, Whisper, check_pair, decoder_subset
from whisper_spec.options import DecodingOptions

CLIPS = ["librispeech/test-other/1998-15444-0003.flac", "multilingual/pl/mls_1889_1447_000002.flac"]


@pytest.mark.slow
def test_decoder_only_assistant_reads_no_encoder_and_is_exact(base_pair, tmp_path):
    subset = decoder_subset(base_pair.main, [0, 3, 5])
    assert subset.name == "base[decoder layers 0,3,5]"
    # it shares the main layers' weights and their packed float32 copies, copying neither
    mine, theirs = subset.decoder.blocks[1].mlp.fc1, base_pair.main.decoder.blocks[3].mlp.fc1
    assert mine.weight.data_ptr() == theirs.weight.data_ptr()
    assert mine.packed is theirs.packed is not None
    export = save_model(subset, tmp_path / "assistant")
    pair = load_pair("base", export)
    assert pair.shares_encoder and pair.assistant.encoder is None
    assert pair.assistant.dims.n_text_layer == 3
    mel = mel_of([speech(c) for c in CLIPS])
    main_only, _ = decode_windows(pair, mel, DecodingOptions(speculation="off"))
    speculative, stats = decode_windows(pair, mel, DecodingOptions(speculation="on", draft_tokens=3))
    assert [r.tokens for r in main_only] == [r.tokens for r in speculative]
    assert stats.drafted > 0
    # asked to run its own encoder, it is refused in words a command-line user can act on
    with pytest.raises(IncompatiblePair, match="has no encoder weights.*--assistant-encoder shared"):
        load_pair("base", export, assistant_encoder="own")


@pytest.mark.slow
def test_full_model_export_round_trips_through_our_loader_and_transformers(tmp_path):
    """checkpoint.py's weight-name table read both ways: every tensor comes back as it was."""
    from transformers import WhisperForConditionalGeneration

    model = load_pair("tiny.en", int8=False, encoder_precision="float32").main
    export = save_model(model, tmp_path / "tiny.en")
    again = load_pair(export, int8=False, encoder_precision="float32").main
    for part in ("encoder", "decoder"):
        mine, theirs = getattr(model, part).state_dict(), getattr(again, part).state_dict()
        assert mine.keys() == theirs.keys()
        assert all(torch.equal(mine[k], theirs[k]) for k in mine), part
    hf = WhisperForConditionalGeneration.from_pretrained(export, dtype=torch.float32)
    assert torch.equal(hf.model.decoder.layers[3].encoder_attn.v_proj.weight,
                       model.decoder.blocks[3].cross_attn.kv.weight[model.dims.d_model:])
    assert torch.equal(hf.model.encoder.layers[2].self_attn.q_proj.bias,
                       model.encoder.blocks[2].attn.qkv.bias[: model.dims.d_model])


@pytest.mark.slow
def test_an_exported_assistant_keeps_the_languages_and_tasks_it_drafts_for(tmp_path):
    """An assistant distilled for some languages and tasks, exported, still leaves the others to the
    main model alone; a full model's export carries no such limits, and transformers reads both."""
    from dataclasses import replace

    from transformers import WhisperConfig

    from whisper_spec.models.load import load_model
    from whisper_spec.models.pair import DRAFTING_CONFIG

    main = load_pair("tiny.en", int8=False, encoder_precision="float32").main
    limited = replace(decoder_subset(main, [0, 2]), draft_languages=("en",), draft_tasks=("transcribe",),
                      audio_frame_margin=50)
    again = load_model(save_model(limited, tmp_path / "assistant"), with_encoder=False)
    assert (again.draft_languages, again.draft_tasks, again.audio_frame_margin) == (("en",), ("transcribe",), 50)
    assert not again.drafts_for("translate")
    assert getattr(WhisperConfig.from_pretrained(tmp_path / "assistant"), DRAFTING_CONFIG)["draft_tasks"] == ["transcribe"]

    full = load_model(save_model(main, tmp_path / "full"), encoder_precision="float32")
    assert (full.draft_languages, full.draft_tasks, full.audio_frame_margin) == (None, None, None)
    assert DRAFTING_CONFIG not in WhisperConfig.from_pretrained(tmp_path / "full").to_dict()


@pytest.mark.slow
def test_full_checkpoint_can_share_or_keep_its_encoder(base_pair):
    shared = load_pair("base", "base", assistant_encoder="shared")
    assert shared.shares_encoder and shared.assistant.encoder is None
    own = load_pair("base", "base", assistant_encoder="auto", int8=False, assistant_int8=False)
    assert not own.shares_encoder and own.assistant.encoder is not None
    mel = mel_of([speech(CLIPS[0])])
    main_only, _ = decode_windows(own, mel, DecodingOptions(speculation="off"))
    speculative, stats = decode_windows(own, mel, DecodingOptions(speculation="on", draft_tokens=6, draft_confidence=0))
    assert main_only[0].tokens == speculative[0].tokens
    assert stats.acceptance == 1.0  # the same model drafting for itself agrees everywhere


@pytest.mark.slow
def test_weights_match_transformers(base_pair):
    from transformers import WhisperForConditionalGeneration

    hf = WhisperForConditionalGeneration.from_pretrained(base_pair.main.path, dtype=torch.float32)
    mel = mel_of([speech(CLIPS[0])])
    with torch.inference_mode():
        ours = base_pair.main.encoder(mel)
        theirs = hf.model.encoder(mel).last_hidden_state
    assert torch.allclose(ours, theirs, atol=1e-4)


@pytest.mark.slow
def test_load_pair_loads_what_the_command_line_loads_unless_told():
    """The library's defaults are the command line's (platform.default_precision: int8 decoders on
    CPU where a fast int8 kernel runs), so a file transcribed from Python gets the command line's
    text; int8=False is --no-int8."""
    from whisper_spec.cli.common import pair_args
    from whisper_spec.cli.parser import build_parser

    from whisper_spec.models.pair import decoder_precision, encoder_precision
    from whisper_spec.models.platform import default_device, default_int8

    def precisions(pair):
        return decoder_precision(pair.main), encoder_precision(pair.main), decoder_precision(pair.assistant)

    library = {}
    for flags, kwargs in (([], {}), (["--no-int8"], {"int8": False})):
        command_line = pair_args(build_parser().parse_args(["transcribe", "x.wav", *flags]))
        library[bool(flags)] = load_pair("base", **kwargs)
        from_flags = load_pair(**command_line)
        assert precisions(library[bool(flags)]) == precisions(from_flags), flags
        assert library[bool(flags)].device == from_flags.device == default_device()  # one default device for both
    assert decoder_precision(library[False].main).startswith("int8/") == default_int8(torch.device("cpu"))
    assert decoder_precision(library[True].main) == "float32"


@pytest.mark.slow
def test_incompatible_vocabulary_is_refused():
    with pytest.raises(IncompatiblePair, match=r"vocabulary sizes differ \(51865 vs 51864"):
        load_pair("base", "tiny.en")


@pytest.mark.slow
def test_shared_encoder_needs_matching_width(base_pair):
    main = base_pair.main
    narrow = Decoder(main.dims.__class__(**{**main.dims.__dict__, "d_model": 64, "n_text_ffn": 128, "n_text_layer": 1}))
    fake = Whisper("narrow", main.path, narrow.dims, main.special, main.tokenizer, narrow, None)
    with pytest.raises(IncompatiblePair, match="d_model=512"):
        check_pair(main, fake)


@pytest.mark.slow
def test_dtype_and_device_options():
    pair = load_pair("tiny.en", dtype="bfloat16", device="cpu", int8=False)
    assert pair.main.decoder.token_embedding.weight.dtype == torch.bfloat16
    mel = mel_of([speech("librispeech/dev-clean/1272-128104-0000.flac")])
    result, _ = decode_windows(pair, mel, DecodingOptions(speculation="on"))
    assert "Quilter" in pair.main.tokenizer.decode(result[0].tokens)
    with pytest.raises(ValueError, match="dtype|float64"):
        load_pair("tiny.en", dtype="float64")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA"):
            load_pair("tiny.en", device="cuda")


@pytest.mark.slow
def test_alignment_heads_naming_layers_the_decoder_lacks_are_dropped(tmp_path):
    """A distilled checkpoint listing its teacher's heads (layers past its own): word timestamps still
    time every word, with the heads it has, or the later half's heads where it has none of them."""
    import json

    from conftest import speech

    from whisper_spec.longform.pipeline import transcribe
    from whisper_spec.options import DecodingOptions

    model = load_pair("tiny.en", int8=False, encoder_precision="float32").main
    export = save_model(model, tmp_path / "tiny.en")
    config = json.loads((export / "generation_config.json").read_text())
    clip = speech("librispeech/test-clean/1089-134686-0000.flac")
    for heads in ([[2, 1], [7, 3], [31, 19]], [[7, 3], [31, 19], [3, 9]]):  # tiny.en: 4 layers of 6 heads
        (export / "generation_config.json").write_text(json.dumps({**config, "alignment_heads": heads}))
        pair = load_pair(export, assistant=None, int8=False, encoder_precision="float32")
        assert pair.main.alignment_heads == tuple(tuple(h) for h in heads if h[0] < 4 and h[1] < 6)
        result = next(transcribe(pair, [clip], DecodingOptions(word_timestamps=True)))
        words = [w for s in result.segments for w in s.words]
        assert words and "".join(w.word for w in words).strip() == result.text


@pytest.mark.slow
def test_the_python_api_chooses_threads_as_the_command_line_does_once_per_process():
    """In a process of its own (torch's threads are the process's): load_pair sets the idle cores
    on its first load where no count is given, a given count wins, and a later load without one keeps it."""
    import os
    import subprocess
    import sys

    script = (
        "import torch\n"
        "from whisper_spec.models.load import load_pair\n"
        "torch.set_num_threads(7)\n"
        "load_pair('tiny.en', None, device='cpu')\n"
        "first = torch.get_num_threads()\n"
        "load_pair('tiny.en', None, device='cpu', threads=3)\n"
        "given = torch.get_num_threads()\n"
        "load_pair('tiny.en', None, device='cpu')\n"
        "print(first, given, torch.get_num_threads())\n"
    )
    idle = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}  # a test worker's count (conftest)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=idle)
    assert done.returncode == 0, done.stderr
    first, given, kept = map(int, done.stdout.split())
    assert 1 <= first <= len(os.sched_getaffinity(0)) < 7
    assert (given, kept) == (3, 3)


@pytest.mark.parametrize("variable, expected", [("3", 3), ("", None), ("many", None)])
def test_omp_num_threads_in_the_environment_is_the_first_loads_thread_count(variable, expected):
    """OMP_NUM_THREADS where set is the count a load without one takes (the user's, or a test
    worker's share of the cores), over the idle cores; unset or unreadable, the idle cores."""
    import os
    import subprocess
    import sys

    script = ("import torch\nfrom whisper_spec.models.platform import use_threads\n"
              "torch.set_num_threads(7)\nprint(use_threads(None))\n")
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"} | ({"OMP_NUM_THREADS": variable} if variable else {})
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    chosen = int(done.stdout)
    assert chosen == expected if expected is not None else 1 <= chosen <= len(os.sched_getaffinity(0)) < 7
