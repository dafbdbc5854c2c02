"""The speculative round's pieces, each on its own: the acceptance rules (greedy and sampling), advance
(append, end, roll back, count, adapt), the counter-based uniform numbers sampling draws at, and the
logit rule that holds a row's text open to its end floor."""

import torch
from conftest import RANDOM_DIMS, perturbed_decoder, random_model

from whisper_spec.decode.caches import BatchCaches
from whisper_spec.decode.context import initial_state
from whisper_spec.decode.decoding import Limits, RowRequest, _context
from whisper_spec.decode.rules import LogitRules
from whisper_spec.decode.sampling import position_uniforms, row_seeds, sample_tokens
from whisper_spec.decode.speculative import accept, accept_greedy, advance
from whisper_spec.models.kept import DecoderKept, Kept
from whisper_spec.models.pair import WhisperPair
from whisper_spec.options import DecodingOptions

CPU = torch.device("cpu")


def test_accept_greedy_keeps_the_agreeing_prefix_and_the_main_models_next_token():
    target = torch.tensor([[5, 6, 7, 8],    # every draft agrees: all three kept, then the main model's 8
                           [5, 9, 7, 8],    # the second disagrees: one kept, then the main model's 9
                           [1, 6, 7, 8],    # the first disagrees: none kept, the main model's 1
                           [5, 6, 7, 8]])   # agrees, but only two drafts are the row's this round
    drafts = torch.tensor([[5, 6, 7], [5, 6, 7], [5, 6, 7], [5, 6, 7]])
    eligible = torch.tensor([[True] * 3, [True] * 3, [True] * 3, [True, True, False]])
    n_accepted, next_token = accept_greedy(target, drafts, eligible)
    assert n_accepted.tolist() == [3, 1, 0, 2]
    assert next_token.tolist() == [8, 9, 1, 7]


def test_accept_greedy_never_keeps_a_draft_after_a_rejected_one():
    target = torch.tensor([[5, 0, 7, 8]])
    n_accepted, next_token = accept_greedy(target, torch.tensor([[5, 6, 7]]), torch.ones(1, 3, dtype=torch.bool))
    assert n_accepted.tolist() == [1] and next_token.tolist() == [0]


def test_uniform_numbers_depend_on_seed_and_position_only():
    seeds = row_seeds(0, [3, 4], CPU)
    positions = torch.arange(6)
    u = position_uniforms(seeds[:, None].expand(-1, 6), positions.expand(2, -1))
    assert ((u > 0) & (u < 1)).all()
    assert not torch.equal(u[0], u[1])  # another window seed, other numbers
    # the same (seed, position) gives the same number in any shape of call
    assert torch.equal(position_uniforms(seeds[1:], positions[4:5]), u[1, 4:5])
    assert torch.equal(row_seeds(0, [3, 4], CPU), seeds) and not torch.equal(row_seeds(1, [3, 4], CPU), seeds)


def test_sample_tokens_inverts_the_cumulative_distribution():
    logits = torch.log(torch.tensor([[0.2, 0.5, 0.3]])).expand(5, -1)
    uniforms = torch.tensor([0.1, 0.2001, 0.6, 0.71, 0.99])
    assert sample_tokens(logits, 1.0, uniforms).tolist() == [0, 1, 1, 2, 2]
    # a token of probability 0 is never drawn, even at the edges
    never_middle = torch.tensor([[0.0, float("-inf"), 0.0]]).expand(2, -1)
    assert sample_tokens(never_middle, 1.0, torch.tensor([0.5, 0.5000001])).tolist() == [0, 2]


def _round(batch=3, temperature=0.0, max_length=40, **options):
    main = random_model(0)
    pair = WhisperPair(main, perturbed_decoder(main, 0.05, seed=1), CPU, torch.float32)
    options = DecodingOptions(speculation="on", language="en", draft_confidence=0, **options)
    n_ctx = max_length + options.max_draft_tokens + 1
    languages = ["en"] * batch
    states = torch.zeros(batch, main.dims.n_audio_ctx, main.dims.d_model)
    caches = BatchCaches([(model.decoder, model.decoder.cross_states(states)) for model in (main, pair.assistant)],
                         n_ctx, row_invariant=True)
    context = _context(pair, pair.assistant, options, temperature, [RowRequest("en")] * batch, languages, caches,
                       Limits(n_ctx, max_length), graphs=False, hinted=False)
    return context, initial_state(context, languages)


