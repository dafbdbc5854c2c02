"""`whisper-spec`: transcribe with speculative decoding, distil assistants, manage the embedded models.

Each command imports what it needs when it runs, so --help and --version start fast.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from dataclasses import replace
from pathlib import Path

from whisper_spec.cli.parser import PROG, build_parser

from whisper_spec.options import (
    BenchOptions,
    ChunkingOptions,
    DecodingOptions,
    DistillOptions,
    VadOptions,
    temperature_schedule,
)


def _error(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr)


def _notes(quiet: bool):
    """What prints a command's notes on stderr, one line each; nothing with --quiet."""
    return (lambda message: None) if quiet else (lambda message: print(f"{PROG}: {message}", file=sys.stderr))


def _pick_device(device: str | None, dtype: str | None, int8: bool | None = False) -> tuple[str, str, bool]:
    """Device, dtype and int8 decoders from the flags; None: the device's default (platform.default_precision)."""
    import torch

    from whisper_spec.models.platform import default_device, default_precision

    device = device or str(default_device())
    int8, dtype = default_precision(torch.device(device), int8, dtype)
    return device, dtype, int8


def _options(cls, **values):
    """cls(**values), its errors naming the command-line flags rather than the fields."""
    try:
        return cls(**values)
    except ValueError as error:
        message = str(error)
        for field in sorted(values, key=len, reverse=True):
            message = re.sub(rf"(?<![-\w]){field}\b", "--" + field.replace("_", "-"), message)
        raise ValueError(message) from None


def pair_args(args) -> dict:
    """load_pair's arguments for the model pair the options name: the model's shipped assistant
    unless --assistant says otherwise."""
    from whisper_spec.models.load import DEFAULT_ASSISTANT

    assistant = DEFAULT_ASSISTANT if args.assistant is None else args.assistant
    if str(assistant).lower() == "none":
        assistant = None
    device, dtype, int8 = _pick_device(args.device, args.dtype, args.int8)
    return dict(main=args.model, assistant=assistant, assistant_encoder=args.assistant_encoder, dtype=dtype,
                device=device, int8=int8, encoder_precision=args.encoder_precision)


def load_from_args(args, note):
    """The model pair the options name (pair_args), loaded."""
    from whisper_spec.models.load import DEFAULT_ASSISTANT, load_pair

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if args.threads and cores and args.threads > cores:
        note(f"--threads {args.threads}: this process may use {cores} cores; more threads than cores slow torch's "
             "kernels (docs/usage.md, CPU threads)")
    spec = pair_args(args)
    pair = load_pair(**spec, threads=args.threads)
    if spec["assistant"] == DEFAULT_ASSISTANT and pair.assistant is None:
        note(f"no distilled assistant for {args.model} yet: decoding with the main model alone "
             "(use --assistant MODEL for speculative decoding)")
    if args.int8 and pair.int8_kernel is not None:  # asked for: which kernel runs it (the default's is the fused one)
        note(f"int8 decoder linears, kernel: {pair.int8_kernel}")
    return pair


def _formats(args) -> list[str]:
    from whisper_spec.options import OUTPUT_FORMATS

    formats = args.format or ["txt"]
    return list(OUTPUT_FORMATS) if "all" in formats else list(dict.fromkeys(formats))


def _temperatures(args) -> tuple[float, ...]:
    """--temperature's list, or its one value and the fallbacks --temperature-increment-on-fallback adds."""
    if len(args.temperature) > 1:
        return args.temperature
    return temperature_schedule(args.temperature[0], args.temperature_increment_on_fallback)


