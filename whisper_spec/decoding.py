"""Batched speculative decoding of 30 s windows, exact with respect to the main model.

Per round: the assistant drafts up to k tokens per row, the main decoder scores the row's last
accepted token plus all drafts in one forward pass, and each row keeps its own longest accepted
prefix plus the main model's next token. Rows never wait for each other: every row has its own
length, its own positions and (through the position-masked static cache) its own rollback.

Greedy: a draft is accepted when it equals the main model's argmax, so the output is the main
model's own greedy output token for token. Sampling: the modified rejection rule (accept with
probability min(1, p/q), otherwise resample from norm(max(0, p - q))) keeps the output
distribution the main model's.

The same loop with no assistant (k = 0) is plain main-only decoding, so both share every rule.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

from .audio import signal_frames
from .loader import WhisperModel, WhisperPair
from .tokenizer import SpecialTokens

NEG_INF = float("-inf")


@dataclass(frozen=True)
class DecodingOptions:
    task: str = "transcribe"  # or "translate"
    language: str | None = None  # None: detected per row
    temperature: float = 0.0  # 0: greedy
    timestamps: bool = False  # predict segment timestamps (Whisper's timestamp rules apply)
    max_length: int | None = None  # total decoder tokens including the prompt; default: the model's 448
    draft_tokens: int = 4  # most drafted per round and row; ignored without an assistant
    adaptive_draft: bool = False  # per row: +2 after a fully accepted round, -1 after a rejection
    draft_confidence: float = 0.8  # a row stops drafting for the round after a draft the assistant gives less probability
    max_draft_tokens: int = 16  # cap for the adaptive draft length
    seed: int | None = None  # for sampling

    def __post_init__(self):
        if self.task not in ("transcribe", "translate"):
            raise ValueError(f"task must be transcribe or translate, not {self.task!r}")
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        if self.draft_tokens < 0 or self.max_draft_tokens < max(1, self.draft_tokens if self.adaptive_draft else 1):
            raise ValueError("draft_tokens must be >= 0 and max_draft_tokens >= draft_tokens")
        if not 0 <= self.draft_confidence < 1:
            raise ValueError("draft_confidence must be in [0, 1)")


@dataclass
class DecodingStats:
    """What decoding did, for one window, one file or a whole run.

    main_forwards counts batched passes of the main decoder; row_forwards counts the rows that
    took part in them, so tokens_per_main_forward is per row, comparable across batch sizes.
    Acceptance = accepted / drafted.
    """

    windows: int = 0
    drafted: int = 0
    accepted: int = 0
    generated: int = 0  # output tokens, EOT included
    main_forwards: int = 0
    row_forwards: int = 0
    assistant_forwards: int = 0
    encoder_seconds: float = 0.0
    decoding_seconds: float = 0.0
    drafted_by_position: list[int] = field(default_factory=list)
    accepted_by_position: list[int] = field(default_factory=list)

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def tokens_per_main_forward(self) -> float | None:
        return self.generated / self.row_forwards if self.row_forwards else None

    def add(self, other: "DecodingStats") -> None:
        for name in ("windows", "drafted", "accepted", "generated", "main_forwards", "row_forwards",
                     "assistant_forwards", "encoder_seconds", "decoding_seconds"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for mine, theirs in ((self.drafted_by_position, other.drafted_by_position),
                             (self.accepted_by_position, other.accepted_by_position)):
            mine.extend([0] * (len(theirs) - len(mine)))
            for i, n in enumerate(theirs):
                mine[i] += n

    def as_dict(self) -> dict:
        return {
            "windows": self.windows,
            "drafted_tokens": self.drafted,
            "accepted_tokens": self.accepted,
            "acceptance": self.acceptance,
            "generated_tokens": self.generated,
            "main_forwards": self.main_forwards,
            "assistant_forwards": self.assistant_forwards,
            "tokens_per_main_forward": self.tokens_per_main_forward,
            "encoder_seconds": self.encoder_seconds,
            "decoding_seconds": self.decoding_seconds,
            "drafted_by_position": self.drafted_by_position,
            "accepted_by_position": self.accepted_by_position,
        }


@dataclass
class WindowResult:
    tokens: list[int]  # sampled tokens after the prompt, timestamps included, EOT excluded
    language: str | None
    hit_max_length: bool  # stopped by max_length rather than EOT
    stats: DecodingStats  # this row's counts; times are the batch's, shared equally by its rows


class LogitRules:
    """Whisper's logits processing, applied identically to main and assistant, per row and position.

    Mirrors transformers' Whisper generate: begin-suppress tokens at the first sampled position,
    suppress tokens always, and with timestamps the timestamp rules (pairs, monotonic, initial
    timestamp at most max_initial_timestamp_index, timestamps forced when their total probability
    beats every text token).
    """

    def __init__(self, special: SpecialTokens, n_vocab: int, sample_begin: int, timestamps: bool, device,
                 vocab: Tensor | None = None):
        """vocab: the sorted token ids of the logits' columns, all timestamps among them (an
        assistant's draft vocabulary); default: the whole vocabulary."""
        self.special = special
        self.sample_begin = sample_begin
        self.timestamps = timestamps
        self.vocab = torch.arange(n_vocab, device=device) if vocab is None else vocab
        # the timestamps are the last columns
        self.first_timestamp = int(torch.searchsorted(self.vocab, special.timestamp_begin))
        self.suppress = torch.isin(self.vocab, torch.tensor(special.suppress, dtype=torch.long, device=device))
        self.begin_suppress = torch.isin(
            self.vocab, torch.tensor(special.begin_suppress, dtype=torch.long, device=device)
        )

    def __call__(self, logits: Tensor, tokens: Tensor, lengths: Tensor) -> Tensor:
        """logits: [N, vocab] for the token after the first lengths[n] tokens of tokens[n] ([N, ctx])."""
        logits = logits.masked_fill(self.suppress, NEG_INF)
        at_begin = (lengths == self.sample_begin)[:, None]
        logits = logits.masked_fill(at_begin & self.begin_suppress, NEG_INF)
        if self.timestamps:
            logits = self._timestamp_rules(logits, tokens, lengths, at_begin)
        return logits

    def _timestamp_rules(self, logits: Tensor, tokens: Tensor, lengths: Tensor, at_begin: Tensor) -> Tensor:
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

        logits = logits.masked_fill(at_begin & ~is_ts_vocab, NEG_INF)
        if special.max_initial_timestamp_index is not None:
            late = vocab > ts_begin + special.max_initial_timestamp_index
            logits = logits.masked_fill(at_begin & late, NEG_INF)

        logprobs = torch.log_softmax(logits, dim=-1)
        ts_mass = logprobs[:, self.first_timestamp :].logsumexp(dim=-1)
        best_text = logprobs[:, : self.first_timestamp].max(dim=-1).values
        return logits.masked_fill((ts_mass > best_text)[:, None] & ~is_ts_vocab, NEG_INF)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _window(tokens: Tensor, start: Tensor, width: int) -> tuple[Tensor, Tensor]:
    """Each row's tokens at positions start .. start + width - 1, and those positions."""
    positions = start[:, None] + torch.arange(width, device=tokens.device)
    return tokens.gather(1, positions), positions


