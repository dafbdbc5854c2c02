"""The `whisper-spec` command: parser.py (commands, options, help) and main.py (running them)."""

import sys


def run() -> None:
    """The console entry point. Ctrl-C ends the command with one line wherever it lands, while the
    command's own modules still load too (main() handles it once they have)."""
    try:
        from whisper_spec.cli.main import main

        code = main()
    except KeyboardInterrupt:
        print("whisper-spec: error: interrupted", file=sys.stderr)
        code = 130
    sys.exit(code)
