"""One speculative round, as small functions over a batch's fixed context and per-row state.

Per round: the assistant drafts up to k tokens per row (draft), the main decoder scores the row's
last accepted token plus all drafts in one pass (verify), and each row keeps its own longest
accepted prefix plus the main model's next token (accept, advance). Rows never wait for each
other: every row has its own length, its own positions and (through the position-masked static
cache) its own rollback. Greedy: a draft is accepted when it equals the main model's argmax, so the
output is the main model's own greedy output token for token. Sampling: the token at each position
is the main model's draw at a uniform number fixed by the window's seed and the position
(sampling.py), and a draft is accepted when it equals it. Without an assistant (k = 0) a round is
one main-model step, so both modes share every rule.

Two implementations of the round, by Platform.row_invariant: with row-invariant kernels (CPU), each
main call scores just the positions in use and finished rows leave the batch (speculative_decode);
without (GPUs, some CPUs), every call has one shape in both modes and the round reads nothing back
to the host (fixed_shapes.py). Both share the state, the acceptance rule and advance.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from .context import Context, State
from .sampling import choose_tokens
from .stats import DecodingStats, host_timed, timed_part


def token_window(tokens: Tensor, start: Tensor, width: int) -> tuple[Tensor, Tensor]:
    """Each row's tokens at positions start .. start + width - 1, and those positions."""
    positions = start[:, None] + torch.arange(width, device=tokens.device)
    return tokens.gather(1, positions), positions


def hidden_before(hidden: Tensor, positions: Tensor) -> Tensor:
    """A draft head's input beside each position's token: the hidden state at the position before
    it, zeros at position 0. hidden: [batch, n_ctx + 1, d_model]; positions: [batch, T]."""
    before = hidden.gather(1, (positions - 1).clamp(min=0)[..., None].expand(-1, -1, hidden.shape[-1]))
    return torch.where((positions > 0)[..., None], before, 0.0)


def accept_greedy(target: Tensor, drafts: Tensor, eligible: Tensor) -> tuple[Tensor, Tensor]:
    """Per row: how many drafts equal the main model's argmax in a row, and the main model's
    token after them. target: [batch, k + 1] the main model's argmax (of processed logits);
    drafts, eligible: [batch, k]."""
    agree = (drafts == target[:, : drafts.shape[1]]) & eligible
    n_accepted = agree.long().cumprod(dim=1).sum(dim=1)
    return n_accepted, target.gather(1, n_accepted[:, None])[:, 0]


def speculative_decode(context: Context, state: State, stats: DecodingStats) -> None:
    """Rounds of draft, verify, accept and advance until every row has ended, with row-invariant
    kernels (fixed_shapes.fixed_shape_decode where not). Without an assistant (k = 0) a round is one
    main-model step, so both modes share every rule."""
    # a draft head's first step reads the prompt's hidden states; prompts of several lengths are read
    # before the rounds, so that each row's first round starts at its own prompt's last token
    if state.hidden is not None or bool((state.length != context.prompt_length).any()):
        prefill(context, state, stats)
    timing = host_timed(stats, state.tokens.device)
    while not bool(state.done.all()):
        active = ~state.done
        context.caches.keep(active)
        k = int(state.draft_length[active].max()) if context.drafts else 0
        proposals = hint_proposals(context, state) if context.hints is not None else {}
        if proposals and len(proposals) == int(active.sum()) and all(ended for _, ended in proposals.values()):
            k = 0  # every row drafts its hint to the end: no assistant step this round
        hinted = hinted_tokens(state, proposals)
        assistant_drafts, k = timed_part(timing, "draft", draft, context, state, k, stats, hinted)
        assistant_steps = k
        round_drafts, k = hinted_drafts(context, state, proposals, hinted, assistant_drafts) if proposals else (
            assistant_drafts, k)
        logits, scored, features = timed_part(timing, "verify", verify, context, state, k, round_drafts, stats)
        if context.judges_silence and state.no_speech is None:
            read_no_speech(context, state, first_after_sot(context, state, features, k))
        n_accepted, next_token = accept(context, state, k, round_drafts, logits, scored)
        logprobs = token_logprobs(state, k, logits, scored, n_accepted, next_token) if state.sums_logprobs else None
        # a hint's drafts say nothing of how far the assistant's would be right: a row adapts only where
        # its assistant's drafts were reached
        adapt = (n_accepted >= hinted) & (round_drafts > hinted) if proposals else context.drafts
        advance(context, state, k, round_drafts, n_accepted, next_token, adapt=adapt, logprobs=logprobs,
                assistant_steps=assistant_steps)


