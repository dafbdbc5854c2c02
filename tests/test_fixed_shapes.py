"""The fixed-shape rounds (fixed_shapes.fixed_shape_decode: GPUs, CPUs without row-invariant kernels)
on this CPU: the tokens of the row-invariant rounds in both modes, at every batch size, greedy and
sampling, whatever the rounds between host reads, each row's text held open to its end floor; and no
host read inside a round. And the buffers CUDA graphs replay on: where a batch's caches lie."""

from dataclasses import replace

import pytest
import torch
from conftest import main_alone, perturbed_decoder, random_model
from torch.profiler import ProfilerActivity, profile

from whisper_spec.decode.caches import BatchCaches
from whisper_spec.decode.decoding import decode_encoded, decode_windows, encode_batch
from whisper_spec.decode.fixed_shapes import CompileError
from whisper_spec.decode.graphs import buffer_layout
from whisper_spec.models.attention import DecoderCaches
from whisper_spec.models.model import Linear
from whisper_spec.models.pair import WhisperPair
from whisper_spec.models.tokenizer import TIME_PRECISION
from whisper_spec.options import DecodingOptions

CPU = torch.device("cpu")
OPTIONS = {
    "greedy": DecodingOptions(speculation="on", language="en", draft_tokens=3, draft_confidence=0),
    "timestamps-adaptive": DecodingOptions(speculation="on", language="de", timestamps=True, adaptive_draft=True,
                                           draft_tokens=2, max_draft_tokens=6, draft_confidence=0),
    "confidence": DecodingOptions(speculation="on", language="fr", draft_tokens=5, draft_confidence=0.3),
    "sampling": DecodingOptions(speculation="on", language="en", draft_tokens=4, draft_confidence=0,
                                temperature=(0.8,), seed=3),
    # some windows fail the log-probability rule and decode again at 0.6
    "fallback": DecodingOptions(speculation="on", language="nl", draft_tokens=3, draft_confidence=0,
                                temperature=(0.0, 0.6), logprob_threshold=-0.6),
}


def random_pair(noise: float = 0.1) -> WhisperPair:
    main = random_model(0, eot_bias=0.25)
    return WhisperPair(main, perturbed_decoder(main, noise, seed=1), CPU, torch.float32)


def fixed_shapes(pair: WhisperPair, rounds_per_read: int) -> WhisperPair:
    """The same pair, decoding as where no padding makes the main decoder's kernels row-invariant."""
    fixed = WhisperPair(pair.main, pair.assistant, pair.device, pair.dtype)
    fixed.platform = replace(pair.platform, row_invariant=False, rounds_per_read=rounds_per_read)
    return fixed


@pytest.mark.parametrize("name", list(OPTIONS))
@pytest.mark.parametrize("batch", [1, 4])
def test_fixed_shape_rounds_give_the_row_invariant_tokens_in_both_modes(name, batch):
    options, pair = OPTIONS[name], random_pair()
    torch.manual_seed(batch)
    mel = torch.randn(batch, 80, 3000)
    reference, _ = decode_windows(pair, mel, main_alone(options), seeds=list(range(batch)))
    for rounds_per_read in (1, 3):
        fixed = fixed_shapes(pair, rounds_per_read)
        for mode in (main_alone(options), options):
            results, stats = decode_windows(fixed, mel, mode, seeds=list(range(batch)))
            assert [r.tokens for r in results] == [r.tokens for r in reference], f"{mode.speculation}, {rounds_per_read}"
            assert [r.hit_max_length for r in results] == [r.hit_max_length for r in reference]
            assert [r.temperature for r in results] == [r.temperature for r in reference]
            assert [r.avg_logprob for r in results] == pytest.approx([r.avg_logprob for r in reference])
            if mode is options:
                assert stats.drafted > 0 and stats.accepted > 0


