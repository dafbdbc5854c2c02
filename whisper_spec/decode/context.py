"""What a decoding pass holds fixed (Context: models, options, rules, the rows' seeds, floors,
prompts and hints, the batch's caches) and what each row carries from round to round (State)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..models.pair import Whisper
from ..options import DecodingOptions
from .caches import BatchCaches
from .rules import LogitRules


@dataclass(frozen=True)
class Context:
    """What stays fixed while a batch decodes."""

    main: Whisper
    assistant: Whisper | None
    options: DecodingOptions
    rules: LogitRules
    draft_rules: LogitRules  # on the assistant's draft vocabulary, where it has one
    temperature: float  # 0: greedy
    seeds: Tensor  # per row, what sampling's uniform numbers derive from (position_uniforms)
    end_floors: Tensor  # per row, the timestamp token its text reaches before it may end (LogitRules)
    begins: Tensor  # per row, its prompt's length: where its own tokens begin, a forced prefix's first (LogitRules)
    # the longest row's tokens before the rounds, prompt and prefix (fixed shapes decode rows of one
    # such length: decoding._by_prompt_length)
    prompt_length: int
    n_ctx: int  # decoder cache positions
    max_length: int
    max_draft: int
    drafts: bool  # the assistant drafts in every round (speculation on, or auto where it pays)
    fixed_width: int | None  # every main decoder call this many positions wide; None: row-invariant kernels
    graphs: bool  # decoder steps replayed from CUDA graphs
    draft_logits: object  # draft_logits itself, or compiled (DecodingOptions.compile, Platform.compiles)
    caches: BatchCaches  # the decoders' caches of the batch, the rows they compute
    judges_silence: bool  # the no-speech rule is on (DecodingOptions.no_speech_threshold)
    judges_text: bool  # every row's average log-probability is needed (a later temperature may follow)
    rounds_per_read: int = 1  # fixed shapes: rounds between host reads of "every row done" (Platform)
    compiles_rounds: bool = False  # fixed shapes: a round's steps through torch.compile (fixed_shapes.round_step)
    # per row, its prompt's tokens after <|startofprev|> (decoding.previous_tokens): a live stream's
    # text so far, each stream its own in one batch
    previous: tuple[tuple[int, ...], ...] = ()
    # per row, tokens its own begin with, as if it had chosen them (DecodingOptions' prefix, per row): a
    # live stream's confirmed text in its buffer, timestamps included
    prefixes: tuple[tuple[int, ...], ...] = ()
    # per row, a hypothesis of the same audio (a previous decoding's tokens after the prompt) whose
    # continuation the row drafts for free (hint_proposals); None: none for any row
    hints: tuple[tuple[int, ...] | None, ...] | None = None

    @property
    def sot_positions(self) -> Tensor:
        """Per row, where <|startoftranscript|> is in its prompt: the no-speech probability is read after it."""
        return torch.tensor([len(p) + 1 if p else 0 for p in self.previous] or [0] * len(self.begins),
                            device=self.begins.device)


@dataclass
class State:
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
    # [batch, n_ctx + 1, d_model], for a draft head: what it reads of the main decoder at each position
    # the main decoder has read (head_input; prefill and verification write them), at the newest
    # position the head's prediction of the final hidden state
    hidden: Tensor | None = None
    sums_logprobs: bool = False  # a row may be judged silent: sum its tokens' log-probabilities
    # where prompts end at SOT in some rows only: each row's main-model logits after SOT from the
    # prefill (prefill), for the rows whose SOT is not in the first round's window
    after_sot: Tensor | None = None


def initial_state(context: Context, languages: list[str]) -> State:
    main, assistant, options = context.main, context.assistant, context.options
    batch, device = len(languages), main.decoder.positional_embedding.device
    tokens = torch.full((batch, context.n_ctx + 1), main.special.eot, dtype=torch.long, device=device)
    for row, (language, previous, prefix) in enumerate(zip(languages, context.previous or [()] * batch,
                                                           context.prefixes or [()] * batch)):
        prompt = main.special.prompt(language, options.task, options.timestamps, previous) + list(prefix)
        tokens[row, : len(prompt)] = torch.tensor(prompt, device=device)
    length = context.begins + torch.tensor([len(p) for p in context.prefixes] or [0] * batch, device=device)
    # rows in a language the assistant was not trained for would reject nearly every draft
    drafting = torch.tensor([assistant is not None and (assistant.draft_languages is None
                                                        or language in assistant.draft_languages)
                             for language in languages], device=device)
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    hidden = None
    if assistant is not None and assistant.is_draft_head:
        hidden = torch.zeros((*tokens.shape, main.dims.d_model), dtype=main.decoder.dtype, device=device)
    return State(tokens, length, torch.zeros_like(length), torch.zeros_like(length),
                  drafting, torch.where(drafting, options.draft_tokens, 0), done, torch.zeros_like(done),
                  torch.zeros(batch, 5, dtype=torch.long, device=device),
                  torch.zeros(2, batch, context.max_draft, dtype=torch.long, device=device),
                  torch.zeros(tokens.shape, device=device), sums_logprobs=context.judges_text, hidden=hidden)
