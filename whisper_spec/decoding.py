"""Batched speculative decoding of 30 s windows, exact with respect to the main model.

Per round: the assistant drafts up to k tokens per row, the main decoder scores the row's last
accepted token plus all drafts in one forward pass, and each row keeps its own longest accepted
prefix plus the main model's next token. Rows never wait for each other: every row has its own
length, its own positions and (through the position-masked static cache) its own rollback.

Greedy: a draft is accepted when it equals the main model's argmax, so the output is the main
model's own greedy output token for token. Sampling: the token at each position is drawn from the
main model's distribution by inverting its cumulative distribution at a uniform number fixed by the
window's seed and the position (sample_tokens), and a draft is accepted when it equals that token:
the output is a sample of the main model's distribution and, for a seed, the same tokens whether or
not an assistant drafted (the assistant draws at the same numbers, so its drafts mostly agree).

The same loop with no assistant (k = 0) is plain main-only decoding, so both share every rule.
decode_encoded runs it once per temperature a window needs (DecodingOptions.temperature).
"""

from __future__ import annotations

import functools
import math
import time
import warnings
import zlib
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from .encoding import detect_language, encode, sot_logits, synchronize
from .graphs import step_graphs
from .load import cpu_has_amx
from .options import DecodingOptions
from .pair import Whisper, WhisperPair, decoder_precision
from .rules import LogitRules
from .stats import DecodingStats

# speculation="auto": what drafting is measured to pay for. An assistant's draft step cross-attends to
# its rows' audio frames (the audio plus 1 s: Whisper.audio_frame_margin), a main step to the whole
# window, so a round's drafting costs more against the steps it saves as rows x frames grow. By device
# kind (device_kind) and main decoder precision ("float" or "int8"): the most rows x assistant frames
# of a batch whose rounds draft (a batch over it is decoded by the main model alone); a pair not
# listed always drafts. On an AVX-512 Xeon with AMX (bfloat16 encoder), the default int8 decoders,
# each policy on the same encoded batches in one run (benchmarks/speculation_policy.py), drafting in
# every round against main-only in decoding seconds: on full 30 s windows of the long-form recordings
# 1.06x at batch 2, 1.00x at 3, 0.97x at 4 (speculation_policy_longform_amx_cpu.json), and drafting
# for a batch's last 1-3 rows no better (0.98-1.01x at batch 4, that file as committed in d12d6c3);
# on 78 LibriSpeech clips of 7 s on average 1.22x at batch 2 and 1.14x at 4
# (speculation_policy_amx_cpu.json).
# Hence three full windows: the most where drafting in every round did not cost time. On the AMD
# EPYC (AVX2) CPU, drafting in every round, on 78 LibriSpeech clips: float32 decoders 1.59x at
# batch 1 (librispeech_row_int8_projection_cpu), 1.46x at 2 and 1.38x at 4
# (librispeech_rows_on_row_int8_cpu); int8 decoders 1.24x, 1.15x and 1.09x, and long-form at batch 4
# 1.01x (longform_b4_on_cpu.json). On an H200, float16, on the same encoded LibriSpeech batches:
# 1.23x at batch 1, 1.14x at 2, 1.08x at 4 (gpu_h200_cuda_int8_unsplit/speculation_policy_h200.json).
AUTO_MAX_DRAFT_FRAMES: dict[tuple[str, str], int] = {("cpu-amx", "int8"): 3 * 1500}


def device_kind(device: torch.device) -> str:
    """The device's type, "cpu-amx" for a CPU with AMX tiles (load.cpu_has_amx), whose kernels and
    measured policies differ."""
    return "cpu-amx" if device.type == "cpu" and cpu_has_amx() else device.type


def auto_max_draft_frames(main: Whisper) -> int | None:
    """AUTO_MAX_DRAFT_FRAMES for the main model's device kind and decoder precision (None: no limit)."""
    precision = "int8" if decoder_precision(main).startswith("int8") else "float"
    return AUTO_MAX_DRAFT_FRAMES.get((device_kind(main.decoder.positional_embedding.device), precision))


def auto_drafts(main: Whisper, assistant: Whisper, batch: int) -> bool:
    """speculation="auto": whether the rounds of a batch of this many rows, whose frames the
    assistant's cross-attention holds, draft."""
    limit = auto_max_draft_frames(main)
    return limit is None or batch * assistant.decoder.blocks[0].cross_attn.cross_kv[0].shape[-2] <= limit


# Where the main decoder's kernels are not row-invariant (model.Decoder.row_invariant) every main
# decoder call has the same shape in both modes, so a position's logits cannot depend on the mode:
# the prompt is prefilled alone, each round's window is right-padded to the widest round either mode
# can have (the padding lies past the row's end, where the cache holds stale drafts anyway), every
# row stays in the batch, and the projection and rules run on every position of the window.
# The assistant's calls, which need not be exact, are padded to this width only for CUDA graphs.
ASSISTANT_WIDTH = 2