def prefill(context: Context, state: State, stats: DecodingStats, features=None) -> None:
    """The main model's keys and values of each row's prompt but its last token, in a call of its own,
    so that every later main call has the same width (fixed shapes), and every row's first round starts
    at its prompt's last token (prompts of several lengths). A shorter prompt's row computes positions
    past its prompt too: masked by position and overwritten later (model.py). features: what runs the
    main decoder on (window, positions), as Decoder.features on the batch's caches (a replayed graph of
    it, fixed_shapes.fixed_shape_decode)."""
    n_prefill = context.prompt_length - 1
    if n_prefill > 0:
        batch = len(state.tokens)
        positions = torch.arange(n_prefill, device=state.tokens.device).expand(batch, -1)
        features = features or functools.partial(context.main.decoder.features, caches=context.caches.main,
                                                 taps=head_taps(context, state))
        hidden = features(state.tokens[:, :n_prefill], positions)
        if state.hidden is not None:
            state.hidden[:, :n_prefill] = head_input(context, state, hidden)
            hidden = context.main.decoder.final_hidden(hidden)
        sot = context.sot_positions
        if context.judges_silence and state.no_speech is None:
            rows = torch.arange(batch, device=sot.device)
            after_sot = context.main.decoder.logits(hidden[rows, sot.clamp(max=n_prefill - 1)])
            if bool((sot < state.length - 1).all()):
                read_no_speech(context, state, after_sot)
            else:  # a row whose prompt ends at SOT reads it in the first round, the others these (first_after_sot)
                state.after_sot = after_sot
        state.main_cached.copy_(state.length - 1)
        stats.main_forwards += 1


def first_after_sot(context: Context, state: State, features: Tensor, k: int) -> Tensor:
    """Each row's main-model logits after SOT, in the first round: from the round's window where SOT is
    in it (the window's columns end at length + k), else from the prefill (State.after_sot)."""
    rows = torch.arange(len(state.tokens), device=state.tokens.device)
    columns = context.sot_positions - (state.length + k - features.shape[1])
    logits = context.main.decoder.logits(features[rows, columns.clamp(min=0)])
    return logits if state.after_sot is None else torch.where((columns >= 0)[:, None], logits, state.after_sot)


def head_taps(context: Context, state: State) -> tuple[int, ...] | None:
    """The main decoder blocks whose outputs a draft head reads beside the final hidden states
    (Decoder.through_blocks' taps); None without a head."""
    return context.assistant.decoder.feature_layers if state.hidden is not None else None


def head_input(context: Context, state: State, main_features: Tensor) -> Tensor:
    """What the draft head reads at verified positions, from the main decoder's features there."""
    return context.assistant.decoder.head_input(main_features).to(state.hidden.dtype)


def read_no_speech(context: Context, state: State, after_sot: Tensor) -> None:
    """Each row's no-speech probability from the main model's logits after SOT (its first call's,
    or language detection's), and whether a row may be judged silent."""
    options = context.options
    state.no_speech = torch.softmax(after_sot, dim=-1)[:, context.main.special.no_speech]
    state.sums_logprobs = context.judges_text or (options.logprob_threshold is not None
                                                  and bool((state.no_speech > options.no_speech_threshold).any()))


