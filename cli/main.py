"""`whisper-spec`: transcribe with speculative decoding, and manage the embedded models."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

PROG = "whisper-spec"
# the default assistant per embedded main model; absent: no distilled assistant exists yet
DEFAULT_ASSISTANTS: dict[str, str] = {}


def _error(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr)


def _add_model_options(parser: argparse.ArgumentParser) -> None:
    from whisper_spec.models import DEFAULT_MODEL

    group = parser.add_argument_group("model")
    group.add_argument("--model", "-m", default=DEFAULT_MODEL,
                       help="embedded model name (base, tiny.en), model directory (Hugging Face or CTranslate2) "
                            "or hub id (default: %(default)s)")
    group.add_argument("--assistant", "-a", default=None,
                       help="assistant model (same forms as --model) or 'none' to decode with the main model alone "
                            "(default: the model's distilled assistant where one exists)")
    group.add_argument("--assistant-encoder", choices=("auto", "shared", "own"), default="auto",
                       help="shared: the assistant reads the main encoder's output; own: it runs its own encoder; "
                            "auto: shared for decoder-only checkpoints (default: %(default)s)")
    group.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    group.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default=None,
                       help="weight and activation dtype (default: float16 on cuda, float32 on cpu)")


def _add_decoding_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("decoding")
    group.add_argument("--language", "-l", default=None, help="language code such as en, de, nl (default: detect)")
    group.add_argument("--task", choices=("transcribe", "translate"), default="transcribe")
    group.add_argument("--temperature", type=float, default=0.0, help="0 for greedy (default: %(default)s)")
    group.add_argument("--seed", type=int, default=None, help="random seed for sampling")
    group.add_argument("--batch-size", "-b", type=int, default=4, help="30 s windows decoded together (default: 4)")
    group.add_argument("--draft-tokens", "-k", type=int, default=5,
                       help="tokens the assistant drafts per round (default: %(default)s)")
    group.add_argument("--adaptive-draft", action="store_true",
                       help="per row: draft 2 more after full acceptance, 1 fewer after a rejection")
    group.add_argument("--timestamps", action=argparse.BooleanOptionalAction, default=None,
                       help="predict segment timestamps (default: on for srt and vtt output)")
    group.add_argument("--chunk-length", type=float, default=30.0,
                       help="seconds per window for audio longer than one window (default: %(default)s)")
    group.add_argument("--overlap", type=float, default=10.0,
                       help="seconds shared by consecutive windows, where they are stitched (default: %(default)s)")


def _add_output_options(parser: argparse.ArgumentParser, output_dir_required: bool) -> None:
    out = parser.add_argument_group("output")
    out.add_argument("--format", "-f", action="append", choices=("txt", "json", "srt", "vtt", "all"),
                     help="output format, repeatable (default: txt)")
    if output_dir_required:
        out.add_argument("--output-dir", "-o", type=Path, required=True, help="where outputs go: DIR/<name>.<format>")
    else:
        out.add_argument("--output-dir", "-o", type=Path, default=None,
                         help="write DIR/<name>.<format> per file instead of printing")
    out.add_argument("--quiet", "-q", action="store_true", help="no progress bar or notes")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Whisper transcription with speculative decoding: exact output, less time."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    transcribe = sub.add_parser("transcribe", help="transcribe audio files",
                                description="Transcribe audio files (wav, flac, ogg, mp3; any rate; stereo is downmixed).")
    transcribe.add_argument("files", nargs="+", metavar="FILE")
    _add_model_options(transcribe)
    _add_decoding_options(transcribe)
    _add_output_options(transcribe, output_dir_required=False)

    batch = sub.add_parser(
        "batch", help="transcribe a folder, glob or manifest into an output folder (resumable)",
        description="Transcribe many files: INPUT is a folder (searched recursively), a glob pattern (quote it), "
                    "or a JSON-lines manifest with 'path' and optional 'language' per line. Outputs are written "
                    "atomically; a re-run skips files already done; failures go to DIR/failures.jsonl and the "
                    "job goes on; DIR/summary.json has the totals.")
    batch.add_argument("input", metavar="INPUT")
    _add_model_options(batch)
    _add_decoding_options(batch)
    _add_output_options(batch, output_dir_required=True)

    models = sub.add_parser("models", help="list the embedded models and prepare them",
                            description="List the embedded models; --prepare converts them into the cache.")
    models.add_argument("--prepare", nargs="*", metavar="NAME", default=None,
                        help="convert these embedded models now (no names: all)")
    models.add_argument("--json", action="store_true", help="print JSON")
    return parser


def _pick_device(device: str | None, dtype: str | None) -> tuple[str, str]:
    import torch

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = dtype or ("float16" if device.startswith("cuda") else "float32")
    return device, dtype


def load_from_args(args, note):
    """The model pair the options name."""
    from whisper_spec.loader import load_pair

    assistant = args.assistant
    if assistant is None:
        assistant = DEFAULT_ASSISTANTS.get(args.model)
        if assistant is None:
            note(f"no distilled assistant for {args.model} yet: decoding with the main model alone "
                 "(use --assistant MODEL for speculative decoding)")
    elif assistant.lower() == "none":
        assistant = None
    device, dtype = _pick_device(args.device, args.dtype)
    return load_pair(args.model, assistant, assistant_encoder=args.assistant_encoder, dtype=dtype, device=device)


def _setup(args):
    """Formats, decoding and chunking options, the model pair and a note printer, from the arguments."""
    from whisper_spec.decoding import DecodingOptions
    from whisper_spec.transcribe import ChunkingOptions
    from whisper_spec.writers import FORMATS

    formats = args.format or ["txt"]
    formats = list(FORMATS) if "all" in formats else list(dict.fromkeys(formats))
    timestamps = args.timestamps if args.timestamps is not None else any(f in ("srt", "vtt") for f in formats)
    note = (lambda message: None) if args.quiet else (lambda message: print(f"{PROG}: {message}", file=sys.stderr))
    if args.batch_size < 1:
        raise ValueError("--batch-size must be at least 1")
    options = DecodingOptions(
        task=args.task, language=args.language, temperature=args.temperature, timestamps=timestamps,
        draft_tokens=args.draft_tokens, adaptive_draft=args.adaptive_draft, seed=args.seed,
    )
    chunking = ChunkingOptions(chunk_length=args.chunk_length, overlap=args.overlap)
    pair = load_from_args(args, note)
    pair.main.special.check_language(args.language)
    return formats, options, chunking, pair, note


def cmd_transcribe(args) -> int:
    from whisper_spec.batch import audio_progress
    from whisper_spec.transcribe import Failure, transcribe
    from whisper_spec.writers import render, write_outputs

    try:
        formats, options, chunking, pair, note = _setup(args)
    except (ValueError, FileNotFoundError) as error:
        _error(str(error))
        return 2

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
    from whisper_spec.batch import collect_jobs, run_batch

    try:
        jobs = collect_jobs(args.input)
        formats, options, chunking, pair, note = _setup(args)
    except (ValueError, FileNotFoundError) as error:
        _error(str(error))
        return 2
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


def cmd_models(args) -> int:
    from whisper_spec.models import EMBEDDED_MODELS, ModelNotFound, list_models, prepare_embedded

    if args.prepare is not None:
        for name in args.prepare or list(EMBEDDED_MODELS):
            if name not in EMBEDDED_MODELS:
                _error(f"{name}: not an embedded model (known: {', '.join(EMBEDDED_MODELS)})")
                return 2
            try:
                print(f"{name}: {prepare_embedded(name)}", file=sys.stderr)
            except ModelNotFound as error:
                _error(str(error))
                return 1
    rows = list_models()
    for row in rows:
        row["default_assistant"] = DEFAULT_ASSISTANTS.get(row["name"])
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for row in rows:
        state = "prepared" if row["prepared"] else ("installed" if row["installed"] else "missing")
        assistant = row["default_assistant"] or "none yet"
        print(f"{row['name']:<8} {state:<9} assistant: {assistant:<10} {row['description']}")
        if row["prepared"]:
            print(f"{'':<8} {row['path']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return {"transcribe": cmd_transcribe, "batch": cmd_batch, "models": cmd_models}[args.command](args)
    except KeyboardInterrupt:
        _error("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
