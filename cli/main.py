"""`whisper-spec`: transcribe with speculative decoding, distil assistants, manage the embedded models.

Each command imports what it needs when it runs, so --help and --version start fast.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from whisper_spec.cli.arguments import PROG
from whisper_spec.cli.common import options_from, output_formats, pair_args, print_error, setup
from whisper_spec.cli.parser import build_parser
from whisper_spec.cli.streams import cmd_live, cmd_serve
from whisper_spec.cli.tools import cmd_bench, cmd_distill, cmd_export, cmd_models, cmd_quantize


def cmd_transcribe(args) -> int:
    from whisper_spec.jobs.inputs import AudioProgress, jobs_of_files
    from whisper_spec.longform.pipeline import Failure, transcribe
    from whisper_spec.outputs.writers import check_output_dir, render, segment_line, write_outputs

    formats = output_formats(args)
    if args.output_dir is not None:
        check_output_dir(args.output_dir)
    folder = next((f for f in args.files if f != "-" and Path(f).is_dir()), None)
    if folder is not None:  # the wrong command, not a bad file: a usage problem, before any model loads
        raise ValueError(f"{folder}: is a folder, not an audio file (whisper-spec batch transcribes folders)")
    jobs = jobs_of_files(args.files)
    options, chunking, layout, pair, note = setup(args, formats)
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

    formats = output_formats(args)
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
    options, chunking, layout, pair, note = setup(args, formats, load=args.ray is None)
    try:
        if args.ray is not None:
            from whisper_spec.jobs.ray_batch import run_batch_ray
            from whisper_spec.options import RayOptions

            ray_options = options_from(RayOptions, address=None if args.ray == "local" else args.ray,
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
        print_error(f"interrupted after {done} files; run the same command again to resume (their outputs are kept)")
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


COMMANDS = {"transcribe": cmd_transcribe, "batch": cmd_batch, "distill": cmd_distill, "export": cmd_export,
            "bench": cmd_bench, "quantize": cmd_quantize, "models": cmd_models, "serve": cmd_serve, "live": cmd_live}


def main(argv: list[str] | None = None) -> int:
    """Run a command; bad input (a file, a model, an option) ends it with one line and exit 2."""
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        print_error("interrupted")
        return 130
    except (ValueError, FileNotFoundError) as error:  # AudioError, IncompatiblePair, ModelNotFound among them
        print_error(str(error))
        return 2
    except BrokenPipeError:
        raise  # the reader of stdout left: the entry point ends quietly
    except OSError as error:  # a file system's refusal (read-only, full, permissions): where and why
        print_error(f"{error.filename}: {error.strerror}" if error.filename else str(error))
        return 1


if __name__ == "__main__":
    sys.exit(main())