def draft(context: Context, state: State, k: int, stats: DecodingStats, hinted: Tensor | None = None
          ) -> tuple[Tensor, int]:
    """Up to k drafts per row from the assistant, written after the row's accepted tokens and the
    `hinted` tokens already written after them (hinted_tokens: a hint's, which its first step reads);
    in sampling, drawn at the uniform numbers the main model's tokens will be (sample_tokens).

    A row unsure of a draft stops there: its later drafts would mostly be rejected, yet cost a
    step and a verified position. Returns each row's drafts this round and the round's k (lower
    when every row stopped)."""
    assistant, options, tokens = context.assistant, context.options, state.tokens
    active = ~state.done
    rows = torch.arange(len(tokens), device=tokens.device)
    draft_vocab = assistant.decoder.draft_vocab if assistant is not None else None
    round_drafts = state.draft_length.clamp(max=k)
    start = state.length if hinted is None else state.length + hinted
    for j in range(k):
        # drafts past a hint a row has no room for (hinted_drafts) go nowhere, within the cache
        current = start + j if hinted is None else (start + j).clamp(max=context.n_ctx - 1)
        width = int((current - state.assistant_cached)[active].max())
        window, positions = token_window(tokens, (current - width).clamp(min=0), width)
        # the assistant attends to the positions in use only, not the whole cache
        span = min(int(current.max()) + 1, context.n_ctx)
        step = functools.partial(context.draft_logits, assistant.decoder, context.caches.assistant, span)
        if state.hidden is None:
            logits = context.caches.call(step, window, positions)
        else:
            logits, predicted = context.caches.call(step, window, positions, hidden_before(state.hidden, positions))
            state.hidden[rows, current - 1] = predicted.to(state.hidden.dtype)
        logits = context.draft_rules(logits, tokens, current, context.end_floors, context.begins)
        state.assistant_cached.copy_(current)
        choice = choose_tokens(logits, context.temperature, context.seeds, current)
        tokens[rows, current] = choice if draft_vocab is None else draft_vocab[choice]
        stats.assistant_forwards += 1
        if options.draft_confidence > 0:
            confidence = torch.softmax(logits / (context.temperature or 1.0), dim=-1).gather(1, choice[:, None])[:, 0]
            round_drafts = torch.where(confidence < options.draft_confidence,
                                       round_drafts.clamp(max=j + 1), round_drafts)
            if not bool((round_drafts[active] > j + 1).any()):
                return round_drafts, j + 1
    return round_drafts, k


# a hint's occurrence of a row's last tokens counts only this near where the row's text ends: a word
# inserted or dropped shifts the rest a few tokens, while common pairs ("." then " I") recur far away
HINT_SHIFT = 6


def hint_continuation(hint: tuple[int, ...], text: list[int], n: int, end: int | None = None, match: int = 2
                      ) -> list[int]:
    """Up to n tokens of a hint that would follow a row's text so far, `end` (the token the hint ended
    with, EOT) after the hint's last: what follows where the text runs along the hint, nothing once it
    is past the hint's end; where the text left the hint, what follows the occurrence of the text's
    last `match` tokens in the hint nearest to where the text ends, within HINT_SHIFT of it; [] where
    none."""
    full = [*hint, *([] if end is None else [end])]
    if text[: len(hint)] == list(hint[: len(text)]):
        return full[len(text) : len(text) + n] if len(text) <= len(hint) else []
    if len(text) < match:
        return []
    tail = text[-match:]
    found = [i + match for i in range(len(hint) - match + 1) if list(hint[i : i + match]) == tail
             and abs(i + match - len(text)) <= HINT_SHIFT]
    if not found:
        return []
    at = min(found, key=lambda i: abs(i - len(text)))
    return full[at : at + n]


def hint_text(hint: tuple[int, ...], timestamp_begin: int) -> tuple[int, ...]:
    """The hint without the timestamps it closes with: where the audio has grown since (a live
    stream's next update), its last segment goes on and ends later."""
    end = len(hint)
    while end and hint[end - 1] >= timestamp_begin:
        end -= 1
    return hint[:end]


