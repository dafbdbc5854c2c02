"""The commands around transcription: distil an assistant, export and quantize models, bench, list models."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from whisper_spec.cli.arguments import PROG
from whisper_spec.cli.common import load_from_args, note_printer, options_from, pick_device, print_error

from whisper_spec.options import (
    BenchOptions,
    DistillOptions,
)


def cmd_distill(args) -> int:
    import shlex

    from whisper_spec.distill.train import distill
    from whisper_spec.models.load import load_pair

    init_layers = tuple(int(i) for i in args.init_layers.split(",")) if args.init_layers else None
    head_features = tuple(int(i) for i in args.head_features.split(",")) if args.head_features else ()
    options = options_from(
        DistillOptions, layers=len(init_layers) if init_layers else args.layers, init_layers=init_layers,
        init_assistant=str(args.init_assistant) if args.init_assistant else None, head=args.head,
        hidden_weight=args.hidden_weight, head_features=head_features, head_test_depth=args.head_test_depth,
        draft_vocab=args.draft_vocab, steps=args.steps, batch_size=args.batch_size,
        learning_rate=args.learning_rate, warmup_steps=args.warmup_steps, held_out=args.held_out,
        eval_every=args.eval_every, seed=args.seed, join=args.join, augment=args.augment, shifts=args.shifts,
        balance=args.balance, tasks=tuple(args.tasks.split(",")),
    )
    device, _, _ = pick_device(args.device, "float32")
    # float encoder states, as the shipped assistants were trained on (their cards' commands)
    main_pair = load_pair(args.main, None, dtype="float32", device=device, int8=False, encoder_precision="float32",
                          threads=args.threads)
    command = shlex.join([PROG, *sys.argv[1:]])
    summary = distill(main_pair, args.audio, args.output, options, cache=args.cache_dir,
                      resume=args.resume, command=command)
    acceptance = summary["held_out_acceptance"]
    print(f"wrote {args.output}: {summary['training_data']['windows']} windows, "
          f"labels {summary['label_seconds']:.0f} s, training {summary['train_seconds']:.0f} s"
          + (f", held-out acceptance {acceptance:.3f}" if acceptance is not None else ""), file=sys.stderr)
    return 0


def cmd_export(args) -> int:
    from whisper_spec.models.export import save_model
    from whisper_spec.models.load import as_dtype, load_pair
    from whisper_spec.models.pair import is_distilled_assistant

    if not is_distilled_assistant(Path(args.assistant)):
        raise ValueError(f"{args.assistant}: not a distilled assistant directory (no assistant.json)")
    pair = load_pair(args.main, args.assistant, int8=False, assistant_int8=False)  # its stored weights
    if pair.assistant.is_draft_head:
        raise ValueError(f"{args.assistant}: a draft head reads the main decoder's hidden states; "
                         "transformers' assisted generation cannot run it")
    path = save_model(pair.assistant, args.output, decoder_only=True, dtype=as_dtype(args.dtype))
    print(f"wrote {path} (WhisperForCausalLM, {pair.assistant.dims.n_text_layer} layers)", file=sys.stderr)
    return 0


def cmd_bench(args) -> int:
    from whisper_spec.bench.data import load_utterances
    from whisper_spec.bench.harness import run_bench
    from whisper_spec.bench.report import markdown_table, write_outputs
    from whisper_spec.models.load import load_pair

    note = note_printer(args.quiet)
    batch_sizes = tuple(int(b) for b in args.batch_sizes.split(","))
    peers = () if args.peers == "none" else tuple(p for p in args.peers.split(",") if p)
    # int8 configurations beside the float ones where asked, or where int8 decoders are the default
    _, int8_dtype, with_int8 = pick_device(args.device, args.dtype, args.int8)
    options = options_from(BenchOptions, batch_sizes=batch_sizes, int8=with_int8, peers=peers, repeats=args.repeats,
                           draft_tokens=args.draft_tokens, draft_confidence=args.draft_confidence,
                           speculation=args.speculation, task=args.task, prompt=args.initial_prompt, cuda_graphs=args.cuda_graphs,
                           compile=args.compile)
    sets = args.sets.split(",") if args.sets else None
    utterances = load_utterances(args.source, config=args.config, split=args.split, sets=sets, limit=args.limit,
                                 language=args.language)
    if not utterances:
        raise ValueError(f"{args.source}: no utterances")
    args.int8 = False  # the float pair; int8 configurations get their own
    pair = load_from_args(args, note)
    int8_pair = None
    if options.int8:
        int8_pair = load_pair(args.model, pair.assistant.name if pair.assistant else None, dtype=int8_dtype,
                              device=pair.device, int8=True, assistant_encoder=args.assistant_encoder,
                              encoder_precision=args.encoder_precision)
    data = {"source": args.source, "config": args.config, "split": args.split, "sets": sets, "limit": args.limit}
    report = run_bench(pair, utterances, options, model=args.model, int8_pair=int8_pair, data=data,
                       progress=not args.quiet)
    for path in write_outputs(report, args.output_dir):
        note(f"wrote {path}")
    print(markdown_table(report))
    return 0 if report["check"]["passed"] else 1


def cmd_quantize(args) -> int:
    from whisper_spec.models.export import save_int8
    from whisper_spec.models.load import as_dtype

    path = save_int8(args.model, args.output, dtype=as_dtype(args.dtype))
    size = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
    print(f"wrote {path} ({size / 2**20:.1f} MiB)", file=sys.stderr)
    return 0


def cmd_models(args) -> int:
    from whisper_spec.models.sources import (
        EMBEDDED_MODELS,
        ModelNotFound,
        default_assistant,
        list_models,
        prepare_embedded,
    )

    if args.prepare is not None:
        for name in args.prepare or list(EMBEDDED_MODELS):
            if name not in EMBEDDED_MODELS:
                raise ValueError(f"{name}: not an embedded model (known: {', '.join(EMBEDDED_MODELS)})")
            try:
                print(f"{name}: {prepare_embedded(name)}", file=sys.stderr)
            except ModelNotFound as error:
                print_error(str(error))
                return 1
    rows = list_models()
    for row in rows:
        shipped = default_assistant(row["name"])
        row["default_assistant"] = str(shipped) if shipped else None
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for row in rows:
        state = "prepared" if row["prepared"] else ("installed" if row["installed"] else "missing")
        assistant = "distilled" if row["default_assistant"] else "none"
        print(f"{row['name']:<8} {state:<9} assistant: {assistant:<10} {row['description']}")
        if row["prepared"]:
            print(f"{'':<8} {row['path']}")
    return 0