def test_advance_appends_ends_rolls_back_and_counts():
    context, state = _round(max_length=12)
    eot, start = context.main.special.eot, context.prompt_length
    k = 3
    state.tokens[:, start : start + k] = torch.tensor([[10, 11, 12], [10, eot, 12], [10, 11, 12]])
    state.assistant_cached[:] = start + k
    round_drafts = torch.full((3,), k)
    # row 0 keeps two drafts and the main model's 20; row 1 keeps its drafted EOT; row 2 keeps all
    # three and 21, past max_length 12 (prompt of 4: room for 8 tokens, so it ends there too)
    state.length[2] = 10
    state.tokens[2, 10:13] = torch.tensor([10, 11, 12])
    n_accepted = torch.tensor([2, 3, 3])
    next_token = torch.tensor([20, 30, 21])
    before = state.length.clone()
    advance(context, state, k, round_drafts, n_accepted, next_token)
    assert state.length.tolist() == [start + 3, start + 2, 12]
    assert state.tokens[0, start : start + 3].tolist() == [10, 11, 20]
    assert state.done.tolist() == [False, True, True]
    assert state.hit_max.tolist() == [False, False, True]
    # caches roll back to what was kept: the main model's to the last kept draft, the assistant's too
    assert state.main_cached.tolist() == (before + n_accepted).tolist()
    assert state.assistant_cached.tolist() == [start + 2, start + 3, start + 3]
    drafted, accepted, generated = state.counts[:, 0], state.counts[:, 1], state.counts[:, 2]
    # drafts past a row's end (its EOT, or max_length) are not counted as drafted
    assert drafted.tolist() == [3, 2, 2] and accepted.tolist() == [2, 2, 2] and generated.tolist() == [3, 2, 2]
    assert state.by_position[0, 0].tolist() == [1, 1, 1] + [0] * (context.max_draft - 3)
    # a finished row takes no part in later rounds: nothing appended, nothing counted
    counts = state.counts.clone()
    advance(context, state, k, round_drafts, n_accepted, next_token)
    assert state.length[1:].tolist() == [start + 2, 12] and torch.equal(state.counts[1:], counts[1:])


def test_adaptive_draft_length_grows_after_full_acceptance_and_shrinks_after_a_rejection():
    context, state = _round(adaptive_draft=True, draft_tokens=2, max_draft_tokens=5)
    state.tokens[:, context.prompt_length : context.prompt_length + 5] = 10  # drafts, none of them EOT
    state.draft_length[:] = torch.tensor([2, 2, 4])
    round_drafts = state.draft_length.clone()
    advance(context, state, 4, round_drafts, torch.tensor([2, 0, 4]), torch.tensor([20, 21, 22]))
    assert state.draft_length.tolist() == [4, 1, 5]  # +2, -1, +2 capped at max_draft_tokens


def test_sampling_accepts_a_draft_where_it_is_the_main_models_own_draw():
    context, state = _round(batch=2, temperature=1.0)
    start, k, vocab = context.prompt_length, 2, context.main.dims.n_vocab
    # the main model's distributions: certain of 7 at the first position, of 9 at the second and third
    logits = torch.full((2, k + 1, vocab), -30.0)
    logits[:, 0, 7] = logits[:, 1, 9] = logits[:, 2, 9] = 30.0
    state.tokens[:, start : start + k] = torch.tensor([[7, 9], [7, 8]])
    scored = torch.ones(2, k + 1, dtype=torch.bool)
    n_accepted, next_token = accept(context, state, k, torch.full((2,), k), logits.flatten(0, 1), scored)
    assert n_accepted.tolist() == [2, 1] and next_token.tolist() == [9, 9]


