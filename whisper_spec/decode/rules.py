"""Whisper's logits processing, applied alike to the main model and the assistant."""

from __future__ import annotations

import torch
from torch import Tensor

from ..models.kept import Kept
from ..models.tokenizer import SpecialTokens

NEG_INF = float("-inf")


class LogitRules:
    """Whisper's logits processing, applied identically to main and assistant, per row and position.

    Mirrors transformers' Whisper generate: begin-suppress tokens at the first sampled position,
    suppress tokens always, and with timestamps the timestamp rules (pairs, monotonic, initial
    timestamp at most max_initial_timestamp_index, timestamps forced when their total probability
    beats every text token), and one of ours: a row's text does not end before its timestamps reach
    the row's end floor (long audio: near where the window's speech ends, windows.end_floor).
    """

    def __init__(self, special: SpecialTokens, n_vocab: int, timestamps: bool, device, vocab: Tensor | None = None):
        """vocab: the sorted token ids of the logits' columns, all timestamps among them (an
        assistant's draft vocabulary); default: the whole vocabulary."""
        self.special = special
        # what a captured step that applies these rules bakes in, besides the model (fixed_shapes._replay)
        self.key = (timestamps, None if vocab is None else len(vocab))
        self.timestamps = timestamps
        self.vocab = torch.arange(n_vocab, device=device) if vocab is None else vocab
        # the timestamps are the last columns
        self.first_timestamp = int(torch.searchsorted(self.vocab, special.timestamp_begin))
        suppress = torch.isin(self.vocab, torch.tensor(special.suppress, dtype=torch.long, device=device))
        begin_suppress = torch.isin(self.vocab, torch.tensor(special.begin_suppress, dtype=torch.long, device=device))
        self.is_timestamp = self.vocab >= special.timestamp_begin
        self.is_text = self.vocab < special.eot
        self.is_eot = self.vocab == special.eot
        self.past_vocab = int(self.vocab[-1]) + 1
        # what every row masks, and what a row at its first sampled position masks besides: the rules
        # that depend on no row's tokens, precomputed so a step builds one mask (one pass over the logits)
        self.always = suppress | (self.vocab == special.no_timestamps) if timestamps else suppress
        self.at_begin = begin_suppress
        if timestamps:  # the first token is a timestamp, at most max_initial_timestamp_index
            self.at_begin = self.at_begin | ~self.is_timestamp
            if special.max_initial_timestamp_index is not None:
                self.at_begin = self.at_begin | (self.vocab > special.timestamp_begin + special.max_initial_timestamp_index)

    @classmethod
    def kept(cls, store: Kept, special: SpecialTokens, n_vocab: int, timestamps: bool, device,
             vocab: Tensor | None = None) -> "LogitRules":
        """The rules for these arguments from store (the main decoder's, kept.DecoderKept.rules), made
        at first use. Keyed by identity of special and vocab, which the rules hold, so a key's objects
        stay alive while it is kept."""
        key = (id(special), n_vocab, timestamps, str(device), None if vocab is None else id(vocab))
        return store.get(key, lambda: cls(special, n_vocab, timestamps, device, vocab))

    def __call__(self, logits: Tensor, tokens: Tensor, lengths: Tensor, end_floors: Tensor, begins: Tensor) -> Tensor:
        """logits: [N, vocab] for the token after the first lengths[n] tokens of tokens[n] ([N, ctx]);
        end_floors: [N], the timestamp token each row's last timestamp reaches before EOT may follow
        (timestamp_begin: anywhere); begins: [N], where each row's sampled tokens begin (its prompt's
        length: rows of one batch may have prompts of their own)."""
        masked = self.always | ((lengths == begins)[:, None] & self.at_begin)
        if not self.timestamps:
            return logits.masked_fill(masked, NEG_INF)
        logits = logits.masked_fill(masked | self._timestamp_order(tokens, lengths, end_floors, begins), NEG_INF)
        # timestamps forced where their total probability beats every text token
        logprobs = torch.log_softmax(logits, dim=-1)
        ts_mass = logprobs[:, self.first_timestamp :].logsumexp(dim=-1)
        best_text = logprobs[:, : self.first_timestamp].max(dim=-1).values
        return logits.masked_fill((ts_mass > best_text)[:, None] & ~self.is_timestamp, NEG_INF)

    def _timestamp_order(self, tokens: Tensor, lengths: Tensor, end_floors: Tensor, begins: Tensor) -> Tensor:
        """[N, vocab]: True where the row's timestamps so far rule the token out."""
        ts_begin = self.special.timestamp_begin
        cols = torch.arange(tokens.shape[1], device=tokens.device)
        sampled = (cols >= begins[:, None]) & (cols < lengths[:, None])
        is_ts = (tokens >= ts_begin) & sampled
        n_sampled = lengths - begins
        last = tokens.gather(1, (lengths - 1).clamp(min=0)[:, None])[:, 0]
        penultimate = tokens.gather(1, (lengths - 2).clamp(min=0)[:, None])[:, 0]
        last_ts = (n_sampled >= 1) & (last >= ts_begin)
        penultimate_ts = (n_sampled < 2) | (penultimate >= ts_begin)

        # timestamps never decrease, and a closed segment's end is not repeated as the next start
        last_ts_col = torch.where(is_ts, cols, -1).amax(dim=1)
        last_ts_token = tokens.gather(1, last_ts_col.clamp(min=0)[:, None])[:, 0]
        lowest = torch.where(last_ts & ~penultimate_ts, last_ts_token, last_ts_token + 1)
        lowest = torch.where(last_ts_col >= 0, lowest, ts_begin)
        # timestamps come in pairs, except directly before EOT: none after a pair, text none after a lone one
        lowest = torch.where(last_ts & penultimate_ts, self.past_vocab, lowest)
        masked = self.is_timestamp & (self.vocab < lowest[:, None])
        masked = masked | ((last_ts & ~penultimate_ts)[:, None] & self.is_text)

        # an EOT before the floor would leave speech undecoded; a timestamp at or past it is always open
        short = torch.where(last_ts_col >= 0, last_ts_token, ts_begin) < end_floors
        return masked | (short[:, None] & self.is_eot)
