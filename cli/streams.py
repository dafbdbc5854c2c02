"""The commands that stay up: `serve` (OpenAI's audio API and the live page) and `live` (a microphone,
stdin or a file played at real time)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from whisper_spec.cli.common import load_from_args, note_printer, options_from, output_formats


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
    options = options_from(ServerOptions, model_id=Path(args.model).name, max_batch=args.max_batch,
                       max_queue=args.max_queue, max_upload_mb=args.max_upload_mb, api_key=args.api_key)
    note = note_printer(quiet=False)  # -q quiets the access log only
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
    formats = output_formats(args)
    if args.output_dir is not None:
        check_output_dir(args.output_dir)
    note = note_printer(args.quiet)
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