@dataclass
class WindowResult:
    tokens: list[int]  # sampled tokens after the prompt, timestamps included, EOT excluded
    language: str | None
    hit_max_length: bool  # stopped by max_length rather than EOT
    stats: DecodingStats  # this row's counts; times are the batch's, shared equally by its rows
    no_speech: bool = False  # judged silent by the no-speech rule (DecodingOptions): no text
    no_speech_prob: float | None = None  # None where the rule is off
    avg_logprob: float | None = None  # computed where a verdict needs it (needs_fallback, the no-speech rule)
    compression_ratio: float = 0.0  # of the text (compression_ratio): above its threshold, the text loops
    temperature: float = 0.0  # of the decoding pass whose text this is


def _window(tokens: Tensor, start: Tensor, width: int) -> tuple[Tensor, Tensor]:
    """Each row's tokens at positions start .. start + width - 1, and those positions."""
    positions = start[:, None] + torch.arange(width, device=tokens.device)
    return tokens.gather(1, positions), positions


def accept_greedy(target: Tensor, drafts: Tensor, eligible: Tensor) -> tuple[Tensor, Tensor]:
    """Per row: how many drafts equal the main model's argmax in a row, and the main model's
    token after them. target: [batch, k + 1] the main model's argmax (of processed logits);
    drafts, eligible: [batch, k]."""
    agree = (drafts == target[:, : drafts.shape[1]]) & eligible
    n_accepted = agree.long().cumprod(dim=1).sum(dim=1)
    return n_accepted, target.gather(1, n_accepted[:, None])[:, 0]


_UINT32 = 0xFFFFFFFF


def _mul32(x: Tensor, constant: int) -> Tensor:
    """x * constant modulo 2**32, for x in [0, 2**32), in halves so that int64 never overflows."""
    return (x * (constant & 0xFFFF) + (((x * (constant >> 16)) & 0xFFFF) << 16)) & _UINT32


