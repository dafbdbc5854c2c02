"""Batched speculative decoding of 30 s windows, exact with respect to the main model.

A batch is encoded once; each temperature a window needs (DecodingOptions.temperature) decodes the
windows that still need it: their fixed context and per-row state set up here, the rounds run by
speculative.py, each row's tokens and verdicts read out as a WindowResult. With an assistant or
without, a window's tokens are the main model's own: greedy, its argmax token for token; sampling,
its draws at uniform numbers fixed by the window's seed and the position (sampling.py).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from ..models.attention import CrossStates
from ..models.pair import Whisper, WhisperPair
from ..models.platform import Platform, synchronize
from ..models.tokenizer import TIME_PRECISION
from ..options import DecodingOptions
from .caches import BatchCaches
from .context import Context, State, initial_state
from .drafts import compiled_draft_logits, draft_logits
from .encoding import Encoded, detect_language, encode, sot_logits
from .fixed_shapes import fixed_shape_decode
from .results import WindowResult, best_attempt, compression_ratio, needs_fallback
from .rules import LogitRules
from .sampling import row_seeds
from .speculative import read_no_speech, speculative_decode
from .stats import DecodingStats


def auto_drafts(platform: Platform, assistant_cross: CrossStates, batch: int) -> bool:
    """speculation="auto": whether the rounds of a batch of this many rows, whose frames the
    assistant's cross-attention states hold, draft (Platform.auto_max_draft_frames)."""
    limit = platform.auto_max_draft_frames
    return limit is None or batch * assistant_cross[0][0].shape[-2] <= limit


@dataclass(frozen=True)
class RowRequest:
    """What one row of a batch asks besides its audio (decode_encoded's per-row arguments)."""

    language: str | None  # None: detected
    seed: int = 0  # the window's own, mixed with DecodingOptions.seed
    end_floor: float = 0.0  # seconds into the window its text's timestamps reach before it may end
    previous: tuple[int, ...] = ()  # its prompt's tokens after <|startofprev|> (previous_tokens)
    prefix: tuple[int, ...] = ()  # tokens its result begins with, as if the main model had chosen them
    hint: tuple[int, ...] | None = None  # a hypothesis of the same audio it drafts from (speculative.hint_proposals)


def encode_batch(pair: WhisperPair, mel: Tensor, options: DecodingOptions, assistant_mel: Tensor | None = None,
                 known_states: list[Tensor | None] | None = None,
                 hints: Sequence[Sequence[int] | None] | None = None) -> tuple[Encoded, DecodingStats]:
    """The batch encoded for decoding with these options and hints (the assistant's states only where it
    takes part; known_states: encoding.encoder_states), and the batch's stats so far (the encoder's time)."""
    stats = DecodingStats(windows=mel.shape[0])
    with_assistant = _assistant(pair, options, _hinted(pair, options, hints or ())) is not None
    return encode(pair, mel, assistant_mel, stats, with_assistant=with_assistant, known_states=known_states), stats


@torch.inference_mode()
def decode_windows(
    pair: WhisperPair,
    mel: Tensor,
    options: DecodingOptions = DecodingOptions(),
    *,
    assistant_mel: Tensor | None = None,
    languages: list[str | None] | None = None,
    seeds: list[int] | None = None,
    hints: list[Sequence[int] | None] | None = None,
    prompts: list[str | tuple[int, ...] | None] | None = None,
    prefixes: list[Sequence[int]] | None = None,
) -> tuple[list[WindowResult], DecodingStats]:
    """Decode a batch of 30 s windows.

    mel: [batch, n_mels, 3000] features for the main model; assistant_mel: the assistant's own
    features where it has its own encoder with other mel settings. languages: per row, overriding
    options.language (None: detect). seeds: per row, the window's own seed for sampling, mixed with
    options.seed (the pipeline's: a hash of the window's samples, so a window samples alike in any
    batch; default 0). hints, prompts and prefixes: per row (decode_encoded). options.speculation="off"
    decodes with the main model alone.
    """
    encoded, stats = encode_batch(pair, mel, options, assistant_mel, hints=hints)
    return decode_encoded(pair, encoded, options, languages=languages, seeds=seeds, stats=stats, hints=hints,
                          prompts=prompts, prefixes=prefixes)


