"""The `whisper-spec` command: parser.py (commands, options, help) and main.py (running them)."""

import atexit
import os
import sys


def run() -> None:
    """The console entry point. Ctrl-C ends the command with one line wherever it lands, while the
    command's own modules still load too (main() handles it once they have).

    Once the command is done, exit handlers run (Ray's shutdown among them) and the process ends
    without the interpreter's teardown of every module, which takes torch 0.3 s: a tenth of a
    short file's transcription. Files are closed by then (writers use with-blocks)."""
    try:
        from whisper_spec.cli.main import main

        code = main()
    except KeyboardInterrupt:
        print("whisper-spec: error: interrupted", file=sys.stderr)
        code = 130
    except BrokenPipeError:  # the reader of stdout left (`| head`): stop quietly, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # what is still buffered goes nowhere
        code = 141  # 128 + SIGPIPE
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if code is None else code if isinstance(code, int) else 1)  # as sys.exit reads it