def _hash32(x: Tensor) -> Tensor:
    """An integer hash of 32-bit values (Wellons' lowbias32) whose outputs pass as independent
    uniform draws: counter-based randomness, the same on every device and in any batch."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def position_uniforms(seeds: Tensor, positions: Tensor) -> Tensor:
    """A uniform number in (0, 1) per (seed, token position): what sampling draws at a position."""
    key = _hash32((_hash32(seeds & _UINT32) + positions) & _UINT32)
    return ((key >> 9).float() + 0.5) / 2**23  # exact in float32, never 0 or 1


def sample_tokens(logits: Tensor, temperature: float, uniforms: Tensor) -> Tensor:
    """Per row, the token where the cumulative distribution softmax(logits / temperature) first
    exceeds the row's uniform number (inverse transform sampling): distributed as the model's, and
    a function of the logits and the number alone, so a position scored in either mode gives the
    same token. logits: [n, vocab]; uniforms: [n]."""
    cumulative = torch.softmax(logits / temperature, dim=-1).cumsum(dim=-1)
    # times the total rather than 1, as the float sum may fall short of 1; the first index reaching
    # the target is always a token of positive probability
    targets = (uniforms * cumulative[:, -1])[:, None]
    return torch.searchsorted(cumulative, targets)[:, 0]


@torch.inference_mode()
def decode_windows(
    pair: WhisperPair,
    mel: Tensor,
    options: DecodingOptions = DecodingOptions(),
    *,
    assistant_mel: Tensor | None = None,
    languages: list[str | None] | None = None,
    seeds: list[int] | None = None,
    use_assistant: bool = True,
) -> tuple[list[WindowResult], DecodingStats]:
    """Decode a batch of 30 s windows.

    mel: [batch, n_mels, 3000] features for the main model; assistant_mel: the assistant's own
    features where it has its own encoder with other mel settings. languages: per row, overriding
    options.language (None: detect). seeds: per row, the window's own seed for sampling, mixed with
    options.seed (the pipeline's: a hash of the window's samples, so a window samples alike in any
    batch; default 0). use_assistant=False decodes with the main model alone.
    """
    stats = DecodingStats(windows=mel.shape[0])
    encode(pair, mel, assistant_mel, stats)
    return decode_encoded(pair, mel.shape[0], options, languages=languages, seeds=seeds, use_assistant=use_assistant,
                          stats=stats)


@torch.inference_mode()
def decode_encoded(
    pair: WhisperPair,
    batch: int,
    options: DecodingOptions = DecodingOptions(),
    *,
    languages: list[str | None] | None = None,
    seeds: list[int] | None = None,
    use_assistant: bool = True,
    stats: DecodingStats | None = None,
) -> tuple[list[WindowResult], DecodingStats]:
    """decode_windows after `encode`: the decoders' cross-attention already holds the batch.

    Every window is decoded at the first temperature; a window whose text fails (needs_fallback)
    is decoded again at the next one, alone with the others that failed, until one passes or the
    temperatures run out (best_attempt). The verdicts are the main model's (its tokens and
    probabilities), so both modes decode the same windows again and keep the same texts."""
    stats = stats or DecodingStats(windows=batch)
    languages = list(languages) if languages is not None else [options.language] * batch
    seeds = list(seeds) if seeds is not None else [0] * batch
    if len(languages) != batch or len(seeds) != batch:
        raise ValueError(f"{len(languages)} languages and {len(seeds)} seeds for {batch} windows")
    first_temperature, *fallbacks = options.temperature
    attempts = [[r] for r in _decode_pass(pair, batch, options, first_temperature, languages, seeds, use_assistant,
                                          stats)]
    decoders = [model.decoder for model in (pair.main, pair.assistant if use_assistant else None) if model is not None]
    retry = [i for i, tried in enumerate(attempts) if needs_fallback(tried[-1], options)]
    for temperature in fallbacks:
        if not retry:
            break
        # graphs off: a capture for each such batch would cost more than its steps save
        pass_stats = DecodingStats(fallbacks=len(retry))
        with _RowsKept(decoders) as kept:
            kept.keep(torch.tensor(retry, device=pair.device))
            results = _decode_pass(pair, len(retry), replace(options, cuda_graphs=False), temperature,
                                   [attempts[i][0].language for i in retry], [seeds[i] for i in retry],
                                   use_assistant, pass_stats)
        stats.add(pass_stats)
        for i, result in zip(retry, results):
            attempts[i].append(result)
        retry = [i for i in retry if needs_fallback(attempts[i][-1], options)]
    return [best_attempt(tried, options) for tried in attempts], stats


def needs_fallback(result: WindowResult, options: DecodingOptions) -> bool:
    """openai-whisper's verdict: the text loops (compression ratio) or the main model doubts it
    (average log-probability), and the window is not silent (no-speech probability) as well."""
    doubtful = (options.logprob_threshold is not None and result.avg_logprob is not None
                and result.avg_logprob < options.logprob_threshold)
    loops = options.compression_ratio_threshold is not None and result.compression_ratio > options.compression_ratio_threshold
    silent = (doubtful and options.no_speech_threshold is not None and result.no_speech_prob is not None
              and result.no_speech_prob > options.no_speech_threshold)
    return (loops or doubtful) and not silent


def best_attempt(attempts: list[WindowResult], options: DecodingOptions) -> WindowResult:
    """The last attempt where it passed; where every temperature failed, faster-whisper's choice:
    the most probable (average log-probability) of the texts that do not loop, else of all. Its
    stats count every attempt's work."""
    chosen = attempts[-1]
    if needs_fallback(chosen, options):
        threshold = options.compression_ratio_threshold
        unlooped = [a for a in attempts if threshold is None or a.compression_ratio <= threshold]
        chosen = max(unlooped or attempts, key=lambda a: a.avg_logprob if a.avg_logprob is not None else -math.inf)
    if len(attempts) == 1:
        return chosen
    stats = DecodingStats()
    for attempt in attempts:
        stats.add(attempt.stats)
    stats.windows, stats.fallbacks = 1, len(attempts) - 1
    return replace(chosen, stats=stats)


def _decode_pass(pair: WhisperPair, batch: int, options: DecodingOptions, temperature: float,
                 languages: list[str | None], seeds: list[int], use_assistant: bool, stats: DecodingStats
                 ) -> list[WindowResult]:
    """One decoding of every row of the batch at this temperature (0: greedy)."""
    main, device = pair.main, pair.device
    assistant = pair.assistant if use_assistant else None
    languages = [main.special.language_code(language) for language in languages]
    max_length = min(options.max_length or main.dims.n_text_ctx, main.dims.n_text_ctx)
    # one cache length for main-only and speculative decoding: attention spans the whole cache, so
    # equal lengths keep a position's logits independent of the mode (see Decoder.features)
    n_ctx = max_length + options.max_draft_tokens + 1
    decoders = [model.decoder for model in (main, assistant) if model is not None]
    for decoder in decoders:
        decoder.ensure_caches(batch, n_ctx)
    row_invariant = main.decoder.row_invariant  # probed at its first call: not in decoding's time

    synchronize(device)
    start_time = time.perf_counter()
    after_sot = None
    if main.special.multilingual and any(language is None for language in languages):
        after_sot = sot_logits(main, batch)
        stats.main_forwards += 1
        languages = [language or found for language, found in zip(languages, detect_language(main, after_sot))]
    if not main.special.multilingual:
        languages = ["en"] * batch
    with _LiveRows(decoders, batch, device, row_invariant) as live:
        context = _context(main, assistant, options, temperature, seeds, languages, n_ctx, max_length, device, live)
        state = _initial_state(context, languages)
        if after_sot is not None and context.judges_silence:
            read_no_speech(context, state, after_sot)
        speculative_decode(context, state, stats)
    synchronize(device)
    stats.decoding_seconds += time.perf_counter() - start_time
    return _results(state, context, languages, stats)


