"""The fixed-shape speculative round: where the main decoder's kernels are not row-invariant (GPUs,
some CPUs; Platform.row_invariant), every main call has one shape in both modes and a round reads
nothing back to the host, so that CUDA graphs can capture its steps, or the whole round
(graphs.RoundGraph). Same state, acceptance rule and advance as speculative.py, same tokens."""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields

import torch
from torch import Tensor

from ..models.attention import DecoderCaches
from ..models.pair import Whisper
from .caches import BatchCaches
from .context import Context, State
from .graphs import RoundGraph, buffer_layout, capture_round, step_graphs
from .rules import LogitRules
from .sampling import choose_tokens
from .speculative import (
    accept_greedy,
    advance,
    head_input,
    head_taps,
    hidden_before,
    prefill,
    read_no_speech,
    token_window,
)
from .stats import DecodingStats, host_timed, timed_part

# the assistant's window at a round's first step: the main model's token and the last draft when the
# assistant accepted all and never saw it
ASSISTANT_WIDTH = 2


def fixed_shape_decode(context: Context, state: State, stats: DecodingStats) -> None:
    """The rounds where the main decoder's kernels are not row-invariant (Context.fixed_width): every
    main call has the same shape in both modes, so a position's logits cannot depend on the mode (the
    prompt is prefilled alone, each round's window is right-padded to the widest round either mode
    can have, past the row's end where the cache holds stale drafts anyway, and every row stays in
    the batch). Every main call, rule and token choice runs on the whole [batch, width] window in
    both modes, so no op's shape depends on the mode.

    And no host read inside a round: every tensor a round makes has a shape the host knows
    beforehand, so a GPU's queue never drains mid-round, and the host reads whether every row is
    done once per context.rounds_per_read rounds (rounds after a row's end leave it unchanged); with
    adaptive drafts it reads the next round's k with it, each round. With CUDA graphs, from the
    second round on a whole round is one graph (RoundGraph), replayed round after round, and kept for
    the next batch of the same configuration (whole_rounds)."""
    prefill(context, state, stats, features=functools.partial(prefill_features, context, head_taps(context, state)))
    adaptive = context.drafts and context.options.adaptive_draft
    k = int(state.draft_length.max()) if context.drafts else 0
    per_read = 1 if adaptive else context.rounds_per_read
    # the first round runs on its own: the assistant reads the prompt, the no-speech rule may read its logits
    timing = host_timed(stats, state.tokens.device)
    fixed_round(context, state, k, first=True, timing=timing)
    stats.main_forwards, stats.assistant_forwards = stats.main_forwards + 1, stats.assistant_forwards + k
    whole = context.graphs and not adaptive  # adaptive rounds change k, a graph's shape
    rounds = None
    decoding = state  # the state the rounds run on: a kept graph's once it replays them
    while True:
        if adaptive:
            all_done, k = torch.stack([decoding.done.all().long(),
                                       torch.where(decoding.done, 0, decoding.draft_length).max()]).tolist()
        else:
            all_done = bool(decoding.done.all())
        if all_done:
            break
        for _ in range(per_read):
            if rounds is not None:
                rounds.graph.replay()
            elif whole:  # this round, then a graph of the rounds after
                rounds = whole_rounds(context, state, k)
                whole, decoding = rounds is not None, rounds.state if rounds is not None else state
            else:
                fixed_round(context, state, k, first=False, timing=timing)
            stats.main_forwards, stats.assistant_forwards = stats.main_forwards + 1, stats.assistant_forwards + k
    _copy_state(state, decoding)


@dataclass
class WholeRounds:
    """Rounds of one configuration as one CUDA graph, with the context and state it was captured on
    and reads and writes: a later batch of that configuration copies its values into them."""

    context: Context
    state: State
    graph: RoundGraph


def whole_rounds(context: Context, state: State, k: int) -> WholeRounds | None:
    """This round, and the graph that replays the rounds after it: a kept one where this batch's
    configuration has one (the batch's values copied into its context and state, then a replay),
    else one captured on this batch (this round is its warm-up). None where the capture fails. Kept
    by the main decoder (kept.DecoderKept.whole_rounds), by round_key: a job's batches of one
    configuration share a graph, each holding its batch's buffers."""
    key, store = round_key(context, state, k), context.main.decoder.kept.whole_rounds
    rounds = store.recall(key)
    if rounds is None:
        graph = capture_round(functools.partial(fixed_round, context, state, k, first=False, direct=True))
        return None if graph is None else store.keep(key, WholeRounds(context, state, graph))
    for kept, new in ((rounds.context, context), (rounds.state, state)):
        for field in fields(new):
            if isinstance(getattr(new, field.name), Tensor):
                getattr(kept, field.name).copy_(getattr(new, field.name))
    rounds.graph.replay()
    return rounds