def flash_cross_attention(pair: WhisperPair) -> WhisperPair:
    """fixed_shapes(pair, 2) with its decoders' cross-attention through flash attention, their keys
    row-major as flash's kernel reads them, and their vocabulary rows aligned, as on a GPU
    (platform.prepare)."""
    fixed = fixed_shapes(pair, 2)
    for decoder in (pair.main.decoder, pair.assistant.decoder):
        decoder.flash_cross_attention, decoder.transposed_keys = True, False
        decoder.proj_out = Linear.of(decoder.token_embedding.weight)  # tied, as load.build_decoder makes it
        decoder.align_vocab_rows()
    return fixed


def test_aligned_vocabulary_rows_give_the_tied_projections_logits():
    """Off CPU the output projection's rows are padded to a multiple of 16 (100 here), its weight a
    view of them: a tied embedding and every module sharing it read the same rows, the logits are
    the projection's, n_vocab wide."""
    main = random_model(0)
    decoder, shared = main.decoder, perturbed_decoder(main, 0.1, seed=1).decoder
    shared.token_embedding = decoder.token_embedding
    decoder.proj_out = Linear.of(decoder.token_embedding.weight)
    x = torch.randn(3, 2, decoder.dims.d_model)
    with torch.inference_mode():
        before = decoder.logits(x)
        decoder.align_vocab_rows()
        after = decoder.logits(x)
    rows = decoder.proj_out.aligned
    assert rows.shape[0] == 112 and not rows[100:].any()
    assert shared.token_embedding.weight.data_ptr() == decoder.proj_out.weight.data_ptr() == rows.data_ptr()
    assert after.shape == before.shape == (3, 2, 100) and after.is_contiguous()
    torch.testing.assert_close(after, before, rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", ["greedy", "timestamps-adaptive", "sampling"])
@pytest.mark.parametrize("batch", [1, 4])
def test_flash_cross_attention_gives_both_modes_one_text_in_fixed_shape_rounds(name, batch):
    options, pair = OPTIONS[name], random_pair()
    torch.manual_seed(batch)
    mel = torch.randn(batch, 80, 3000)
    written_out, _ = decode_windows(fixed_shapes(pair, 2), mel, main_alone(options), seeds=list(range(batch)))
    flash = flash_cross_attention(pair)
    reference, _ = decode_windows(flash, mel, main_alone(options), seeds=list(range(batch)))
    results, stats = decode_windows(flash, mel, options, seeds=list(range(batch)))
    assert [r.tokens for r in results] == [r.tokens for r in reference]
    assert stats.drafted > 0 and stats.accepted > 0
    # the same attention in another summation order: a text or two may part where two tokens are near-tied
    same = sum(a.tokens == b.tokens for a, b in zip(reference, written_out))
    assert same >= batch - 1


def test_flash_cross_attention_computes_the_written_out_attention():
    """Decoder steps with cross-attention through flash attention and written out: the same logits
    up to rounding (the audio's frames do matter: other audio, other logits)."""
    decoder = random_model(0).decoder
    decoder.transposed_keys = False  # as flash's kernel reads them (platform.prepare)
    torch.manual_seed(1)
    tokens = torch.randint(0, decoder.dims.n_vocab, (3, 4))
    positions = torch.tensor([[5, 6, 7, 8], [0, 1, 2, 3], [9, 10, 11, 12]])
    logits = {}
    for audio in (0, 1):
        cross = decoder.cross_states(torch.randn(3, 1500, decoder.dims.d_model))
        for flash in (False, True):
            decoder.flash_cross_attention = flash
            torch.manual_seed(2)
            caches = decoder.new_caches(3, 37)
            for cache in caches:
                cache.k.normal_(0, 1), cache.v.normal_(0, 1)
            with torch.inference_mode():
                logits[audio, flash] = decoder(tokens, positions, DecoderCaches(cross, caches))
    for audio in (0, 1):
        torch.testing.assert_close(logits[audio, True], logits[audio, False], rtol=0, atol=1e-4)
    assert (logits[0, False] - logits[1, False]).abs().max() > 1e-2


@pytest.mark.parametrize("batch", [1, 4])
def test_end_floors_hold_each_rows_text_open_alike_in_both_modes_and_both_rounds(batch):
    options, pair = OPTIONS["timestamps-adaptive"], random_pair()
    special = pair.main.special
    torch.manual_seed(batch)
    encoded, _ = encode_batch(pair, torch.randn(batch, 80, 3000), options)
    floors = [0.6, 0.0, 0.3, 0.7][:batch]
    reference, _ = decode_encoded(pair, encoded, main_alone(options), end_floors=floors)
    unheld, _ = decode_encoded(pair, encoded, main_alone(options))
    assert [r.tokens for r in reference] != [r.tokens for r in unheld]
    for result, floor in zip(reference, floors):
        last_timestamp = max([t for t in result.tokens if t >= special.timestamp_begin], default=special.timestamp_begin)
        assert result.hit_max_length or last_timestamp >= special.timestamp_begin + round(floor / TIME_PRECISION)
    for decoding in (pair, fixed_shapes(pair, 2)):
        for mode in (main_alone(options), options):
            results, _ = decode_encoded(decoding, encoded, mode, end_floors=floors)
            assert [r.tokens for r in results] == [r.tokens for r in reference], mode.speculation


def compiled_rounds(pair: WhisperPair) -> WhisperPair:
    """flash_cross_attention(pair) compiling its rounds' steps as on a GPU (Platform.compiles), its
    assistant reading every frame (one shape a batch size) and its linears unpacked (inductor takes
    oneDNN's packed weights only as constants)."""
    fixed = flash_cross_attention(pair)
    fixed.platform = replace(fixed.platform, compiles="rounds", assistant_skips_padding=False)
    for module in (*pair.main.decoder.modules(), *pair.assistant.decoder.modules()):
        if isinstance(module, Linear):
            module.packed = None
    return fixed


@pytest.mark.slow
def test_compiled_rounds_give_both_modes_one_text(monkeypatch):
    """DecodingOptions.compile where the platform compiles rounds: the draft, verification and
    settling steps through torch.compile, cross-attention through flash attention, as on a GPU
    (about a minute on two cores): one text in both modes, greedy with timestamps and sampling. In
    scalar C++ (inductor's vector code for this CPU is not what a GPU runs, and some of it fails to
    build)."""
    from torch._dynamo.utils import counters
    from torch._inductor import config

    monkeypatch.setattr(config.cpp, "simdlen", 1)

    pair = compiled_rounds(random_pair())
    torch.manual_seed(2)
    mel = torch.randn(2, 80, 3000)
    for name in ("timestamps-adaptive", "sampling"):
        options = replace(OPTIONS[name], adaptive_draft=False, compile=True)
        compiled_frames = counters["frames"]["ok"]
        reference, _ = decode_windows(pair, mel, main_alone(options), seeds=[0, 1])
        results, stats = decode_windows(pair, mel, options, seeds=[0, 1])
        assert [r.tokens for r in results] == [r.tokens for r in reference], name
        assert stats.drafted > 0 and stats.accepted > 0
        assert counters["frames"]["ok"] >= compiled_frames + 3  # settle, verify_step and draft_step, at least


def test_a_round_step_that_cannot_compile_fails_naming_it(monkeypatch):
    """Never a step eager in one mode and compiled in the other: a compiler error ends the decoding."""
    import whisper_spec.decode.fixed_shapes as fixed_rounds

    def failing(function, **options):
        def run(*args, **kwargs):
            raise torch._dynamo.exc.TorchRuntimeError("no backend here")
        return run

    monkeypatch.setattr(torch, "compile", failing)
    fixed_rounds.compiled_step.cache_clear()
    try:
        with pytest.raises(RuntimeError, match=r"torch.compile failed on verify_step \(TorchRuntimeError: no backend"):
            decode_windows(compiled_rounds(random_pair()), torch.randn(1, 80, 3000),
                           main_alone(replace(OPTIONS["greedy"], compile=True)))
    finally:
        fixed_rounds.compiled_step.cache_clear()


def scalar_reads(pair: WhisperPair, mel: torch.Tensor, options: DecodingOptions) -> tuple[int, int]:
    """Host reads of device values while decoding (a scalar read back, a boolean mask's nonzero) and
    the main model's forwards."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        _, stats = decode_windows(pair, mel, options)
    events = {e.key: e.count for e in prof.key_averages()}
    return events.get("aten::_local_scalar_dense", 0) + events.get("aten::nonzero", 0), stats.main_forwards


@pytest.mark.parametrize("rounds_per_read", [1, 4])
def test_a_fixed_shape_round_reads_nothing_back_but_whether_every_row_is_done(rounds_per_read):
    """Rows that never end before max_length: a longer decoding adds rounds, and at most one host
    read a rounds_per_read of them. The row-invariant rounds, which read several a round, show the
    count catches reads."""
    main = random_model(0)
    pair = WhisperPair(main, perturbed_decoder(main, 0.05, seed=1), CPU, torch.float32)
    mel = torch.randn(3, 80, 3000)
    options = DecodingOptions(speculation="on", language="en", draft_tokens=3, temperature=(0.0,))
    for decoding in (fixed_shapes(pair, rounds_per_read), pair):
        short_reads, short_rounds = scalar_reads(decoding, mel, replace(options, max_length=24))
        long_reads, long_rounds = scalar_reads(decoding, mel, replace(options, max_length=60))
        extra_reads, extra_rounds = long_reads - short_reads, long_rounds - short_rounds
        assert extra_rounds >= 8
        if decoding is pair:
            assert extra_reads >= 2 * extra_rounds
        else:
            assert extra_reads <= extra_rounds / rounds_per_read + 1


def test_whole_rounds_replayed_as_graphs_would_give_the_same_tokens(monkeypatch):
    """The control flow of CUDA graphs of whole rounds, on CPU: a stand-in capture runs the round as
    the warm-up does and hands back a replay that runs the captured function again (what a graph
    replay computes, on the context and state it was captured with), the per-step graphs are
    stand-ins as well. Tokens and counts must be those of step-by-step rounds, and from the second
    round on every round must be a replay; a later batch of the same configuration (other audio,
    other seeds) replays the graph the first captured, with its own values, and one of another
    shape captures its own."""
    import whisper_spec.decode.fixed_shapes as fixed_rounds

    replays, captures = [], []

    class Replayed:
        def __init__(self, run_round):
            captures.append(1)
            run_round()  # capture_round's warm-up is a real round
            self.run_round = run_round

        def replay(self):
            replays.append(1)
            self.run_round()

    monkeypatch.setattr(fixed_rounds, "capture_round", Replayed)
    steps = []

    def stand_in_step_graphs(decoder):
        def replayed(caches, name, step, *inputs):
            steps.append(name[0])
            return step(*inputs)
        return replayed

    monkeypatch.setattr(fixed_rounds, "step_graphs", stand_in_step_graphs)
    pair = random_pair()
    torch.manual_seed(0)
    batches = [(torch.randn(3, 80, 3000), [0, 1, 2]), (torch.randn(3, 80, 3000), [3, 4, 5]),
               (torch.randn(2, 80, 3000), [6, 7])]
    for options in (OPTIONS["greedy"], OPTIONS["sampling"], OPTIONS["confidence"]):
        stepwise = fixed_shapes(pair, 2)
        graphed = fixed_shapes(pair, 2)
        graphed.platform = replace(graphed.platform, cuda_graphs=True)
        for mode in (main_alone(options), options):
            for batch, (mel, seeds) in enumerate(batches):
                expected, expected_stats = decode_windows(stepwise, mel, mode, seeds=seeds)
                replays.clear()
                steps.clear()
                captured_before = len(captures)
                results, stats = decode_windows(graphed, mel, mode, seeds=seeds)
                # the prompt's prefill and the first round's steps are replayed step graphs
                assert steps[0] == "prefill" and steps.count("prefill") == 1 and "verify" in steps
                assert [r.tokens for r in results] == [r.tokens for r in expected]
                assert (stats.main_forwards, stats.assistant_forwards, stats.accepted) == (
                    expected_stats.main_forwards, expected_stats.assistant_forwards, expected_stats.accepted)
                captured = len(captures) - captured_before
                assert captured == (batch != 1), "a batch of a configuration seen before captured its rounds again"
                # prefill and the first round run as they are, then a capture's warm-up or replays
                assert replays and len(replays) == stats.main_forwards - 2 - captured


def test_a_step_that_fails_on_its_own_raises_and_keeps_graphs_on(monkeypatch):
    """StepGraphs on CPU with stand-ins for CUDA's stream, graph and pool: a step whose warm-up raises
    (a compile error) raises as it is, and the decoder's other steps are still captured; a capture
    that fails turns graphs off with a warning and runs the step eagerly, with its result."""
    import contextlib

    import whisper_spec.decode.graphs as graphs

    failing_capture = []

    @contextlib.contextmanager
    def stand_in_capture(graph, pool=None):
        if failing_capture:
            raise RuntimeError("operation not permitted when stream is capturing")
        yield

    monkeypatch.setattr(graphs, "_warm_up", lambda fn, *inputs: fn(*inputs))
    monkeypatch.setattr(torch.cuda, "graph", stand_in_capture)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", lambda: type("Graph", (), {"replay": lambda self: None})())
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: None)
    caches = DecoderCaches([], random_model(0).decoder.new_caches(1, 8))
    steps = graphs.StepGraphs()

    def cannot_compile(x):
        raise CompileError("compile: torch.compile failed on verify_step (...)")

    with pytest.raises(CompileError):
        steps(caches, ("verify",), cannot_compile, torch.ones(2))
    assert not steps.failed
    assert torch.equal(steps(caches, ("draft",), lambda x: x + 1, torch.ones(2)), torch.full((2,), 2.0))
    failing_capture.append(1)
    with pytest.warns(UserWarning, match="CUDA graphs turned off"):
        assert torch.equal(steps(caches, ("settle",), lambda x: x * 3, torch.ones(2)), torch.full((2,), 3.0))
    assert steps.failed


@torch.inference_mode()
def test_stable_caches_keep_their_buffers_across_batches_of_one_shape():
    """A captured CUDA graph reads and writes the memory it was captured with: with stable buffers
    (CUDA graphs on), the next batch of the same shape finds its caches and cross-attention states
    where the last one's were, holding its own states; a batch of another shape gets buffers of its
    own, a batch of the first shape after it finds the first's again, and without stable buffers a
    batch reads its own states in place."""
    decoder = random_model(0).decoder
    dims = decoder.dims

    def cross(batch: int, seed: int):
        return decoder.cross_states(torch.randn(batch, dims.n_audio_ctx, dims.d_model,
                                                generator=torch.Generator().manual_seed(seed)))

    first, second = cross(2, 0), cross(2, 1)
    layout = buffer_layout(BatchCaches([(decoder, first)], 16, row_invariant=False, stable=True).main)
    caches = BatchCaches([(decoder, second)], 16, row_invariant=False, stable=True).main
    assert buffer_layout(caches) == layout
    assert all(torch.equal(kept, new) for kept_kv, new_kv in zip(caches.cross, second) for kept, new in zip(kept_kv, new_kv))
    assert buffer_layout(BatchCaches([(decoder, cross(3, 2))], 16, row_invariant=False, stable=True).main) != layout
    # back to the first shape (the bench interleaves batch sizes): its buffers again
    assert buffer_layout(BatchCaches([(decoder, cross(2, 3))], 16, row_invariant=False, stable=True).main) == layout
    assert BatchCaches([(decoder, second)], 16, row_invariant=False).main.cross is second