class _RowsKept:
    """Some rows of the batch in the decoders' caches and cross-attention states; on exit, normal or
    not, every row's are put back, so the next call neither reallocates the caches nor misses a
    row's audio."""

    def __init__(self, decoders: list):
        self.decoders = decoders
        self._full = [(block.attn, block.attn.kv_cache, block.cross_attn, block.cross_attn.cross_kv)
                      for decoder in decoders for block in decoder.blocks]
        self._tensors = [(cache, cache.k, cache.v) for _, cache, _, _ in self._full if cache is not None]

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        for attention, cache, cross, states in self._full:
            attention.kv_cache, cross.cross_kv = cache, states
        for cache, k, v in self._tensors:
            cache.k, cache.v = k, v

    def keep(self, rows: Tensor) -> None:
        """Keep these rows (an index or a mask over the rows kept so far)."""
        for decoder in self.decoders:
            decoder.keep_rows(rows)


class _LiveRows(_RowsKept):
    """The rows the decoders compute. With row-invariant kernels (model.Decoder.row_invariant)
    finished rows leave the decoders' batch rather than run until the longest row ends: a row's
    results do not depend on which rows run beside it. Without, every row stays (fixed shapes)."""

    def __init__(self, decoders: list, batch: int, device: torch.device, row_invariant: bool):
        super().__init__(decoders)
        self.batch = batch
        self.alive = torch.arange(batch, device=device) if row_invariant else None

    def keep(self, active: Tensor) -> None:
        if self.alive is not None and len(self.alive) > int(active.sum()):
            keep = active[self.alive]
            self.alive = self.alive[keep]
            super().keep(keep)

    def call(self, step, window: Tensor, positions: Tensor, *args) -> Tensor:
        """step(window, positions, *args) for every row of the batch; rows that left it get zeros."""
        if self.alive is None or len(self.alive) == self.batch:
            return step(window, positions, *args)
        out = step(window[self.alive], positions[self.alive], *args)
        return out.new_zeros((self.batch, *out.shape[1:])).index_copy_(0, self.alive, out)


@dataclass(frozen=True)
class _Context:
    """What stays fixed while a batch decodes."""

    main: Whisper
    assistant: Whisper | None
    options: DecodingOptions
    rules: LogitRules
    draft_rules: LogitRules  # on the assistant's draft vocabulary, where it has one
    temperature: float  # 0: greedy
    seeds: Tensor  # per row, what sampling's uniform numbers derive from (position_uniforms)
    prompt_length: int
    n_ctx: int  # decoder cache positions
    max_length: int
    max_draft: int
    drafts: bool  # the assistant drafts in every round (speculation on, or auto where it pays)
    fixed_width: int | None  # every main decoder call this many positions wide; None: row-invariant kernels
    graphs: bool  # decoder steps replayed from CUDA graphs
    draft_logits: object  # draft_logits itself, or compiled (DecodingOptions.compile_drafts)
    live: _LiveRows
    judges_silence: bool  # the no-speech rule is on (DecodingOptions.no_speech_threshold)
    judges_text: bool  # every row's average log-probability is needed (a later temperature may follow)


@dataclass
class _State:
    """Per-row decoding state: each row has its own length, cache extents and draft length."""

    tokens: Tensor  # [batch, n_ctx + 1]: prompt, accepted tokens, then the round's drafts
    length: Tensor  # accepted tokens, prompt included
    main_cached: Tensor  # positions below this hold valid main keys and values
    assistant_cached: Tensor
    drafting: Tensor  # the assistant drafts for the row's language; other rows are the main model's alone
    draft_length: Tensor  # drafts per round
    done: Tensor
    hit_max: Tensor  # stopped by max_length rather than EOT
    counts: Tensor  # [batch, 5]: drafted, accepted, generated, main and assistant forwards
    by_position: Tensor  # [2, batch, max_draft]: drafted and accepted at each draft position
    # [batch, n_ctx + 1]: the main model's log-probability of each accepted token, by position
    # (sums_logprobs), summed once at the end so that both modes add them in one order
    logprobs: Tensor
    no_speech: Tensor | None = None  # each row's probability of <|nospeech|> after SOT (judges_silence)
    sums_logprobs: bool = False  # a row may be judged silent: sum its tokens' log-probabilities


