"""Whisper's logits processing, applied alike to the main model and the assistant."""

from __future__ import annotations

import torch
from torch import Tensor

from .kept import Kept
from .tokenizer import SpecialTokens

NEG_INF = float("-inf")
KEPT_RULES = 16  # LogitRules.kept: rules of recent (model, prompt length, timestamps, device, vocabulary)


class LogitRules:
    """Whisper's logits processing, applied identically to main and assistant, per row and position.

    Mirrors transformers' Whisper generate: begin-suppress tokens at the first sampled position,
    suppress tokens always, and with timestamps the timestamp rules (pairs, monotonic, initial
    timestamp at most max_initial_timestamp_index, timestamps forced when their total probability
    beats every text token), and one of ours: a row's text does not end before its timestamps reach
    the row's end floor (long audio: near where the window's speech ends, pipeline._end_floor).
    """

    def __init__(self, special: SpecialTokens, n_vocab: int, sample_begin: int, timestamps: bool, device,
                 vocab: Tensor | None = None):
        """vocab: the sorted token ids of the logits' columns, all timestamps among them (an
        assistant's draft vocabulary); default: the whole vocabulary."""
        self.special = special
        # what a captured step that applies these rules bakes in, besides the model (fixed_shapes._replay)
        self.key = (sample_begin, timestamps, None if vocab is None else len(vocab))
        self.sample_begin = sample_begin
        self.timestamps = timestamps
        self.vocab = torch.arange(n_vocab, device=device) if vocab is None else vocab
        # the timestamps are the last columns
        self.first_timestamp = int(torch.searchsorted(self.vocab, special.timestamp_begin))
        self.suppress = torch.isin(self.vocab, torch.tensor(special.suppress, dtype=torch.long, device=device))
        self.begin_suppress = torch.isin(
            self.vocab, torch.tensor(special.begin_suppress, dtype=torch.long, device=device)
        )

    @classmethod
    def kept(cls, special: SpecialTokens, n_vocab: int, sample_begin: int, timestamps: bool, device,
             vocab: Tensor | None = None) -> "LogitRules":
        """The rules for these arguments, made at first use and kept (the most recent KEPT_RULES): making
        them takes vocabulary-wide ops and a host read, and every decoding pass needs them (twice with a
        draft vocabulary). Keyed by identity of special and vocab, which the rules hold, so a key's
        objects stay alive while it is kept."""
        key = (id(special), n_vocab, sample_begin, timestamps, str(device), None if vocab is None else id(vocab))
        return _KEPT.get(key, lambda: cls(special, n_vocab, sample_begin, timestamps, device, vocab))

    def __call__(self, logits: Tensor, tokens: Tensor, lengths: Tensor, end_floors: Tensor) -> Tensor:
        """logits: [N, vocab] for the token after the first lengths[n] tokens of tokens[n] ([N, ctx]);
        end_floors: [N], the timestamp token each row's last timestamp reaches before EOT may follow
        (timestamp_begin: anywhere)."""
        logits = logits.masked_fill(self.suppress, NEG_INF)
        at_begin = (lengths == self.sample_begin)[:, None]
        logits = logits.masked_fill(at_begin & self.begin_suppress, NEG_INF)
        if self.timestamps:
            logits = self._timestamp_rules(logits, tokens, lengths, at_begin, end_floors)
        return logits

    def _timestamp_rules(self, logits: Tensor, tokens: Tensor, lengths: Tensor, at_begin: Tensor,
                         end_floors: Tensor) -> Tensor:
        special, vocab = self.special, self.vocab
        ts_begin = special.timestamp_begin
        is_ts_vocab = vocab >= ts_begin
        logits = logits.masked_fill(vocab == special.no_timestamps, NEG_INF)

        cols = torch.arange(tokens.shape[1], device=tokens.device)
        sampled = (cols >= self.sample_begin) & (cols < lengths[:, None])
        is_ts = (tokens >= ts_begin) & sampled
        n_sampled = lengths - self.sample_begin
        last = tokens.gather(1, (lengths - 1).clamp(min=0)[:, None])[:, 0]
        penultimate = tokens.gather(1, (lengths - 2).clamp(min=0)[:, None])[:, 0]
        last_ts = (n_sampled >= 1) & (last >= ts_begin)
        penultimate_ts = (n_sampled < 2) | (penultimate >= ts_begin)

        # timestamps come in pairs, except directly before EOT
        logits = logits.masked_fill((last_ts & penultimate_ts)[:, None] & is_ts_vocab, NEG_INF)
        logits = logits.masked_fill((last_ts & ~penultimate_ts)[:, None] & (vocab < special.eot), NEG_INF)

        # timestamps never decrease, and a closed segment's end is not repeated as the next start
        last_ts_col = torch.where(is_ts, cols, -1).amax(dim=1)
        last_ts_token = tokens.gather(1, last_ts_col.clamp(min=0)[:, None])[:, 0]
        lowest = torch.where(last_ts & ~penultimate_ts, last_ts_token, last_ts_token + 1)
        lowest = torch.where(last_ts_col >= 0, lowest, ts_begin)
        logits = logits.masked_fill(is_ts_vocab & (vocab < lowest[:, None]), NEG_INF)

        # an EOT before the floor would leave speech undecoded; a timestamp at or past it is always open
        short = torch.where(last_ts_col >= 0, last_ts_token, ts_begin) < end_floors
        logits = logits.masked_fill(short[:, None] & (vocab == special.eot), NEG_INF)

        logits = logits.masked_fill(at_begin & ~is_ts_vocab, NEG_INF)
        if special.max_initial_timestamp_index is not None:
            late = vocab > ts_begin + special.max_initial_timestamp_index
            logits = logits.masked_fill(at_begin & late, NEG_INF)

        logprobs = torch.log_softmax(logits, dim=-1)
        ts_mass = logprobs[:, self.first_timestamp :].logsumexp(dim=-1)
        best_text = logprobs[:, : self.first_timestamp].max(dim=-1).values
        return logits.masked_fill((ts_mass > best_text)[:, None] & ~is_ts_vocab, NEG_INF)


_KEPT: Kept[LogitRules] = Kept(KEPT_RULES)
