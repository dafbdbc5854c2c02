"""`whisper-spec`: transcribe with speculative decoding, distil assistants, manage the embedded models.

Each command imports what it needs when it runs, so --help and --version start fast.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from whisper_spec.cli.parser import PROG, build_parser
from whisper_spec.options import BenchOptions, ChunkingOptions, DecodingOptions, DistillOptions


def _error(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr)


def _pick_device(device: str | None, dtype: str | None, int8: bool = False) -> tuple[str, str]:
    import torch

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    # the CPU int8 kernel is fast with bfloat16 activations, slow with float32 ones
    dtype = dtype or ("float16" if device.startswith("cuda") else ("bfloat16" if int8 else "float32"))
    return device, dtype


def load_from_args(args, note):
    """The model pair the options name."""
    from whisper_spec.load import load_pair
    from whisper_spec.sources import default_assistant

    assistant = args.assistant
    if assistant is None:
        assistant = default_assistant(args.model)
        if assistant is None:
            note(f"no distilled assistant for {args.model} yet: decoding with the main model alone "
                 "(use --assistant MODEL for speculative decoding)")
    elif assistant.lower() == "none":
        assistant = None
    device, dtype = _pick_device(args.device, args.dtype, args.int8)
    pair = load_pair(args.model, assistant, assistant_encoder=args.assistant_encoder, dtype=dtype, device=device,
                     int8=args.int8)
    if pair.int8_kernel is not None:
        note(f"int8 decoder linears, kernel: {pair.int8_kernel}")
    return pair


def _setup(args):
    """Formats, decoding and chunking options, the model pair and a note printer, from the arguments."""
    from whisper_spec.writers import FORMATS

    formats = args.format or ["txt"]
    formats = list(FORMATS) if "all" in formats else list(dict.fromkeys(formats))
    timestamps = args.timestamps if args.timestamps is not None else any(f in ("srt", "vtt") for f in formats)
    note = (lambda message: None) if args.quiet else (lambda message: print(f"{PROG}: {message}", file=sys.stderr))
    if args.batch_size < 1:
        raise ValueError("--batch-size must be at least 1")
    options = DecodingOptions(
        task=args.task, language=args.language, temperature=args.temperature, timestamps=timestamps,
        draft_tokens=args.draft_tokens, draft_confidence=args.draft_confidence, adaptive_draft=args.adaptive_draft,
        seed=args.seed,
    )
    chunking = ChunkingOptions(chunk_length=args.chunk_length, overlap=args.overlap)
    pair = load_from_args(args, note)
    pair.main.special.check_language(args.language)
    return formats, options, chunking, pair, note


def cmd_transcribe(args) -> int:
    from whisper_spec.jobs import audio_progress
    from whisper_spec.pipeline import Failure, transcribe
    from whisper_spec.writers import render, write_outputs

    formats, options, chunking, pair, note = _setup(args)
    failures = 0
    bar = audio_progress([Path(f) for f in args.files], enabled=not args.quiet)
    results = transcribe(pair, args.files, options, batch_size=args.batch_size, chunking=chunking,
                         on_window=lambda seconds: bar.update(round(seconds)))
    for result in results:
        if isinstance(result, Failure):
            failures += 1
            bar.write(f"{PROG}: error: {result.error}", file=sys.stderr)
            continue
        if args.output_dir is not None:
            for path in write_outputs(result, args.output_dir, formats):
                note(f"wrote {path}")
            continue
        for fmt in formats:
            text = render(result, fmt)
            if fmt == "txt" and len(args.files) > 1:
                text = f"{result.path}: {text}"
            sys.stdout.write(text)
        sys.stdout.flush()
    bar.close()
    return 1 if failures else 0


def cmd_batch(args) -> int:
    from whisper_spec.batch import run_batch
    from whisper_spec.jobs import collect_jobs

    jobs = collect_jobs(args.input)
    formats, options, chunking, pair, note = _setup(args)
    summary = run_batch(pair, jobs, args.output_dir, formats, options, batch_size=args.batch_size,
                        chunking=chunking, progress=not args.quiet)
    rtf = summary["real_time_factor"]
    acceptance = summary["acceptance"]
    print(f"{summary['done']} done, {summary['failed']} failed, {summary['skipped']} skipped; "
          f"{summary['audio_hours'] * 3600:.1f} s of audio in {summary['wall_seconds']:.1f} s"
          + (f" (real-time factor {rtf:.3f})" if rtf else "")
          + (f"; acceptance {acceptance:.2f}" if acceptance is not None else ""), file=sys.stderr)
    if summary["failed"]:
        print(f"failures: {summary['failures_file']}", file=sys.stderr)
    return 1 if summary["failed"] else 0


def cmd_distill(args) -> int:
    import shlex

    import torch

    from whisper_spec.distill.train import distill
    from whisper_spec.load import load_pair

    if args.threads:
        torch.set_num_threads(args.threads)
    init_layers = tuple(int(i) for i in args.init_layers.split(",")) if args.init_layers else None
    options = DistillOptions(
        layers=len(init_layers) if init_layers else args.layers, init_layers=init_layers,
        draft_vocab=args.draft_vocab, steps=args.steps, batch_size=args.batch_size,
        learning_rate=args.learning_rate, warmup_steps=args.warmup_steps, held_out=args.held_out,
        eval_every=args.eval_every, seed=args.seed, join=args.join, augment=args.augment,
    )
    device, _ = _pick_device(args.device, "float32")
    main_pair = load_pair(args.main, dtype="float32", device=device)
    command = shlex.join([PROG, *sys.argv[1:]])
    summary = distill(main_pair, args.audio, args.output, options, cache=args.cache_dir,
                      resume=args.resume, command=command)
    acceptance = summary["held_out_acceptance"]
    print(f"wrote {args.output}: {summary['training_data']['windows']} windows, "
          f"labels {summary['label_seconds']:.0f} s, training {summary['train_seconds']:.0f} s"
          + (f", held-out acceptance {acceptance:.3f}" if acceptance is not None else ""), file=sys.stderr)
    return 0


def cmd_export(args) -> int:
    from whisper_spec.export import save_model
    from whisper_spec.load import as_dtype, load_pair
    from whisper_spec.pair import is_distilled_assistant

    if not is_distilled_assistant(Path(args.assistant)):
        raise ValueError(f"{args.assistant}: not a distilled assistant directory (no assistant.json)")
    pair = load_pair(args.main, args.assistant, assistant_int8=False)  # its stored weights
    path = save_model(pair.assistant, args.output, decoder_only=True, dtype=as_dtype(args.dtype))
    print(f"wrote {path} (WhisperForCausalLM, {pair.assistant.dims.n_text_layer} layers)", file=sys.stderr)
    return 0


def cmd_bench(args) -> int:
    from whisper_spec.bench.data import load_utterances
    from whisper_spec.bench.harness import run_bench
    from whisper_spec.bench.report import markdown_table, write_outputs
    from whisper_spec.load import load_pair

    note = (lambda message: None) if args.quiet else (lambda message: print(f"{PROG}: {message}", file=sys.stderr))
    batch_sizes = tuple(int(b) for b in args.batch_sizes.split(","))
    peers = () if args.peers == "none" else tuple(p for p in args.peers.split(",") if p)
    options = BenchOptions(batch_sizes=batch_sizes, int8=args.int8, peers=peers, repeats=args.repeats,
                           draft_tokens=args.draft_tokens, draft_confidence=args.draft_confidence, task=args.task)
    sets = args.sets.split(",") if args.sets else None
    utterances = load_utterances(args.source, config=args.config, split=args.split, sets=sets, limit=args.limit,
                                 language=args.language)
    if not utterances:
        raise ValueError(f"{args.source}: no utterances")
    args.int8 = False  # the float pair; int8 configurations get their own
    pair = load_from_args(args, note)
    int8_pair = None
    if options.int8:
        _, int8_dtype = _pick_device(str(pair.device), args.dtype, int8=True)
        int8_pair = load_pair(args.model, pair.assistant.name if pair.assistant else None, dtype=int8_dtype,
                              device=pair.device, int8=True, assistant_encoder=args.assistant_encoder)
    data = {"source": args.source, "config": args.config, "split": args.split, "sets": sets, "limit": args.limit}
    report = run_bench(pair, utterances, options, model=args.model, int8_pair=int8_pair, data=data,
                       progress=not args.quiet)
    for path in write_outputs(report, args.output_dir):
        note(f"wrote {path}")
    print(markdown_table(report))
    return 0 if report["check"]["passed"] else 1


def cmd_quantize(args) -> int:
    from whisper_spec.export import save_int8
    from whisper_spec.load import as_dtype

    path = save_int8(args.model, args.output, dtype=as_dtype(args.dtype))
    size = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
    print(f"wrote {path} ({size / 2**20:.1f} MiB)", file=sys.stderr)
    return 0


def cmd_models(args) -> int:
    from whisper_spec.sources import EMBEDDED_MODELS, ModelNotFound, default_assistant, list_models, prepare_embedded

    if args.prepare is not None:
        for name in args.prepare or list(EMBEDDED_MODELS):
            if name not in EMBEDDED_MODELS:
                raise ValueError(f"{name}: not an embedded model (known: {', '.join(EMBEDDED_MODELS)})")
            try:
                print(f"{name}: {prepare_embedded(name)}", file=sys.stderr)
            except ModelNotFound as error:
                _error(str(error))
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


COMMANDS = {"transcribe": cmd_transcribe, "batch": cmd_batch, "distill": cmd_distill, "export": cmd_export,
            "bench": cmd_bench, "quantize": cmd_quantize, "models": cmd_models}


def main(argv: list[str] | None = None) -> int:
    """Run a command; bad input (a file, a model, an option) ends it with one line and exit 2."""
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    except (ValueError, FileNotFoundError) as error:  # AudioError, IncompatiblePair, ModelNotFound among them
        _error(str(error))
        return 2


if __name__ == "__main__":
    sys.exit(main())