def _context(main, assistant, options, temperature, seeds, languages, n_ctx, max_length, device, live) -> _Context:
    special = main.special
    prompt_length = len(special.prompt(languages[0], options.task, options.timestamps))
    rules = LogitRules(special, main.dims.n_vocab, prompt_length, options.timestamps, device)
    # an assistant with a draft vocabulary gets its rules and argmax on those columns only
    draft_vocab = assistant.decoder.draft_vocab if assistant is not None else None
    draft_rules = rules if draft_vocab is None else LogitRules(
        special, main.dims.n_vocab, prompt_length, options.timestamps, device, vocab=draft_vocab)
    seeds = _hash32((_hash32(torch.tensor(options.seed, device=device) & _UINT32)
                     + torch.tensor(seeds, device=device)) & _UINT32)
    max_draft = 0 if assistant is None else (options.max_draft_tokens if options.adaptive_draft else options.draft_tokens)
    drafts = assistant is not None and (options.speculation == "on" or (
        options.speculation == "auto" and auto_drafts(main, assistant, len(languages))))
    # the widest round either mode can have, whether or not there is an assistant
    fixed_width = None
    if not main.decoder.row_invariant:
        fixed_width = (options.max_draft_tokens if options.adaptive_draft else options.draft_tokens) + 1
    graphs = options.cuda_graphs and device.type == "cuda"
    step = compiled_draft_logits if options.compile_drafts and device.type == "cpu" else draft_logits
    judges_silence = options.no_speech_threshold is not None and special.no_speech is not None
    judges_text = options.logprob_threshold is not None and len(options.temperature) > 1
    return _Context(main, assistant, options, rules, draft_rules, temperature, seeds, prompt_length, n_ctx,
                    max_length, max_draft, drafts, fixed_width, graphs, step, live, judges_silence, judges_text)


def _initial_state(context: _Context, languages: list[str]) -> _State:
    main, assistant, options = context.main, context.assistant, context.options
    batch, device = len(languages), main.decoder.positional_embedding.device
    prompts = [main.special.prompt(language, options.task, options.timestamps) for language in languages]
    tokens = torch.full((batch, context.n_ctx + 1), main.special.eot, dtype=torch.long, device=device)
    tokens[:, : context.prompt_length] = torch.tensor(prompts, device=device)
    length = torch.full((batch,), context.prompt_length, device=device)
    # rows in a language the assistant was not trained for would reject nearly every draft
    drafting = torch.tensor([assistant is not None and (assistant.draft_languages is None
                                                        or language in assistant.draft_languages)
                             for language in languages], device=device)
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    return _State(tokens, length, torch.zeros_like(length), torch.zeros_like(length),
                  drafting, torch.where(drafting, options.draft_tokens, 0), done, torch.zeros_like(done),
                  torch.zeros(batch, 5, dtype=torch.long, device=device),
                  torch.zeros(2, batch, context.max_draft, dtype=torch.long, device=device),
                  torch.zeros(tokens.shape, device=device), sums_logprobs=context.judges_text)


def speculative_decode(context: _Context, state: _State, stats: DecodingStats) -> None:
    """Rounds of draft, verify, accept and advance until every row has ended. Without an
    assistant (k = 0) a round is one main-model step, so both modes share every rule."""
    if context.fixed_width is not None:
        prefill(context, state, stats)
    while not bool(state.done.all()):
        active = ~state.done
        context.live.keep(active)
        k = int(state.draft_length[active].max()) if context.drafts else 0
        round_drafts, k = draft(context, state, k, stats)
        logits, scored = verify(context, state, k, round_drafts, stats)
        n_accepted, next_token = accept(context, state, k, round_drafts, logits, scored)
        logprobs = token_logprobs(state, k, logits, scored, n_accepted, next_token) if state.sums_logprobs else None
        advance(context, state, k, round_drafts, n_accepted, next_token, adapt=context.drafts, logprobs=logprobs)


def prefill(context: _Context, state: _State, stats: DecodingStats) -> None:
    """The main model's keys and values of the prompt but its last token, in a call of its own, so
    that every later main call has the same width (fixed shapes)."""
    n_prefill = context.prompt_length - 1
    if n_prefill > 0:
        positions = torch.arange(n_prefill, device=state.tokens.device).expand(len(state.tokens), -1)
        hidden = context.main.decoder.features(state.tokens[:, :n_prefill], positions)
        if context.judges_silence and state.no_speech is None:
            read_no_speech(context, state, context.main.decoder.logits(hidden[:, 0]))
        state.main_cached[:] = n_prefill
        stats.main_forwards += 1