def test_a_rows_text_does_not_end_before_its_timestamps_reach_its_end_floor():
    special = random_model(0).special
    ts = special.timestamp_begin
    rules = LogitRules(special, RANDOM_DIMS.n_vocab, True, CPU)
    # after <|0.10|> and a word the text may end: only where the floor is not past <|0.10|>
    row = [special.sot, special.lang_to_id["en"], special.transcribe, ts + 5, 7]
    tokens = torch.tensor([row + [special.eot] * 3] * 3)
    floors = torch.tensor([ts, ts + 5, ts + 6])
    text_likelier = torch.where(torch.arange(RANDOM_DIMS.n_vocab) < ts, 5.0, 0.0).expand(3, -1)
    logits = rules(text_likelier, tokens, torch.full((3,), len(row)), floors, torch.full((3,), 3))
    assert logits[:, special.eot].isfinite().tolist() == [True, True, False]
    # nothing else changes: the row held open may go on in words or close its segment
    assert torch.equal(logits[2].isfinite(), logits[0].isfinite().index_fill(0, torch.tensor([special.eot]), False))


def _rules_one_by_one(rules: LogitRules, logits, tokens, lengths, end_floors, begins):
    """Whisper's logit rules as openai-whisper and transformers apply them, one masked_fill a rule:
    the reference LogitRules' single mask a step must equal."""
    special, vocab, ninf = rules.special, rules.vocab, float("-inf")
    ts_begin = special.timestamp_begin
    is_ts_vocab = vocab >= ts_begin
    logits = logits.masked_fill(torch.isin(vocab, torch.tensor(special.suppress)), ninf)
    at_begin = (lengths == begins)[:, None]
    logits = logits.masked_fill(at_begin & torch.isin(vocab, torch.tensor(special.begin_suppress)), ninf)
    if not rules.timestamps:
        return logits
    logits = logits.masked_fill(vocab == special.no_timestamps, ninf)
    for row in range(len(tokens)):
        sampled = tokens[row, begins[row] : lengths[row]].tolist()
        last_ts = len(sampled) >= 1 and sampled[-1] >= ts_begin
        penultimate_ts = len(sampled) < 2 or sampled[-2] >= ts_begin
        if last_ts:
            logits[row] = logits[row].masked_fill(is_ts_vocab if penultimate_ts else vocab < special.eot, ninf)
        stamps = [t for t in sampled if t >= ts_begin]
        if stamps:
            lowest = stamps[-1] if last_ts and not penultimate_ts else stamps[-1] + 1
            logits[row] = logits[row].masked_fill(is_ts_vocab & (vocab < lowest), ninf)
        if (stamps[-1] if stamps else ts_begin) < end_floors[row]:
            logits[row] = logits[row].masked_fill(vocab == special.eot, ninf)
    logits = logits.masked_fill(at_begin & ~is_ts_vocab, ninf)
    logits = logits.masked_fill(at_begin & (vocab > ts_begin + special.max_initial_timestamp_index), ninf)
    logprobs = torch.log_softmax(logits, dim=-1)
    ts_mass = logprobs[:, rules.first_timestamp:].logsumexp(dim=-1)
    best_text = logprobs[:, : rules.first_timestamp].max(dim=-1).values
    return logits.masked_fill((ts_mass > best_text)[:, None] & ~is_ts_vocab, ninf)