def detect_language(model: WhisperModel, n_rows: int) -> list[str]:
    """The most likely language token after <|startoftranscript|>, per row of the decoder's cross state."""
    special = model.special
    device = model.decoder.token_embedding.weight.device
    sot = torch.full((n_rows, 1), special.sot, device=device)
    logits = model.decoder(sot, torch.zeros_like(sot), n_logits=1)[:, 0]
    language_ids = torch.tensor(list(special.lang_to_id.values()), device=device)
    best = language_ids[logits[:, language_ids].argmax(dim=-1)]
    return [special.id_to_lang[int(i)] for i in best]


@torch.inference_mode()
def detect_languages(pair: WhisperPair, mel: Tensor) -> list[str]:
    """The language of each window, from the main model alone (encoder and one decoder step)."""
    _ensure_cache(pair.main, mel.shape[0], 1)
    pair.main.decoder.set_cross(pair.main.encoder(mel.to(pair.device)))
    return detect_language(pair.main, mel.shape[0])


def _ensure_cache(model: WhisperModel, batch: int, n_ctx: int) -> None:
    cache = model.decoder.blocks[0].attn.kv_cache
    if cache is None or cache.k.shape[0] != batch or cache.k.shape[2] != n_ctx:
        model.decoder.setup_caches(batch, n_ctx)