def hint_proposals(context: Context, state: State) -> dict[int, tuple[list[int], bool]]:
    """Per active row with a hint that continues its text: the hint's continuation (hint_continuation,
    up to max_draft tokens), and whether it is the hint's to its end. A row whose assistant drafts
    takes the hint's text only (hint_text) and the assistant drafts on from its end (hinted_drafts);
    another row takes the hint to its end, then EOT."""
    special, tokens = context.main.special, state.tokens
    lengths, done, begins = state.length.tolist(), state.done.tolist(), context.begins.tolist()
    drafting = (state.drafting & context.drafts).tolist()
    proposals = {}
    for row, hint in enumerate(context.hints):
        if hint is not None and not done[row]:
            text = tokens[row, begins[row] : lengths[row]].tolist()
            if drafting[row]:
                text_only = hint_text(hint, special.timestamp_begin) if context.options.timestamps else hint
                proposal = hint_continuation(text_only, text, context.max_draft)
            else:
                proposal = hint_continuation(hint, text, context.max_draft, end=special.eot)
            if proposal:
                proposals[row] = (proposal, not drafting[row])
    return proposals


def hinted_tokens(state: State, proposals: dict[int, tuple[list[int], bool]]) -> Tensor:
    """Each row's proposal (hint_proposals) written after its accepted tokens, as drafts that cost no
    forward pass. Returns how many per row (0 without)."""
    tokens, lengths = state.tokens, state.length.tolist()
    hinted = torch.zeros_like(state.length)
    for row, (proposal, _) in proposals.items():
        tokens[row, lengths[row] : lengths[row] + len(proposal)] = torch.tensor(proposal, device=tokens.device)
        hinted[row] = len(proposal)
    return hinted


def hinted_drafts(context: Context, state: State, proposals: dict[int, tuple[list[int], bool]], hinted: Tensor,
                  assistant_drafts: Tensor) -> tuple[Tensor, int]:
    """Each row's drafts this round: its hinted tokens, then (where its proposal is not the hint's to
    its end) the assistant's drafts after them, up to max_draft in all. Verified like any draft, so the
    tokens stay the main model's. Returns each row's drafts and the round's k."""
    ended = torch.zeros_like(state.done)
    for row, (_, to_end) in proposals.items():
        ended[row] = to_end
    room = (context.max_draft - hinted).clamp(min=0)
    round_drafts = hinted + torch.where(ended, 0, torch.minimum(assistant_drafts, room))
    return round_drafts, int(round_drafts[~state.done].max())


def verify(context: Context, state: State, k: int, round_drafts: Tensor, stats: DecodingStats
           ) -> tuple[Tensor, Tensor, Tensor]:
    """The main decoder scores each row's last accepted token and every draft in one pass.
    Returns the processed logits only where the round can end, [n_scored, vocab]: each active
    row's drafts and the position after them (scored, [batch, k + 1]); and the final hidden states
    of the window it read, [batch, width, d_model]."""
    tokens, length, decoder = state.tokens, state.length, context.main.decoder
    active = ~state.done
    steps = torch.arange(k + 1, device=tokens.device)
    needed = int((length - state.main_cached)[active].max()) + k
    window, positions = token_window(tokens, (length + k - needed).clamp(min=0), needed)
    scored = (steps <= round_drafts[:, None]) & active[:, None]
    stats.main_forwards += 1
    features = context.caches.call(functools.partial(decoder.features, caches=context.caches.main,
                                                     taps=head_taps(context, state)), window, positions)
    if state.hidden is not None:
        state.hidden[torch.arange(len(tokens), device=tokens.device)[:, None], positions] = head_input(context, state,
                                                                                                      features)
        features = decoder.final_hidden(features)
    logits = decoder.logits(features[:, needed - k - 1 : needed][scored])
    flat = scored.view(-1)
    logits = context.rules(logits, tokens.repeat_interleave(k + 1, dim=0)[flat], (length[:, None] + steps).view(-1)[flat],
                           context.end_floors.repeat_interleave(k + 1)[flat], context.begins.repeat_interleave(k + 1)[flat])
    return logits, scored, features


def accept(context: Context, state: State, k: int, round_drafts: Tensor, logits: Tensor, scored: Tensor
           ) -> tuple[Tensor, Tensor]:
    """Per row: how many drafts are kept, and the main model's token after them: its argmax, or in
    sampling its draw at the position's uniform number (sample_tokens)."""
    steps = torch.arange(k + 1, device=logits.device)
    positions = state.length[:, None] + steps
    drafts = state.tokens.gather(1, positions[:, :k])
    eligible = steps[:k] < round_drafts[:, None]
    target = torch.full((len(state.tokens), k + 1), context.main.special.eot, device=logits.device)
    target[scored] = choose_tokens(logits, context.temperature, context.seeds[:, None].expand_as(positions)[scored],
                                   positions[scored])
    return accept_greedy(target, drafts, eligible)