def round_key(context: Context, state: State, k: int) -> tuple:
    """What a captured round bakes in beside its tensors' values: every other value of the context
    and state (models by identity, logit rules by their key), their tensors' shapes, and where the
    decoders' caches lie (caches.BatchCaches keeps them in place per batch shape)."""
    def baked(value):
        if isinstance(value, Tensor):
            return value.shape, value.dtype, value.device
        if isinstance(value, LogitRules):
            return value.key
        if isinstance(value, BatchCaches):
            return tuple(buffer_layout(c) for c in (value.main, value.assistant) if c is not None)
        if isinstance(value, (Whisper, torch.nn.Module)):
            return id(value)
        return value
    return (k, *(baked(getattr(context, f.name)) for f in fields(context)),
            *(baked(getattr(state, f.name)) for f in fields(state)))


def _copy_state(state: State, decoded: State) -> None:
    """The decoded state's tensors into state, as copies (a kept graph's state is the next batch's)."""
    if decoded is not state:
        for field in fields(state):
            if isinstance(getattr(decoded, field.name), Tensor):
                setattr(state, field.name, getattr(decoded, field.name).clone())


def fixed_round(context: Context, state: State, k: int, first: bool, direct: bool = False,
                timing: DecodingStats | None = None) -> None:
    """One fixed-shape round on the state, in place. direct: its steps run as they are, not
    replayed from graphs of their own (inside a graph of the whole round); timing: the stats its
    drafts' and verification's host seconds are added to (stats.host_timed)."""
    round_drafts = (timed_part(timing, "draft", fixed_draft, context, state, k, first, direct) if k
                    else state.draft_length.clamp(max=0))
    chosen, window_logprobs = timed_part(timing, "verify", fixed_verify, context, state, direct)
    round_step(context, settle)(context, state, k, round_drafts, chosen, window_logprobs)


def settle(context: Context, state: State, k: int, round_drafts: Tensor, chosen: Tensor, window_logprobs: Tensor
           ) -> None:
    """The round's end on the state, in place: the drafts the main model's choices (fixed_verify)
    accept, its next token, and advance."""
    scored = fixed_scored(state, k, round_drafts, chosen.shape[1])
    n_accepted, next_token = fixed_accept(context, state, k, round_drafts, chosen, scored)
    logprobs = fixed_logprobs(k, window_logprobs, scored, n_accepted) if state.sums_logprobs else None
    advance(context, state, k, round_drafts, n_accepted, next_token, adapt=context.drafts, logprobs=logprobs)


class CompileError(RuntimeError):
    """torch.compile could not compile a round's step (compiled_step)."""


# a compiled step has a graph per batch size, window width and baked value (rules, greedy or sampling,
# k): a long mixed job's few dozen, where torch's default limit of 8 would send the rest back to eager
RECOMPILE_LIMIT = 256


def round_step(context: Context, function):
    """function as a round runs it: through torch.compile where the context compiles rounds
    (DecodingOptions.compile on a GPU), where its small ops fuse into few kernels. Exact as eager
    is: every main call has one shape in both modes, so both run one compiled verification."""
    return compiled_step(function) if context.compiles_rounds else function


@functools.cache
def compiled_step(function):
    """function through torch.compile, static shapes, compiled at a new shape's first call (a
    capture's warm-up comes first). A step it cannot compile, or a job past RECOMPILE_LIMIT graphs
    of it, raises: a step running eagerly in one mode and compiled in the other could change the
    transcript."""
    import torch._dynamo  # at first use: importing the compiler costs seconds

    compiled = torch.compile(function, dynamic=False)

    @functools.wraps(function)
    def run(*args, **kwargs):
        with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT, accumulated_recompile_limit=RECOMPILE_LIMIT,
                                        fail_on_recompile_limit_hit=True):
            try:
                return compiled(*args, **kwargs)
            except (torch._dynamo.exc.TorchDynamoException, torch._dynamo.exc.FailOnRecompileLimitHit) as error:
                reason = str(error).strip().splitlines()[0] if str(error).strip() else ""
                raise CompileError(f"compile: torch.compile failed on {function.__name__} ({type(error).__name__}: "
                                   f"{reason}); decode without compiling") from error
    return run