def assistant_frames(assistant: WhisperModel, mel: Tensor) -> int | None:
    """The encoder frames the assistant attends to for this batch (None: all): up to the end of
    the longest audio plus its margin. Its drafts need not be exact, and skipping the padding
    after short audio halves the bytes its cross-attention reads."""
    if assistant.audio_frame_margin is None:
        return None
    n_audio_ctx = assistant.dims.n_audio_ctx
    frames = -(-int(signal_frames(mel).max()) * n_audio_ctx // mel.shape[-1])
    return min(n_audio_ctx, frames + assistant.audio_frame_margin)


def encode(pair: WhisperPair, mel: Tensor, assistant_mel: Tensor | None, stats: DecodingStats) -> None:
    """Run the encoder(s) once for the batch and hand their states to the decoders' cross-attention."""
    _sync(pair.device)
    start = time.perf_counter()
    with torch.inference_mode():
        states = pair.main.encoder(mel.to(pair.device))
        pair.main.decoder.set_cross(states)
        if pair.assistant is not None:
            n_frames = assistant_frames(pair.assistant, mel)
            if pair.shares_encoder:
                pair.assistant.decoder.set_cross(states, main=pair.main.decoder, n_frames=n_frames)
            else:
                own_mel = mel if assistant_mel is None else assistant_mel
                pair.assistant.decoder.set_cross(pair.assistant.encoder(own_mel.to(pair.device)), n_frames=n_frames)
    _sync(pair.device)
    stats.encoder_seconds += time.perf_counter() - start


def accept_greedy(target: Tensor, drafts: Tensor, eligible: Tensor) -> tuple[Tensor, Tensor]:
    """Per row: how many drafts equal the main model's argmax in a row, and the main model's
    token after them. target: [batch, k + 1] the main model's argmax (of processed logits);
    drafts, eligible: [batch, k]."""
    agree = (drafts == target[:, : drafts.shape[1]]) & eligible
    n_accepted = agree.long().cumprod(dim=1).sum(dim=1)
    return n_accepted, target.gather(1, n_accepted[:, None])[:, 0]


def accept_sampled(p: Tensor, q: Tensor | None, drafts: Tensor, eligible: Tensor, generator) -> tuple[Tensor, Tensor]:
    """Modified rejection sampling per row: draft i is kept with probability min(1, p/q) while all
    before it were; the next token comes from norm(max(0, p - q)) at the first rejection, or from p
    after the last eligible draft. p: [batch, k + 1, vocab] main probabilities; q: [batch, k, vocab]
    the assistant's (None when k = 0)."""
    batch, k = drafts.shape
    rows = torch.arange(batch, device=p.device)
    n_accepted = torch.zeros(batch, dtype=torch.long, device=p.device)
    if k:
        p_draft = p[:, :k].gather(2, drafts[..., None])[..., 0]
        q_draft = q.gather(2, drafts[..., None])[..., 0]
        u = torch.rand(batch, k, device=p.device, generator=generator)
        n_accepted = ((u * q_draft < p_draft) & eligible).long().cumprod(dim=1).sum(dim=1)
    p_next = p[rows, n_accepted]
    rejected = n_accepted < eligible.sum(dim=1)
    if bool(rejected.any()):
        residual = (p_next - q[rows, n_accepted.clamp(max=k - 1)]).clamp(min=0)
        mass = residual.sum(dim=-1, keepdim=True)
        residual = torch.where(mass > 0, residual / mass.clamp(min=1e-30), p_next)
        p_next = torch.where(rejected[:, None], residual, p_next)
    return n_accepted, torch.multinomial(p_next, 1, generator=generator)[:, 0]


@torch.inference_mode()
def decode_windows(
    pair: WhisperPair,
    mel: Tensor,
    options: DecodingOptions = DecodingOptions(),
    *,
    assistant_mel: Tensor | None = None,
    languages: list[str | None] | None = None,
    use_assistant: bool = True,
) -> tuple[list[WindowResult], DecodingStats]:
    """Decode a batch of 30 s windows.

    mel: [batch, n_mels, 3000] features for the main model; assistant_mel: the assistant's own
    features where it has its own encoder with other mel settings. languages: per row, overriding
    options.language (None: detect). use_assistant=False decodes with the main model alone.
    """
    stats = DecodingStats(windows=mel.shape[0])
    encode(pair, mel, assistant_mel, stats)
    return decode_encoded(pair, mel.shape[0], options, languages=languages, use_assistant=use_assistant, stats=stats)


@torch.inference_mode()
def decode_encoded(
    pair: WhisperPair,
    batch: int,
    options: DecodingOptions = DecodingOptions(),
    *,
    languages: list[str | None] | None = None,
    use_assistant: bool = True,
    stats: DecodingStats | None = None,
) -> tuple[list[WindowResult], DecodingStats]:
    """decode_windows after `encode`: the decoders' cross-attention already holds the batch."""
    main = pair.main
    assistant = pair.assistant if use_assistant else None
    special = main.special
    device = pair.device
    stats = stats or DecodingStats(windows=batch)
    languages = list(languages) if languages is not None else [options.language] * batch
    if len(languages) != batch:
        raise ValueError(f"{len(languages)} languages for {batch} windows")
    for language in languages:
        special.check_language(language)

    max_length = min(options.max_length or main.dims.n_text_ctx, main.dims.n_text_ctx)
    max_draft = 0 if assistant is None else (options.max_draft_tokens if options.adaptive_draft else options.draft_tokens)
    # one cache length for main-only and speculative decoding: attention spans the whole cache, so
    # equal lengths keep a position's logits independent of the mode (see Decoder.features)
    n_ctx = max_length + options.max_draft_tokens + 1
    _ensure_cache(main, batch, n_ctx)
    if assistant is not None:
        _ensure_cache(assistant, batch, n_ctx)

    _sync(device)
    start_time = time.perf_counter()
    if special.multilingual and any(language is None for language in languages):
        detected = detect_language(main, batch)
        stats.main_forwards += 1
        languages = [language or found for language, found in zip(languages, detected)]
    if not special.multilingual:
        languages = ["en"] * batch

    prompts = [special.prompt(language, options.task, options.timestamps) for language in languages]
    prompt_length = len(prompts[0])
    tokens = torch.full((batch, n_ctx + 1), special.eot, dtype=torch.long, device=device)
    tokens[:, :prompt_length] = torch.tensor(prompts, device=device)
    rules = LogitRules(special, main.dims.n_vocab, prompt_length, options.timestamps, device)
    # an assistant with a draft vocabulary gets its rules and argmax on those columns only
    draft_vocab = assistant.decoder.draft_vocab if assistant is not None else None
    draft_rules = rules if draft_vocab is None else LogitRules(
        special, main.dims.n_vocab, prompt_length, options.timestamps, device, vocab=draft_vocab)
    generator = None
    if options.temperature > 0:
        generator = torch.Generator(device=device)
        generator.manual_seed(options.seed if options.seed is not None else torch.seed())

    rows = torch.arange(batch, device=device)
    length = torch.full((batch,), prompt_length, device=device)  # accepted tokens per row, prompt included
    main_cached = torch.zeros_like(length)  # positions below this hold valid main keys and values
    assistant_cached = torch.zeros_like(length)
    # rows in a language the assistant was not trained for would reject nearly every draft
    drafting = torch.tensor([assistant is not None and (assistant.draft_languages is None
                                                        or language in assistant.draft_languages)
                             for language in languages], device=device)
    draft_length = torch.where(drafting, options.draft_tokens, 0)
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    hit_max = torch.zeros_like(done)
    counts = torch.zeros(batch, 5, dtype=torch.long, device=device)  # drafted, accepted, generated, main and assistant forwards
    by_position = torch.zeros(2, batch, max_draft, dtype=torch.long, device=device)  # drafted, accepted

    # On CPU finished rows leave the decoders' batch rather than run until the longest row ends.
    # Every kernel there is row-invariant, so a row's results do not depend on which rows run
    # beside it. The full caches and cross-attention states are put back for the next call, which
    # then neither reallocates the caches nor misses the finished rows' audio.
    decoders = [model.decoder for model in (main, assistant) if model is not None]
    full_rows = [(block.attn.kv_cache, block.attn.kv_cache.k, block.attn.kv_cache.v, block.cross_attn,
                  block.cross_attn.cross_kv) for decoder in decoders for block in decoder.blocks]
    alive = rows if device.type == "cpu" else None

    def features(decoder, window: Tensor, positions: Tensor, span: int | None = None) -> Tensor:
        if alive is None or len(alive) == batch:
            return decoder.features(window, positions, span)
        hidden = decoder.features(window[alive], positions[alive], span)
        return hidden.new_zeros((batch, *hidden.shape[1:])).index_copy_(0, alive, hidden)

    while not bool(done.all()):
        active = ~done
        if alive is not None and len(alive) > int(active.sum()):
            keep = active[alive]
            alive = alive[keep]
            for decoder in decoders:
                decoder.keep_rows(keep)
        k = int(draft_length[active].max()) if assistant is not None else 0

        # draft up to k tokens per row with the assistant; a row unsure of its last draft stops
        # there, as its later drafts would mostly be rejected yet cost a step and a verified row
        round_drafts = draft_length.clone()
        draft_probs = []
        for j in range(k):
            current = length + j
            width = int((current - assistant_cached)[active].max())
            window, positions = _window(tokens, (current - width).clamp(min=0), width)
            # the assistant attends to the positions in use only, not the whole cache
            span = min(int(current.max()) + 1, n_ctx)
            hidden = features(assistant.decoder, window, positions, span)[:, -1]
            logits = draft_rules(assistant.decoder.logits(hidden, compact=True), tokens, current)
            assistant_cached = current.clone()
            if generator is None:
                choice = logits.argmax(dim=-1)
            else:
                probs = torch.softmax(logits / options.temperature, dim=-1)
                choice = torch.multinomial(probs, 1, generator=generator)[:, 0]
                if draft_vocab is not None:  # the rejection rule compares full distributions
                    probs = probs.new_zeros(batch, main.dims.n_vocab).index_copy_(1, draft_vocab, probs)
                draft_probs.append(probs)
            draft = choice if draft_vocab is None else draft_vocab[choice]
            tokens[rows, current] = draft
            stats.assistant_forwards += 1
            if options.draft_confidence > 0:
                confidence = torch.softmax(logits, dim=-1).gather(1, choice[:, None])[:, 0]
                round_drafts = torch.where(confidence < options.draft_confidence,
                                           round_drafts.clamp(max=j + 1), round_drafts)
                if not bool((round_drafts[active] > j + 1).any()):
                    k = j + 1
                    break
        steps = torch.arange(k + 1, device=device)

        # verify: the main decoder scores the last accepted token and every draft in one pass;
        # logits only where the round can end: each active row's drafts and the position after them
        width = int((length - main_cached)[active].max()) + k
        window, positions = _window(tokens, (length + k - width).clamp(min=0), width)
        hidden = features(main.decoder, window, positions)[:, -(k + 1):]
        stats.main_forwards += 1
        scored = (steps <= round_drafts[:, None]) & active[:, None]
        flat = scored.view(-1)
        logits = rules(main.decoder.logits(hidden[scored]), tokens.repeat_interleave(k + 1, dim=0)[flat],
                       (length[:, None] + steps).view(-1)[flat])
        drafts = tokens.gather(1, length[:, None] + steps[:k])
        eligible = steps[:k] < round_drafts[:, None]

        if generator is None:
            target = torch.full((batch, k + 1), special.eot, device=device)
            target[scored] = logits.argmax(dim=-1)
            n_accepted, next_token = accept_greedy(target, drafts, eligible)
        else:
            p = torch.zeros(batch, k + 1, logits.shape[-1], device=device)
            p[scored] = torch.softmax(logits / options.temperature, dim=-1)
            p[~scored, special.eot] = 1.0  # rows that are done: any distribution, never used
            q = torch.stack(draft_probs, dim=1) if k else None
            n_accepted, next_token = accept_sampled(p, q, drafts, eligible, generator)

        tokens[rows, length + n_accepted] = next_token
        new = n_accepted + 1
        span = tokens.gather(1, length[:, None] + steps)
        eot = (span == special.eot) & (steps < new[:, None])
        ended = eot.any(dim=1)
        new = torch.where(ended, eot.long().argmax(dim=1) + 1, new)
        new = torch.minimum(new, max_length - length)
        new = torch.where(active, new, 0)

        # drafts past a row's end (EOT or max length) are not counted as drafted
        finishing = ended | (length + new >= max_length)
        drafted = torch.where(finishing, torch.minimum(round_drafts, new), round_drafts) * active
        accepted = torch.minimum(n_accepted, drafted)
        counts += torch.stack([drafted, accepted, new, active.long(), k * active.long()], dim=1)
        by_position[0, :, :k] += drafted[:, None] > steps[:k]
        by_position[1, :, :k] += accepted[:, None] > steps[:k]

        main_cached = torch.where(active, length + n_accepted, main_cached)
        assistant_cached = torch.minimum(assistant_cached, length + n_accepted)
        length = length + new
        hit_max |= active & ~ended & (length >= max_length)
        done |= ended | (length >= max_length)
        if options.adaptive_draft and assistant is not None:
            grown = torch.where(n_accepted >= round_drafts, draft_length + 2, (draft_length - 1).clamp(min=1))
            draft_length = torch.where(active & drafting, grown.clamp(max=max_draft), draft_length)

    _sync(device)
    stats.decoding_seconds += time.perf_counter() - start_time
    for cache, k, v, attention, states in full_rows:
        cache.k, cache.v, attention.cross_kv = k, v, states

    results = []
    for row, (row_tokens, (drafted, accepted, generated, forwards, drafts), position_counts) in enumerate(
        zip(tokens[:, prompt_length:].tolist(), counts.tolist(), by_position.transpose(0, 1).tolist())
    ):
        row_tokens = row_tokens[: int(length[row]) - prompt_length]
        if row_tokens and row_tokens[-1] == special.eot:
            row_tokens = row_tokens[:-1]
        row_stats = DecodingStats(
            windows=1, drafted=drafted, accepted=accepted, generated=generated, main_forwards=forwards,
            row_forwards=forwards, assistant_forwards=drafts,
            encoder_seconds=stats.encoder_seconds / batch, decoding_seconds=stats.decoding_seconds / batch,
            drafted_by_position=position_counts[0], accepted_by_position=position_counts[1],
        )
        results.append(WindowResult(row_tokens, languages[row], bool(hit_max[row]), row_stats))
        stats.add(replace(row_stats, windows=0, main_forwards=0, assistant_forwards=0,
                          encoder_seconds=0.0, decoding_seconds=0.0))
    return results, stats