def test_logit_rules_mask_as_whisper_rule_by_rule():
    """Random rows of text and timestamps at every length, prompts of several lengths, with and without
    timestamps, on the whole vocabulary and on a draft vocabulary: the logits equal the rules applied
    one by one, bit for bit."""
    special = random_model(0).special
    ts, n_vocab, ctx = special.timestamp_begin, RANDOM_DIMS.n_vocab, 12
    generator = torch.Generator().manual_seed(0)
    for vocab in (None, torch.cat([torch.arange(0, 20), torch.arange(special.eot, n_vocab)])):
        columns = n_vocab if vocab is None else len(vocab)
        for timestamps in (True, False):
            rules = LogitRules(special, n_vocab, timestamps, CPU, vocab)
            for _ in range(20):
                n = 16
                text = torch.randint(0, special.eot, (n, ctx), generator=generator)
                stamps = torch.randint(ts, n_vocab, (n, ctx), generator=generator).sort(dim=1).values
                tokens = torch.where(torch.rand(n, ctx, generator=generator) < 0.4, stamps, text)
                begins = torch.randint(2, 6, (n,), generator=generator)
                lengths = begins + torch.randint(0, ctx - 4, (n,), generator=generator)
                floors = torch.randint(ts, ts + 12, (n,), generator=generator)
                # the timestamps' total beats every text token in some rows and not in others
                logits = torch.randn(n, columns, generator=generator) * 3
                logits[: n // 2, -(n_vocab - ts):] += 2.0
                assert torch.equal(rules(logits, tokens, lengths, floors, begins),
                                   _rules_one_by_one(rules, logits, tokens, lengths, floors, begins))


def test_logit_rules_are_made_once_per_model_and_vocabulary():
    """Every pass asks for its rules (decoding._context) from the main decoder's store: the same
    arguments get the same rules object, other arguments (timestamps, a draft vocabulary) their own,
    the least recently used are dropped past DecoderKept.RULES, and another decoder's store has its own."""
    model = random_model(0)
    special, store = model.special, model.decoder.kept.rules
    first = LogitRules.kept(store, special, RANDOM_DIMS.n_vocab, True, CPU)
    assert LogitRules.kept(store, special, RANDOM_DIMS.n_vocab, True, CPU) is first
    assert LogitRules.kept(random_model(1).decoder.kept.rules, special, RANDOM_DIMS.n_vocab, True, CPU) is not first
    vocab = torch.arange(special.timestamp_begin - 20, RANDOM_DIMS.n_vocab)
    others = [LogitRules.kept(store, special, RANDOM_DIMS.n_vocab, False, CPU),
              LogitRules.kept(store, special, RANDOM_DIMS.n_vocab, True, CPU, vocab=vocab)]
    assert len({id(r) for r in [first, *others]}) == 3
    assert others[1].vocab is vocab and others[0].timestamps is False
    for length in range(DecoderKept.RULES):
        LogitRules.kept(store, special, RANDOM_DIMS.n_vocab, True, CPU, vocab=vocab[length:])
    assert LogitRules.kept(store, special, RANDOM_DIMS.n_vocab, True, CPU) is not first


def test_kept_drops_the_least_recently_used():
    """The store behind kept caches, rules and round graphs: an entry used again outlives one
    kept later and not used since, and make() runs only where an entry is missing."""
    kept, made = Kept(2), []
    for key in "ab":
        kept.get(key, lambda key=key: made.append(key) or key.upper())
    assert kept.recall("a") == "A" and kept.newest() == "a"
    assert kept.get("c", lambda: "C") == "C"
    assert "b" not in kept and kept.recall("b") is None and len(kept) == 2
    assert kept.get("a", lambda: "again") == "A" and made == ["a", "b"]


def test_finished_rows_leave_the_batch_without_touching_its_caches():
    """BatchCaches.keep: the rows still decoding, in order, with their own states and caches; the
    batch's cross states (read again by a later temperature and word timing) and the kept
    self-attention caches stay whole; after the first narrowing the rows move within its copies."""
    main = random_model(0)
    pair = WhisperPair(main, perturbed_decoder(main, 0.05, seed=1), CPU, torch.float32)
    torch.manual_seed(0)
    decoders = [main.decoder, pair.assistant.decoder]
    cross = [decoder.cross_states(torch.randn(4, main.dims.n_audio_ctx, main.dims.d_model)) for decoder in decoders]
    caches = BatchCaches(list(zip(decoders, cross)), 24, row_invariant=True)
    for decoder_caches in (caches.main, caches.assistant):
        for cache in decoder_caches.self_attention:
            cache.k.normal_(), cache.v.normal_()
    originals = [t for c in (caches.main, caches.assistant) for t in c.tensors()]  # kept caches, then cross states
    whole = [t.clone() for t in originals]
    alive = torch.arange(4)
    for active, in_place in ((torch.tensor([True, False, True, True]), False),
                             (torch.tensor([False, False, True, True]), True),
                             (torch.tensor([False, False, True, False]), True)):
        before = [t.data_ptr() for c in (caches.main, caches.assistant) for t in c.tensors()]
        caches.keep(active)
        alive = alive[active[alive]]
        narrowed = [t for c in (caches.main, caches.assistant) for t in c.tensors()]
        assert caches.alive.tolist() == alive.tolist()
        assert all(torch.equal(t, full[alive]) for t, full in zip(narrowed, whole))
        assert ([t.data_ptr() for t in narrowed] == before) == in_place
    assert all(torch.equal(t, full) for t, full in zip(originals, whole))