@torch.inference_mode()
def decode_encoded(
    pair: WhisperPair,
    encoded: Encoded,
    options: DecodingOptions = DecodingOptions(),
    *,
    languages: list[str | None] | None = None,
    seeds: list[int] | None = None,
    stats: DecodingStats | None = None,
    end_floors: list[float] | None = None,
    hints: list[Sequence[int] | None] | None = None,
    prompts: list[str | tuple[int, ...] | None] | None = None,
    prefixes: list[Sequence[int]] | None = None,
) -> tuple[list[WindowResult], DecodingStats]:
    """decode_windows of a batch already encoded (encode_batch). end_floors: per row, seconds into
    the window its text's timestamps reach before it may end (with timestamps; default 0.0: anywhere).
    hints: per row, a hypothesis of the same audio (a previous decoding's WindowResult.tokens, as a
    live stream re-decoding its buffer has) that the row drafts from for free where its text meets it
    (speculative.hint_proposals); verified, so the tokens are the main model's whatever the hint. Not
    with speculation off (the main model alone), nor in fixed shapes (GPUs), which ignore them.
    prompts: per row, its own options.prompt (a live stream's text so far); rows of several prompt
    lengths share the batch where the kernels are row-invariant, and decode in groups of one length
    where not (fixed shapes). prefixes: per row, tokens (text and timestamps) its result begins with, as
    if the main model had chosen them (a live stream's confirmed text in its buffer); the rules read
    them as its own, and the result's tokens include them.

    Every window is decoded at the first temperature; a window whose text fails (needs_fallback)
    is decoded again at the next one, alone with the others that failed, until one passes or the
    temperatures run out (best_attempt). The verdicts are the main model's (its tokens and
    probabilities), so both modes decode the same windows again and keep the same texts."""
    batch = encoded.batch
    stats = stats or DecodingStats(windows=batch)
    requests = _row_requests(pair, options, batch, languages=languages, seeds=seeds, end_floors=end_floors,
                             hints=hints, prompts=prompts, prefixes=prefixes)
    first_temperature, *fallbacks = options.temperature
    attempts = [[r] for r in _by_prompt_length(pair, encoded, options, first_temperature, list(range(batch)), requests,
                                               stats)]
    retry = [i for i, tried in enumerate(attempts) if needs_fallback(tried[-1], options)]
    for temperature in fallbacks:
        if not retry:
            break
        # graphs off: a capture for each such batch would cost more than its steps save; each row in
        # the language its first pass decided
        pass_stats = DecodingStats(fallbacks=len(retry))
        requests = [replace(request, language=tried[0].language) for request, tried in zip(requests, attempts)]
        results = _by_prompt_length(pair, encoded, replace(options, cuda_graphs=False), temperature, retry, requests,
                                    pass_stats)
        stats.add(pass_stats)
        for i, result in zip(retry, results):
            attempts[i].append(result)
        retry = [i for i in retry if needs_fallback(attempts[i][-1], options)]
    return [best_attempt(tried, options) for tried in attempts], stats


def _row_requests(pair: WhisperPair, options: DecodingOptions, batch: int, **per_row) -> list[RowRequest]:
    """decode_encoded's per-row arguments (each a list of batch values, or None: the options' or the
    default) as one record a row, checked."""
    if any(values is not None and len(values) != batch for values in per_row.values()):
        given = ", ".join(f"{len(v)} {name.replace('_', ' ')}" for name, v in per_row.items() if v is not None)
        raise ValueError(f"{given} for {batch} windows")
    if any(t < 0 or t >= pair.main.dims.n_vocab or t == pair.main.special.eot for p in per_row["prefixes"] or ()
           for t in p):
        raise ValueError(f"a prefix's token ids are text and timestamp tokens, below {pair.main.dims.n_vocab}, not EOT")
    value = lambda name, i, default: per_row[name][i] if per_row[name] is not None else default  # noqa: E731
    return [RowRequest(language=value("languages", i, options.language), seed=value("seeds", i, 0),
                       end_floor=value("end_floors", i, 0.0),
                       previous=previous_tokens(pair.main, value("prompts", i, options.prompt)),
                       prefix=tuple(value("prefixes", i, ())),
                       hint=None if value("hints", i, None) is None else tuple(value("hints", i, None)))
            for i in range(batch)]


def _assistant(pair: WhisperPair, options: DecodingOptions, hinted: bool = False) -> Whisper | None:
    """The assistant that takes part in decoding: none where speculation is off, for a task it was
    not trained to draft for (Whisper.draft_tasks), or (speculation "auto") beside hints: past a live
    stream's hint the tail is short, and the assistant's steps there cost more time than the main-model
    passes they save (decisions, "Live transcription")."""
    assistant = pair.assistant
    if options.speculation == "off" or assistant is None or not assistant.drafts_for(options.task):
        return None
    return None if hinted and options.speculation == "auto" else assistant


def _hinted(pair: WhisperPair, options: DecodingOptions, hints: Sequence[Sequence[int] | None]) -> bool:
    """Whether a batch with these hints drafts from them (fixed shapes draft from the assistant only)."""
    return options.speculation != "off" and pair.platform.row_invariant and any(h is not None for h in hints)