def _setup(args, formats: list[str], load: bool = True):
    """Decoding, chunking and subtitle options, checked, then the model pair (None unless load) and a
    note printer."""
    from whisper_spec.options import SubtitleOptions
    from whisper_spec.outputs.writers import SUBTITLES, TIMED

    timestamps = args.timestamps if args.timestamps is not None else any(f in TIMED for f in formats)
    note = _notes(args.quiet)
    layout = _options(SubtitleOptions, max_words_per_line=args.max_words_per_line, max_line_width=args.max_line_width,
                      max_line_count=args.max_line_count, highlight_words=args.highlight_words)
    # --language de,fr,en: detect among these
    named = [language.strip() for language in (args.language or "").split(",") if language.strip()]
    language, candidates = (named[0], None) if len(named) == 1 else (None, tuple(named) or None)
    options = _options(
        DecodingOptions, task=args.task, language=language, temperature=_temperatures(args), timestamps=timestamps,
        draft_tokens=args.draft_tokens, draft_confidence=args.draft_confidence, adaptive_draft=args.adaptive_draft,
        speculation=args.speculation, seed=args.seed, prompt=args.initial_prompt, cuda_graphs=args.cuda_graphs,
        compile=args.compile, word_timestamps=args.word_timestamps or layout.needs_word_times,
        no_speech_threshold=args.no_speech_threshold, logprob_threshold=args.logprob_threshold,
        compression_ratio_threshold=args.compression_ratio_threshold,
    )
    vad = VadOptions(threshold=args.vad_threshold, min_silence=args.vad_min_silence, speech_pad=args.vad_speech_pad,
                     min_speech=args.vad_min_speech)  # its errors already name the --vad-* settings
    chunking = _options(ChunkingOptions, chunk_length=args.chunk_length, vad=args.vad, vad_options=vad)
    if max(options.temperature) > 1:
        note(f"--temperature {','.join(f'{t:g}' for t in options.temperature)}: above 1 sampling is close to uniform "
             "(text barely follows the audio), and the fallbacks stop at 1")
    shaping = [f"--{name.replace('_', '-')}" for name, value in vars(layout).items() if value]
    if shaping and not set(SUBTITLES) & set(formats):
        note(f"{', '.join(shaping)} shape{'s' * (len(shaping) == 1)} srt and vtt cues; the {', '.join(formats)} output has none")
    pair = load_from_args(args, note) if load else None
    try:
        special = pair.main.special if pair is not None else _special_tokens(args.model)
        candidates = tuple(special.language_code(candidate) for candidate in candidates) if candidates else None
        options = replace(options, language=special.language_code(language), language_candidates=candidates)
    except ValueError as error:
        raise ValueError(f"--language: {error}") from None
    return options, chunking, layout, pair, note


def _special_tokens(model: str):
    """The model's special tokens without loading its weights."""
    from whisper_spec.models.sources import resolve_model
    from whisper_spec.models.tokenizer import SpecialTokens

    return SpecialTokens.from_model_dir(resolve_model(model))


def cmd_transcribe(args) -> int:
    from whisper_spec.jobs.inputs import AudioProgress, jobs_of_files
    from whisper_spec.longform.pipeline import Failure, transcribe
    from whisper_spec.outputs.writers import check_output_dir, render, segment_line, write_outputs

    formats = _formats(args)
    if args.output_dir is not None:
        check_output_dir(args.output_dir)
    folder = next((f for f in args.files if f != "-" and Path(f).is_dir()), None)
    if folder is not None:  # the wrong command, not a bad file: a usage problem, before any model loads
        raise ValueError(f"{folder}: is a folder, not an audio file (whisper-spec batch transcribes folders)")
    jobs = jobs_of_files(args.files)
    options, chunking, layout, pair, note = _setup(args, formats)
    failures = 0
    progress = AudioProgress([job.path for job in jobs], enabled=not args.quiet, prog=PROG)
    names = {str(job.path): job.name for job in jobs}
    several = len(jobs) > 1 or len(formats) > 1

    def show(path: str, segments) -> None:
        for segment in segments:
            progress.write(f"{path}: {segment_line(segment)}" if len(jobs) > 1 else segment_line(segment))

    results = transcribe(pair, [job.path for job in jobs], options, batch_size=args.batch_size, chunking=chunking,
                         on_window=progress.advance, on_segments=show if args.verbose else None)
    try:
        for result in results:
            if isinstance(result, Failure):
                failures += 1
                progress.file_done(result.path, failed=True)
                progress.write(f"{PROG}: error: {result.error}")
                continue
            progress.file_done(result.path)
            if args.output_dir is not None:
                try:
                    for path in write_outputs(result, args.output_dir, formats, name=names[result.path],
                                              layout=layout):
                        if not args.quiet:
                            progress.write(f"{PROG}: wrote {path}")
                except OSError as error:
                    failures += 1
                    progress.write(f"{PROG}: error: {result.path}: cannot write its output ({error})")
                continue
            for fmt in formats:
                text = render(result, fmt, layout)
                if several and fmt == "txt" and len(formats) == 1:
                    text = f"{result.path}: {text}"
                elif several:  # which file and format each block is, as head(1) marks files
                    text = f"==> {result.path} ({fmt}) <==\n{text}"
                progress.write(text.rstrip("\n"), file=sys.stdout)
    finally:
        progress.close()
    return 1 if failures else 0