def read_no_speech(context: _Context, state: _State, after_sot: Tensor) -> None:
    """Each row's no-speech probability from the main model's logits after SOT (its first call's,
    or language detection's), and whether a row may be judged silent."""
    options = context.options
    state.no_speech = torch.softmax(after_sot, dim=-1)[:, context.main.special.no_speech]
    state.sums_logprobs = context.judges_text or (options.logprob_threshold is not None
                                                  and bool((state.no_speech > options.no_speech_threshold).any()))


def _window_logits(context: _Context, decoder, window: Tensor, positions: Tensor, compact: bool) -> Tensor:
    """Logits at every position of the window, [batch, width, vocab] (compact: the draft
    vocabulary's columns), replayed from a CUDA graph where enabled."""
    def step(window: Tensor, positions: Tensor) -> Tensor:
        return decoder.logits(decoder.features(window, positions), compact=compact)

    if context.graphs:
        return step_graphs(decoder)("compact" if compact else "full", step, window, positions)
    return step(window, positions)


def draft_logits(decoder, window: Tensor, positions: Tensor, span: int) -> Tensor:
    """An assistant's logits on its draft vocabulary after each row's last position, [batch,
    columns]; attention spans the first span cache positions."""
    return decoder.logits(decoder.features(window, positions, span)[:, -1], compact=True)


@functools.cache
def _compiled_draft_logits():
    # one graph for every frame count and span, one for batches of 1 and one for larger ones
    # (dynamic shapes); compiled at first use, as importing the compiler alone costs seconds. The
    # decoder's buffers (caches, whose batch shrinks as rows finish) dynamic too: static, they
    # made a graph per batch size, each compiled for seconds inside a job
    import torch._dynamo

    return torch._dynamo.config.patch(force_parameter_static_shapes=False, force_nn_module_property_static_shapes=False)(
        torch.compile(draft_logits, dynamic=True, fullgraph=True))


_COMPILE_FAILED: list[str] = []  # why drafts went back to eager, once a compilation failed


def compiled_draft_logits(decoder, window: Tensor, positions: Tensor, span: int) -> Tensor:
    """draft_logits through torch.compile (DecodingOptions.compile_drafts): the step's ~750 small
    ops fused into a few kernels around the matmuls. Its drafts may differ from eager ones in the
    last bits (fused arithmetic); they are proposals, each verified by the main model, so the
    output does not change. One position a row only, the usual step: the few wider calls (a
    round's first step, catching up on the main model's token) run eagerly, as a graph for them
    would be compiled per width (the decoder's query-by-query attention loops over it). Where
    compilation fails (no C++ compiler), eager, with a warning."""
    if window.shape[1] == 1 and not _COMPILE_FAILED:
        try:
            return _compiled_draft_logits()(decoder, window, positions, span)
        except Exception as error:  # noqa: BLE001 - any compiler failure: the eager step is the same function
            _COMPILE_FAILED.append(f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}")
            warnings.warn(f"compiled drafts unavailable, drafting eagerly ({_COMPILE_FAILED[0]})", stacklevel=2)
    return draft_logits(decoder, window, positions, span)


def draft(context: _Context, state: _State, k: int, stats: DecodingStats) -> tuple[Tensor, int]:
    """Up to k drafts per row from the assistant, written after the row's accepted tokens; in
    sampling, drawn at the uniform numbers the main model's tokens will be (sample_tokens).

    A row unsure of a draft stops there: its later drafts would mostly be rejected, yet cost a
    step and a verified position. Returns each row's drafts this round and the round's k (lower
    when every row stopped)."""
    assistant, options, tokens = context.assistant, context.options, state.tokens
    active = ~state.done
    rows = torch.arange(len(tokens), device=tokens.device)
    draft_vocab = assistant.decoder.draft_vocab if assistant is not None else None
    round_drafts = state.draft_length.clamp(max=k)
    for j in range(k):
        current = state.length + j
        width = int((current - state.assistant_cached)[active].max())
        # with CUDA graphs: one shape for most steps, the whole cache attended
        window, positions = _window(tokens, (current - width).clamp(min=0),
                                    max(width, ASSISTANT_WIDTH) if context.graphs else width)
        if context.graphs:
            logits = _window_logits(context, assistant.decoder, window, positions, compact=True)[:, width - 1]
        else:
            # the assistant attends to the positions in use only, not the whole cache
            span = min(int(current.max()) + 1, context.n_ctx)
            logits = context.live.call(functools.partial(context.draft_logits, assistant.decoder), window,
                                       positions, span)
        logits = context.draft_rules(logits, tokens, current)
        state.assistant_cached = current.clone()
        if context.temperature == 0:
            choice = logits.argmax(dim=-1)
        else:
            choice = sample_tokens(logits, context.temperature, position_uniforms(context.seeds, current))
        tokens[rows, current] = choice if draft_vocab is None else draft_vocab[choice]
        stats.assistant_forwards += 1
        if options.draft_confidence > 0:
            confidence = torch.softmax(logits / (context.temperature or 1.0), dim=-1).gather(1, choice[:, None])[:, 0]
            round_drafts = torch.where(confidence < options.draft_confidence,
                                       round_drafts.clamp(max=j + 1), round_drafts)
            if not bool((round_drafts[active] > j + 1).any()):
                return round_drafts, j + 1
    return round_drafts, k