def _by_prompt_length(pair: WhisperPair, encoded: Encoded, options: DecodingOptions, temperature: float,
                      rows: list[int], requests: list[RowRequest], stats: DecodingStats) -> list[WindowResult]:
    """_decode_pass of these rows of the batch (requests: the whole batch's), together where the
    kernels are row-invariant, else in groups of one length of prompt and prefix: fixed shapes read
    them in a window as wide as they are (fixed_shapes.fixed_draft)."""
    groups: dict[tuple, list[int]] = {}
    for row in rows:  # one length, and SOT at one place in it (where the no-speech probability is read)
        request = requests[row]
        groups.setdefault(() if pair.platform.row_invariant else (len(request.previous), len(request.prefix)), []
                          ).append(row)
    found = {}
    for group in groups.values():
        index = None if group == list(range(encoded.batch)) else torch.tensor(group, device=pair.device)
        results = _decode_pass(pair, encoded, options, temperature, [requests[i] for i in group], stats, rows=index)
        found.update(zip(group, results))
    return [found[row] for row in rows]


def _decode_pass(pair: WhisperPair, encoded: Encoded, options: DecodingOptions, temperature: float,
                 requests: list[RowRequest], stats: DecodingStats, rows: Tensor | None = None) -> list[WindowResult]:
    """One decoding at this temperature (0: greedy) of every row of the batch, or of these rows."""
    main, device, batch = pair.main, pair.device, len(requests)
    hinted = _hinted(pair, options, [r.hint for r in requests])
    assistant = _assistant(pair, options, hinted)
    languages = [main.special.language_code(r.language) for r in requests]
    max_length = min(options.max_length or main.dims.n_text_ctx, main.dims.n_text_ctx)
    # one cache length for main-only and speculative decoding: attention spans the whole cache, so
    # equal lengths keep a position's logits independent of the mode (see Decoder.features)
    n_ctx = max_length + options.max_draft_tokens + 1
    decoders = [(main.decoder, encoded.main)] + ([(assistant.decoder, encoded.assistant)] if assistant else [])
    graphs = options.cuda_graphs and pair.platform.cuda_graphs
    caches = BatchCaches(decoders, n_ctx, pair.platform.row_invariant, stable=graphs, rows=rows)

    synchronize(device)
    start_time = time.perf_counter()
    after_sot, language_probabilities = None, [None] * batch  # of the rows whose language is detected
    if main.special.multilingual and any(language is None for language in languages):
        after_sot = sot_logits(main, caches.main)
        stats.main_forwards += 1
        found, probabilities = detect_language(main, after_sot, options.language_candidates)
        language_probabilities = [p if language is None else None for language, p in zip(languages, probabilities)]
        languages = [language or code for language, code in zip(languages, found)]
    if not main.special.multilingual:
        languages = ["en"] * batch
    context = _context(pair, assistant, options, temperature, requests, languages, caches,
                       Limits(n_ctx, max_length), graphs, hinted)
    state = initial_state(context, languages)
    if after_sot is not None and context.judges_silence and not any(r.previous for r in requests):  # else at SOT after the prompt
        read_no_speech(context, state, after_sot)
    (speculative_decode if context.fixed_width is None else fixed_shape_decode)(context, state, stats)
    synchronize(device)
    stats.decoding_seconds += time.perf_counter() - start_time
    return _results(state, context, languages, language_probabilities, stats)