def cmd_batch(args) -> int:
    from whisper_spec.jobs.batch import SUMMARY_FILE, outputs_exist, run_batch
    from whisper_spec.jobs.inputs import AUDIO_SUFFIXES, collect_jobs, passed_over
    from whisper_spec.outputs.writers import check_output_dir

    formats = _formats(args)
    check_output_dir(args.output_dir)
    jobs = collect_jobs(args.input)
    if (others := passed_over(args.input, args.output_dir)) and not args.quiet:
        shown = ", ".join(str(p) for p in others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
        print(f"{PROG}: passed over {len(others)} file{'s' * (len(others) != 1)} not in an audio format read "
              f"({' '.join(sorted(AUDIO_SUFFIXES))}): {shown}", file=sys.stderr)
    if all(outputs_exist(job, args.output_dir, formats) for job in jobs):
        print(f"nothing to do: the outputs of all {len(jobs)} files are in {args.output_dir} "
              f"({SUMMARY_FILE} is the run that wrote them)", file=sys.stderr)
        return 0
    if args.ray is not None:
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            raise ValueError("--ray: Ray is not installed (the [ray] extra: pip install -e '.[ray]')")
    options, chunking, layout, pair, note = _setup(args, formats, load=args.ray is None)
    try:
        if args.ray is not None:
            from whisper_spec.jobs.ray_batch import run_batch_ray
            from whisper_spec.options import RayOptions

            ray_options = _options(RayOptions, address=None if args.ray == "local" else args.ray,
                                   actors=args.ray_actors, threads=args.ray_threads)
            summary = run_batch_ray(pair_args(args), jobs, args.output_dir, formats, options, ray_options=ray_options,
                                    batch_size=args.batch_size, chunking=chunking, progress=not args.quiet,
                                    layout=layout)
        else:
            summary = run_batch(pair, jobs, args.output_dir, formats, options, batch_size=args.batch_size,
                                chunking=chunking, progress=not args.quiet, layout=layout, verbose=args.verbose)
    except KeyboardInterrupt:
        try:
            done = json.loads((args.output_dir / SUMMARY_FILE).read_text())["done"]
        except (OSError, ValueError, KeyError):
            done = 0
        _error(f"interrupted after {done} files; run the same command again to resume (their outputs are kept)")
        return 130
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

    from whisper_spec.distill.train import distill
    from whisper_spec.models.load import load_pair

    init_layers = tuple(int(i) for i in args.init_layers.split(",")) if args.init_layers else None
    head_features = tuple(int(i) for i in args.head_features.split(",")) if args.head_features else ()
    options = _options(
        DistillOptions, layers=len(init_layers) if init_layers else args.layers, init_layers=init_layers,
        init_assistant=str(args.init_assistant) if args.init_assistant else None, head=args.head,
        hidden_weight=args.hidden_weight, head_features=head_features, head_test_depth=args.head_test_depth,
        draft_vocab=args.draft_vocab, steps=args.steps, batch_size=args.batch_size,
        learning_rate=args.learning_rate, warmup_steps=args.warmup_steps, held_out=args.held_out,
        eval_every=args.eval_every, seed=args.seed, join=args.join, augment=args.augment, shifts=args.shifts,
        balance=args.balance, tasks=tuple(args.tasks.split(",")),
    )
    device, _, _ = _pick_device(args.device, "float32")
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

    note = _notes(args.quiet)
    batch_sizes = tuple(int(b) for b in args.batch_sizes.split(","))
    peers = () if args.peers == "none" else tuple(p for p in args.peers.split(",") if p)
    # int8 configurations beside the float ones where asked, or where int8 decoders are the default
    _, int8_dtype, with_int8 = _pick_device(args.device, args.dtype, args.int8)
    options = _options(BenchOptions, batch_sizes=batch_sizes, int8=with_int8, peers=peers, repeats=args.repeats,
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


def cmd_serve(args) -> int:
    """Load the pair, then serve OpenAI's audio API until SIGTERM or Ctrl-C (requests in flight finish)."""
    import ipaddress
    import signal

    from whisper_spec.options import ServerOptions

    try:
        loopback = args.host == "localhost" or ipaddress.ip_address(args.host).is_loopback
    except ValueError:
        raise ValueError(f"--host {args.host}: not an IP address or localhost") from None
    if not loopback and args.api_key is None:
        raise ValueError(f"--host {args.host} listens beyond this machine: give it an --api-key")
    options = _options(ServerOptions, model_id=Path(args.model).name, max_batch=args.max_batch,
                       max_queue=args.max_queue, max_upload_mb=args.max_upload_mb, api_key=args.api_key)
    note = _notes(quiet=False)  # -q quiets the access log only
    pair = load_from_args(args, note)

    import uvicorn

    from whisper_spec.serve.server import create_app

    note(f"serving {options.model_id} at http://{args.host}:{args.port}/v1/audio/transcriptions "
         f"(batches of up to {options.max_batch} windows, {options.max_queue} requests in flight)")
    # uvicorn re-raises the signal that stopped it once its requests are done: SIGTERM then ends here, exit 0
    signal.signal(signal.SIGTERM, lambda number, frame: None)
    uvicorn.run(create_app(pair, options), host=args.host, port=args.port, log_level="warning" if args.quiet else "info",
                timeout_graceful_shutdown=None)
    return 0


def _live_audio(args, step: int):
    """The live command's audio, `step` samples at a time (less at the end): a file played at real time,
    raw 16 kHz PCM from stdin, or the microphone."""
    import numpy as np

    from whisper_spec.speech.audio import SAMPLE_RATE, load_audio

    if args.realtime is not None:
        audio, started = load_audio(str(args.realtime)), time.monotonic()
        for at in range(0, len(audio), step):
            time.sleep(max(0.0, started + min(at + step, len(audio)) / SAMPLE_RATE - time.monotonic()))
            yield audio[at : at + step]
        return
    if args.source == "-":
        while chunk := sys.stdin.buffer.read(2 * step):
            yield np.frombuffer(chunk[: len(chunk) // 2 * 2], dtype="<i2").astype(np.float32) / 32768.0
        return
    try:
        import sounddevice
    except (ImportError, OSError):  # OSError: the package without PortAudio
        raise ValueError("no microphone support here (pip install sounddevice); give --realtime FILE, "
                         "or - for raw 16 kHz PCM on stdin") from None
    with sounddevice.InputStream(samplerate=SAMPLE_RATE, channels=1, dtype="float32", blocksize=step) as microphone:
        while True:
            yield microphone.read(step)[0][:, 0]


def cmd_live(args) -> int:
    """Update a live stream every --step seconds, printing confirmed text and the tentative tail; write
    the final transcript when the audio ends or on Ctrl-C."""
    from whisper_spec.outputs.writers import check_output_dir, render, write_outputs
    from whisper_spec.serve.live import LiveStream, finish, transcript, update
    from whisper_spec.speech.audio import SAMPLE_RATE

    if args.step <= 0:
        raise ValueError(f"--step {args.step}: must be more than 0 seconds")
    if args.source not in (None, "-"):
        raise ValueError(f"{args.source}: live reads - (stdin) or --realtime FILE; transcribe reads files")
    formats = _formats(args)
    if args.output_dir is not None:
        check_output_dir(args.output_dir)
    note = _notes(args.quiet)
    pair = load_from_args(args, note)
    try:
        language = pair.main.special.language_code(args.language)
    except ValueError as error:
        raise ValueError(f"--language: {error}") from None
    stream, tokenizer = LiveStream(language=language), pair.main.tokenizer
    tty = sys.stdout.isatty() and not args.quiet
    shown = ""  # on a terminal, the line's confirmed text; the tentative rest follows it, dimmed
    note("listening (Ctrl-C ends)" if args.realtime is None and args.source is None else "transcribing live")
    try:
        for chunk in _live_audio(args, max(1, round(args.step * SAMPLE_RATE))):
            stream.feed(chunk)
            result = update(pair, [stream])[0]
            confirmed, tentative = tokenizer.decode(result.confirmed), tokenizer.decode(result.tentative)
            if tty:
                shown = (shown + confirmed)[-70:]
                print(f"\r\033[K{shown}\033[2m{tentative[: 100 - len(shown)]}\033[0m", end="", flush=True)
            elif confirmed:
                print(confirmed, end="", flush=True)
    except KeyboardInterrupt:
        pass
    rest = tokenizer.decode(finish(pair, stream))
    print(f"\r\033[K{shown}{rest}" if tty else rest, flush=True)
    result = transcript(pair, stream, name=args.realtime.stem if args.realtime is not None else "live")
    if args.output_dir is not None:
        for path in write_outputs(result, args.output_dir, formats, name=result.path):
            note(f"wrote {path}")
    elif args.format:
        for fmt in formats:
            print(render(result, fmt))
    return 0


COMMANDS = {"transcribe": cmd_transcribe, "batch": cmd_batch, "distill": cmd_distill, "export": cmd_export,
            "bench": cmd_bench, "quantize": cmd_quantize, "models": cmd_models, "serve": cmd_serve, "live": cmd_live}


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
    except BrokenPipeError:
        raise  # the reader of stdout left: the entry point ends quietly
    except OSError as error:  # a file system's refusal (read-only, full, permissions): where and why
        _error(f"{error.filename}: {error.strerror}" if error.filename else str(error))
        return 1


if __name__ == "__main__":
    sys.exit(main())