def _replay(context: Context, decoder, caches: DecoderCaches, name: tuple, step, *inputs: Tensor,
            direct: bool = False):
    """step(*inputs), replayed from a CUDA graph where enabled (and not direct): name holds every
    value step bakes in besides the decoder, its caches and its inputs, so a graph is replayed only
    where its step would compute the same."""
    if context.graphs and not direct:
        return step_graphs(decoder)(caches, name, step, *inputs)
    return step(*inputs)


def prefill_features(context: Context, taps: tuple[int, ...] | None, window: Tensor, positions: Tensor) -> Tensor:
    """The main decoder's features over the prompt (speculative.prefill), one replay where CUDA
    graphs are on: its launches would cost the host more than the device. Not compiled: it runs
    once a window."""
    decoder, caches = context.main.decoder, context.caches.main
    step = functools.partial(decoder.features, caches=caches, taps=taps)
    return _replay(context, decoder, caches, ("prefill", taps), step, window, positions)


def fixed_draft(context: Context, state: State, k: int, first: bool, direct: bool = False) -> Tensor:
    """k drafts per row from the assistant, as draft() writes them, in windows whose widths the host
    knows: the prompt in the first round; then 2 at a round's first step (the main model's token,
    and the last accepted draft where the assistant never saw it) and 1 after. A narrower row's
    window reaches back over cached positions. No row stops early (that would need a host read): a
    row unsure of a draft verifies only the drafts before it (round_drafts). Each step, rules and
    choice included, is one replay. Returns each row's drafts this round."""
    assistant, options, tokens = context.assistant, context.options, state.tokens
    rows = torch.arange(len(tokens), device=tokens.device)
    round_drafts = state.draft_length.clamp(max=k)
    caches = context.caches.assistant
    baked = (context.draft_logits, assistant.decoder, caches, context.draft_rules, context.temperature, context.n_ctx)
    # the prompt's step runs once a window: compiling it would cost a compile a batch size and save little
    prompt_step, step = (functools.partial(f, *baked) for f in (draft_step, round_step(context, draft_step)))
    name = ("draft", context.draft_rules.key, context.temperature, context.n_ctx)
    for j in range(k):
        current = state.length + j
        width = (context.prompt_length if first else ASSISTANT_WIDTH) if j == 0 else 1
        over_prompt = first and j == 0
        window, positions = token_window(tokens, (current - width).clamp(min=0), width)
        inputs = (window, positions, tokens, current, context.seeds, context.end_floors, context.begins)
        if state.hidden is not None:
            inputs += (hidden_before(state.hidden, positions),)
        token, confidence, *predicted = _replay(context, assistant.decoder, caches,
                                                name + (context.compiles_rounds and not over_prompt,),
                                                prompt_step if over_prompt else step, *inputs, direct=direct)
        if predicted:
            state.hidden[rows, current - 1] = predicted[0].to(state.hidden.dtype)
        state.assistant_cached.copy_(current)
        tokens[rows, current] = token
        if options.draft_confidence > 0:
            round_drafts = torch.where(confidence < options.draft_confidence, round_drafts.clamp(max=j + 1), round_drafts)
    return round_drafts


def draft_step(draft_logits, decoder, caches: DecoderCaches, rules: LogitRules, temperature: float, span: int,
               window: Tensor, positions: Tensor, tokens: Tensor, current: Tensor, seeds: Tensor, end_floors: Tensor,
               begins: Tensor, before: Tensor | None = None) -> tuple[Tensor, ...]:
    """One draft per row after the window's last position: the token (an id of the whole
    vocabulary) and the assistant's probability of it; a draft head's (given before, see
    draft_logits) also its hidden state at the last position."""
    out = draft_logits(decoder, caches, span, window, positions, before)
    logits, predicted = out if before is not None else (out, None)
    logits = rules(logits, tokens, current, end_floors, begins)
    choice = choose_tokens(logits, temperature, seeds, current)
    confidence = torch.softmax(logits / (temperature or 1.0), dim=-1).gather(1, choice[:, None])[:, 0]
    token = choice if decoder.draft_vocab is None else decoder.draft_vocab[choice]
    return (token, confidence) if predicted is None else (token, confidence, predicted)