def verify(context: _Context, state: _State, k: int, round_drafts: Tensor, stats: DecodingStats
           ) -> tuple[Tensor, Tensor]:
    """The main decoder scores each row's last accepted token and every draft in one pass.
    Returns the processed logits only where the round can end, [n_scored, vocab]: each active
    row's drafts and the position after them (scored, [batch, k + 1])."""
    tokens, length, decoder = state.tokens, state.length, context.main.decoder
    active = ~state.done
    steps = torch.arange(k + 1, device=tokens.device)
    needed = int((length - state.main_cached)[active].max()) + k
    width = max(needed, context.fixed_width or 0)
    window, positions = _window(tokens, (length + k - needed).clamp(min=0), width)
    scored = (steps <= round_drafts[:, None]) & active[:, None]
    stats.main_forwards += 1
    if context.fixed_width is None:
        features = context.live.call(decoder.features, window, positions)
        hidden = features[:, needed - k - 1 : needed][scored]
        # the first round's window starts at SOT: its logits there in the same product, rather than
        # a main call of their own (row-invariant: as a one-token step would give them)
        first = context.judges_silence and state.no_speech is None
        logits = decoder.logits(torch.cat([hidden, features[:, 0]]) if first else hidden)
        if first:
            read_no_speech(context, state, logits[len(hidden):])
            logits = logits[: len(hidden)]
        flat = scored.view(-1)
        logits = context.rules(logits, tokens.repeat_interleave(k + 1, dim=0)[flat],
                               (length[:, None] + steps).view(-1)[flat])
        return logits, scored
    logits = _window_logits(context, decoder, window, positions, compact=False)
    # each position's logits are for the token after it
    logits = context.rules(logits.flatten(0, 1), tokens.repeat_interleave(width, dim=0), (positions + 1).view(-1))
    return logits.view(len(tokens), width, -1)[:, needed - k - 1 : needed][scored], scored


def accept(context: _Context, state: _State, k: int, round_drafts: Tensor, logits: Tensor, scored: Tensor
           ) -> tuple[Tensor, Tensor]:
    """Per row: how many drafts are kept, and the main model's token after them: its argmax, or in
    sampling its draw at the position's uniform number (sample_tokens)."""
    steps = torch.arange(k + 1, device=logits.device)
    positions = state.length[:, None] + steps
    drafts = state.tokens.gather(1, positions[:, :k])
    eligible = steps[:k] < round_drafts[:, None]
    target = torch.full((len(state.tokens), k + 1), context.main.special.eot, device=logits.device)
    if context.temperature == 0:
        target[scored] = logits.argmax(dim=-1)
    else:
        uniforms = position_uniforms(context.seeds[:, None].expand_as(positions)[scored], positions[scored])
        target[scored] = sample_tokens(logits, context.temperature, uniforms)
    return accept_greedy(target, drafts, eligible)


def token_logprobs(state: _State, k: int, logits: Tensor, scored: Tensor, n_accepted: Tensor, next_token: Tensor
                   ) -> Tensor:
    """[batch, k + 1]: the main model's log-probability (of its processed logits, as openai-whisper
    sums them) of each token the round keeps: the accepted drafts, then the next token."""
    steps = torch.arange(k + 1, device=logits.device)
    kept = state.tokens.gather(1, state.length[:, None] + steps).scatter(1, n_accepted[:, None], next_token[:, None])
    keeps = scored & (steps <= n_accepted[:, None])  # the rejected drafts' rows are not normalised
    logprobs = torch.zeros(scored.shape, device=logits.device)
    logprobs[keeps] = torch.log_softmax(logits[keeps[scored]], dim=-1).gather(1, kept[keeps][:, None])[:, 0]
    return logprobs