def previous_tokens(model: Whisper, prompt: str | tuple[int, ...] | None) -> tuple[int, ...]:
    """What every window's decoder prompt holds after <|startofprev|> (DecodingOptions.prompt): the
    prompt's tokens, the last n_text_ctx // 2 - 1 of them, as openai-whisper keeps them."""
    if prompt is None:
        return ()
    special = model.special
    if special.previous is None:
        raise ValueError(f"{model.name}: its vocabulary has no <|startofprev|> token, so it takes no prompt")
    if isinstance(prompt, str):
        if model.tokenizer is None:
            raise ValueError(f"{model.name}: a model without a vocabulary takes a prompt as token ids, not text")
        prompt = model.tokenizer.encode(" " + prompt)
    elif not all(0 <= token < special.eot for token in prompt):
        raise ValueError(f"a prompt's token ids are text tokens, from 0 to {special.eot - 1}")
    return tuple(prompt[-(model.dims.n_text_ctx // 2 - 1):])


@dataclass(frozen=True)
class Limits:
    n_ctx: int  # decoder cache positions, alike in both modes
    max_length: int  # a row's tokens, prompt included


def _context(pair: WhisperPair, assistant: Whisper | None, options: DecodingOptions, temperature: float,
             requests: list[RowRequest], languages: list[str], caches: BatchCaches, limits: Limits, graphs: bool,
             hinted: bool) -> Context:
    """A pass's fixed context, from its named parts: the rows' prompts, the logit rules, the rows'
    tensors, the drafting settings and the platform's choices."""
    main, platform, device = pair.main, pair.platform, pair.device
    special = main.special
    lengths = [len(special.prompt(language, options.task, options.timestamps, r.previous))
               for language, r in zip(languages, requests)]
    prompt_length = max(length + len(r.prefix) for length, r in zip(lengths, requests))
    if prompt_length >= limits.max_length:
        raise ValueError(f"a decoder prompt of {prompt_length} tokens leaves no room under max_length {limits.max_length}")
    rules = LogitRules.kept(main.decoder.kept.rules, special, main.dims.n_vocab, options.timestamps, device)
    # an assistant with a draft vocabulary gets its rules and argmax on those columns only
    draft_vocab = assistant.decoder.draft_vocab if assistant is not None else None
    draft_rules = rules if draft_vocab is None else LogitRules.kept(
        main.decoder.kept.rules, special, main.dims.n_vocab, options.timestamps, device, vocab=draft_vocab)
    floor_tokens = [special.timestamp_begin + round(max(r.end_floor, 0.0) / TIME_PRECISION) for r in requests]
    max_draft = 0 if assistant is None else (options.max_draft_tokens if options.adaptive_draft else options.draft_tokens)
    if hinted:  # a hint drafts as far as the cache leaves room for (n_ctx)
        max_draft = max(max_draft, options.max_draft_tokens)
    fixed_width = None  # the widest round either mode can have, whether or not there is an assistant
    if not platform.row_invariant:
        fixed_width = (options.max_draft_tokens if options.adaptive_draft else options.draft_tokens) + 1
    return Context(
        main=main, assistant=assistant, options=options, rules=rules, draft_rules=draft_rules, temperature=temperature,
        seeds=row_seeds(options.seed, [r.seed for r in requests], device),
        end_floors=torch.tensor(floor_tokens, device=device).clamp(max=main.dims.n_vocab - 1),
        begins=torch.tensor(lengths, device=device), prompt_length=prompt_length,
        n_ctx=limits.n_ctx, max_length=limits.max_length, max_draft=max_draft,
        drafts=assistant is not None and (options.speculation == "on" or (
            options.speculation == "auto" and auto_drafts(platform, caches.assistant.cross, len(requests)))),
        fixed_width=fixed_width, graphs=graphs,
        draft_logits=compiled_draft_logits if options.compile and platform.compiles == "drafts" else draft_logits,
        caches=caches,
        judges_silence=options.no_speech_threshold is not None and special.no_speech is not None,
        judges_text=options.logprob_threshold is not None and len(options.temperature) > 1,
        rounds_per_read=platform.rounds_per_read, compiles_rounds=options.compile and platform.compiles == "rounds",
        previous=tuple(r.previous for r in requests), prefixes=tuple(r.prefix for r in requests),
        hints=tuple(r.hint for r in requests) if hinted else None)


def _results(state: State, context: Context, languages: list[str], language_probabilities: list[float | None],
             stats: DecodingStats) -> list[WindowResult]:
    """Each row's tokens, counts and no-speech verdict; the batch's times are shared equally by its rows."""
    batch, eot, options = len(languages), context.main.special.eot, context.options
    results = []
    no_speech = state.no_speech.tolist() if state.no_speech is not None else [None] * batch
    positions = torch.arange(state.logprobs.shape[1], device=state.logprobs.device)
    logprob_sums = torch.where(positions < state.length[:, None], state.logprobs, 0.0).sum(dim=1)
    rows = zip(state.tokens.tolist(), context.begins.tolist(), state.length.tolist(), state.counts.tolist(),
               state.by_position.transpose(0, 1).tolist(), state.hit_max.tolist(), languages, language_probabilities,
               no_speech, logprob_sums.tolist())
    for (row_tokens, start, length, (drafted, accepted, generated, forwards, drafts), by_position, hit_max, language,
         language_probability, no_speech_prob, logprob_sum) in rows:
        row_tokens = row_tokens[start:length]
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
            draft_seconds=stats.draft_seconds / batch, verify_seconds=stats.verify_seconds / batch,
            drafted_by_position=by_position[0], accepted_by_position=by_position[1],
        )
        results.append(WindowResult(row_tokens, language, hit_max, row_stats, silent, no_speech_prob, avg_logprob, ratio,
                                    context.temperature, language_probability))
        stats.add(replace(row_stats, windows=0, main_forwards=0, assistant_forwards=0,
                          encoder_seconds=0.0, decoding_seconds=0.0, draft_seconds=0.0, verify_seconds=0.0))
    return results