def fixed_verify(context: Context, state: State, direct: bool = False) -> tuple[Tensor, Tensor]:
    """The main model's choice at each column of each row's window of context.fixed_width positions
    from its last accepted token, and its log-probability: [batch, width] each, column i for the
    token at length + i. Every active row's keys and values are cached up to its last accepted
    token (prefill, then advance), so that token starts the window. One replay."""
    tokens, decoder, caches, width = state.tokens, context.main.decoder, context.caches.main, context.fixed_width
    window, positions = token_window(tokens, (state.length - 1).clamp(min=0), width)
    taps = head_taps(context, state)
    verify = round_step(context, verify_step)
    if context.judges_silence and state.no_speech is None:  # SOT ends the prompt: no prefill read after it
        chosen, logprobs, hidden = verify(decoder, caches, context.rules, context.temperature, window, positions, tokens,
                                          context.seeds, context.end_floors, context.begins, taps=taps or ())
        read_no_speech(context, state, decoder.logits(decoder.final_hidden(hidden[:, 0])))
    else:
        step = functools.partial(verify, decoder, caches, context.rules, context.temperature, taps=taps)
        name = ("verify", context.rules.key, context.temperature, taps, context.compiles_rounds)
        chosen, logprobs, *hidden = _replay(context, decoder, caches, name, step, window, positions, tokens, context.seeds,
                                            context.end_floors, context.begins, direct=direct)
        hidden = hidden[0] if hidden else None
    if state.hidden is not None:
        state.hidden.scatter_(1, positions[..., None].expand(-1, -1, state.hidden.shape[-1]),
                              head_input(context, state, hidden))
    return chosen, logprobs


def verify_step(decoder, caches: DecoderCaches, rules: LogitRules, temperature: float, window: Tensor, positions: Tensor, tokens: Tensor,
                seeds: Tensor, end_floors: Tensor, begins: Tensor, taps: tuple[int, ...] | None = None) -> tuple[Tensor, ...]:
    """The main decoder on the windows, its logits processed at every position, and at each the
    token it chooses (argmax, or its draw at the position's uniform number) with that token's
    log-probability, [batch, width] each; taps (not None): also its features [batch, width, ...]
    (Decoder.through_blocks: the final hidden states, after the outputs of the blocks tapped)."""
    batch, width = window.shape
    hidden = decoder.features(window, positions, caches, taps=taps)
    raw = decoder.logits(decoder.final_hidden(hidden))
    # each position's logits are for the token after it
    targets = (positions + 1).view(-1)
    # expanded rather than repeat_interleave'd, which may read its output size back from the device
    row_tokens = tokens[:, None].expand(-1, width, -1).reshape(batch * width, -1)
    column_seeds, column_floors, column_begins = (x[:, None].expand(-1, width).reshape(-1) for x in (seeds, end_floors, begins))
    logits = rules(raw.flatten(0, 1), row_tokens, targets, column_floors, column_begins)
    chosen = choose_tokens(logits, temperature, column_seeds, targets)
    logprobs = torch.log_softmax(logits, dim=-1).gather(1, chosen[:, None])[:, 0]
    out = (chosen.view(batch, width), logprobs.view(batch, width))
    return out + ((hidden,) if taps is not None else ())


def fixed_scored(state: State, k: int, round_drafts: Tensor, width: int) -> Tensor:
    """[batch, width]: the window's columns where the round can end, each active row's drafts and
    the position after them."""
    steps = torch.arange(width, device=round_drafts.device)
    return (steps <= round_drafts[:, None]) & (steps <= k) & ~state.done[:, None]


def fixed_accept(context: Context, state: State, k: int, round_drafts: Tensor, chosen: Tensor, scored: Tensor
                 ) -> tuple[Tensor, Tensor]:
    """accept() on the main model's choices at the window's columns (fixed_verify): the drafts it
    agrees with, and its next token."""
    steps = torch.arange(k + 1, device=chosen.device)
    drafts = state.tokens.gather(1, state.length[:, None] + steps[:k])
    target = torch.where(scored, chosen, context.main.special.eot)[:, : k + 1]
    return accept_greedy(target, drafts, steps[:k] < round_drafts[:, None])


def fixed_logprobs(k: int, logprobs: Tensor, scored: Tensor, n_accepted: Tensor) -> Tensor:
    """token_logprobs() from the window's log-probabilities of the main model's choices: [batch,
    k + 1], those of the tokens the round keeps (the accepted drafts, which equal its choices, then
    its next token)."""
    steps = torch.arange(scored.shape[1], device=logprobs.device)
    return torch.where(scored & (steps <= n_accepted[:, None]), logprobs, 0.0)[:, : k + 1]