def advance(context: _Context, state: _State, k: int, round_drafts: Tensor, n_accepted: Tensor,
            next_token: Tensor, adapt: bool = True, logprobs: Tensor | None = None) -> None:
    """Append each row's kept drafts and next token, end rows at EOT or max_length, roll the
    cache extents back to what was kept, count, (logprobs: token_logprobs) record the kept tokens'
    log-probabilities, and (adapt: after a round that drafted) adapt the draft lengths."""
    tokens, length, eot = state.tokens, state.length, context.main.special.eot
    active = ~state.done
    steps = torch.arange(k + 1, device=tokens.device)
    tokens[torch.arange(len(tokens), device=tokens.device), length + n_accepted] = next_token
    new = n_accepted + 1
    is_eot = (tokens.gather(1, length[:, None] + steps) == eot) & (steps < new[:, None])
    ended = is_eot.any(dim=1)
    new = torch.where(ended, is_eot.long().argmax(dim=1) + 1, new)
    new = torch.where(active, torch.minimum(new, context.max_length - length), 0)

    # drafts past a row's end (EOT or max length) are not counted as drafted
    finishing = ended | (length + new >= context.max_length)
    drafted = torch.where(finishing, torch.minimum(round_drafts, new), round_drafts) * active
    accepted = torch.minimum(n_accepted, drafted)
    state.counts += torch.stack([drafted, accepted, new, active.long(), k * active.long()], dim=1)
    state.by_position[0, :, :k] += drafted[:, None] > steps[:k]
    state.by_position[1, :, :k] += accepted[:, None] > steps[:k]
    if logprobs is not None:  # positions past the row's new end get zeros, overwritten by later rounds
        # where, not a product: a rejected draft the rules forbid has log-probability -inf, and -inf * 0 is nan
        state.logprobs.scatter_(1, length[:, None] + steps, torch.where(steps < new[:, None], logprobs, 0.0))

    state.main_cached = torch.where(active, length + n_accepted, state.main_cached)
    state.assistant_cached = torch.minimum(state.assistant_cached, length + n_accepted)
    state.length = length + new
    state.hit_max |= active & ~ended & (state.length >= context.max_length)
    state.done |= ended | (state.length >= context.max_length)
    if adapt and context.options.adaptive_draft and context.assistant is not None:
        grown = torch.where(n_accepted >= round_drafts, state.draft_length + 2, (state.draft_length - 1).clamp(min=1))
        state.draft_length = torch.where(active & state.drafting, grown.clamp(max=context.max_draft),
                                         state.draft_length)


def compression_ratio(text: str) -> float:
    """Bytes of the text over bytes of it zlib-compressed: high for text that repeats itself."""
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0


def _results(state: _State, context: _Context, languages: list[str], stats: DecodingStats) -> list[WindowResult]:
    """Each row's tokens, counts and no-speech verdict; the batch's times are shared equally by its rows."""
    batch, eot, start, options = len(languages), context.main.special.eot, context.prompt_length, context.options
    results = []
    no_speech = state.no_speech.tolist() if state.no_speech is not None else [None] * batch
    positions = torch.arange(state.logprobs.shape[1], device=state.logprobs.device)
    logprob_sums = torch.where(positions < state.length[:, None], state.logprobs, 0.0).sum(dim=1)
    rows = zip(state.tokens[:, start:].tolist(), state.length.tolist(), state.counts.tolist(),
               state.by_position.transpose(0, 1).tolist(), state.hit_max.tolist(), languages, no_speech,
               logprob_sums.tolist())
    for (row_tokens, length, (drafted, accepted, generated, forwards, drafts), by_position, hit_max, language,
         no_speech_prob, logprob_sum) in rows:
        row_tokens = row_tokens[: length - start]
        if row_tokens and row_tokens[-1] == eot:
            row_tokens = row_tokens[:-1]
        silent, avg_logprob = False, None
        tokenizer = context.main.tokenizer  # None for a model without a vocabulary (machinery tests)
        ratio = compression_ratio(tokenizer.decode(row_tokens)) if tokenizer is not None else 0.0
        if state.sums_logprobs:
            avg_logprob = logprob_sum / (len(row_tokens) + 1)  # the end of text counts, as in openai-whisper
        if no_speech_prob is not None and no_speech_prob > options.no_speech_threshold:
            # a text that still loops (every temperature failed) does not save a silent window either
            silent = (avg_logprob is None or avg_logprob <= options.logprob_threshold
                      or (options.compression_ratio_threshold is not None and ratio > options.compression_ratio_threshold))
        row_stats = DecodingStats(
            windows=1, drafted=drafted, accepted=accepted, generated=generated, main_forwards=forwards,
            row_forwards=forwards, assistant_forwards=drafts,
            encoder_seconds=stats.encoder_seconds / batch, decoding_seconds=stats.decoding_seconds / batch,
            drafted_by_position=by_position[0], accepted_by_position=by_position[1],
        )
        results.append(WindowResult(row_tokens, language, hit_max, row_stats, silent, no_speech_prob, avg_logprob, ratio,
                                    context.temperature))
        stats.add(replace(row_stats, windows=0, main_forwards=0, assistant_forwards=0,
                          encoder_seconds=0.0, decoding_seconds=0.0))
    return results