def token_logprobs(state: State, k: int, logits: Tensor, scored: Tensor, n_accepted: Tensor, next_token: Tensor
                   ) -> Tensor:
    """[batch, k + 1]: the main model's log-probability (of its processed logits, as openai-whisper
    sums them) of each token the round keeps: the accepted drafts, then the next token."""
    steps = torch.arange(k + 1, device=logits.device)
    kept = state.tokens.gather(1, state.length[:, None] + steps).scatter(1, n_accepted[:, None], next_token[:, None])
    keeps = scored & (steps <= n_accepted[:, None])  # the rejected drafts' rows are not normalised
    logprobs = torch.zeros(scored.shape, device=logits.device)
    logprobs[keeps] = torch.log_softmax(logits[keeps[scored]], dim=-1).gather(1, kept[keeps][:, None])[:, 0]
    return logprobs


def advance(context: Context, state: State, k: int, round_drafts: Tensor, n_accepted: Tensor,
            next_token: Tensor, adapt: bool | Tensor = True, logprobs: Tensor | None = None,
            assistant_steps: int | None = None) -> None:
    """Append each row's kept drafts and next token, end rows at EOT or max_length, roll the
    cache extents back to what was kept, count, (logprobs: token_logprobs) record the kept tokens'
    log-probabilities, and (adapt: after a round that drafted; per row, a mask) adapt the draft lengths.
    assistant_steps: the assistant's forward passes this round, where not k (a hint drafted the rest)."""
    # few ops, each value computed once: on a GPU every op is a kernel of the round's graph
    tokens, length, eot = state.tokens, state.length, context.main.special.eot
    active = ~state.done
    steps = torch.arange(k + 1, device=tokens.device)
    kept = length + n_accepted  # where each row's next token goes
    tokens.scatter_(1, kept[:, None], next_token[:, None])
    new = n_accepted + 1
    is_eot = (tokens.gather(1, length[:, None] + steps) == eot) & (steps < new[:, None])
    ended = is_eot.any(dim=1)
    new = torch.where(ended, is_eot.long().argmax(dim=1) + 1, new)
    new = torch.where(active, torch.minimum(new, context.max_length - length), 0)
    new_length = length + new
    at_max = new_length >= context.max_length

    # drafts past a row's end (EOT or max length) are not counted as drafted
    drafted = torch.where(ended | at_max, torch.minimum(round_drafts, new), round_drafts) * active
    accepted = torch.minimum(n_accepted, drafted)
    live = active.long()
    state.counts += torch.stack([drafted, accepted, new, live, (k if assistant_steps is None else assistant_steps) * live], dim=1)
    state.by_position[:, :, :k] += torch.stack([drafted, accepted])[:, :, None] > steps[:k]
    if logprobs is not None:  # positions past the row's new end get zeros, overwritten by later rounds
        # where, not a product: a rejected draft the rules forbid has log-probability -inf, and -inf * 0 is nan
        state.logprobs.scatter_(1, length[:, None] + steps, torch.where(steps < new[:, None], logprobs, 0.0))

    # in place, as every update of the state: a captured round (RoundGraph) reads and writes these tensors
    state.main_cached.copy_(torch.where(active, kept, state.main_cached))
    # a draft head keeps its entries made from its own guesses of the hidden states: reading the accepted
    # drafts again with the main model's did not pay (decisions, "Draft heads")
    state.assistant_cached.copy_(torch.minimum(state.assistant_cached, kept))
    state.hit_max |= active & ~ended & at_max
    state.done |= ended | at_max
    state.length.copy_(new_length)
    if adapt is not False and context.options.adaptive_draft and context.assistant is not None:
        grown = torch.where(n_accepted >= round_drafts, state.draft_length + 2, (state.draft_length - 1).clamp(min=1))
        state.draft_length.copy_(torch.where(active & state.drafting & adapt, grown.clamp(max=context.max_draft),
                                             state.draft_length))
