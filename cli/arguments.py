"""The command line's pieces: argument types and the option groups several commands share, with their
help. Defaults come from the option dataclasses (whisper_spec.options), which import no torch."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from whisper_spec.models.sources import DEFAULT_MODEL
from whisper_spec.options import (
    BATCH_SIZE,
    DTYPES,
    ENCODER_PRECISIONS,
    OUTPUT_FORMATS,
    TASKS,
    TEMPERATURE_INCREMENT,
    ChunkingOptions,
    DecodingOptions,
    VadOptions,
)

PROG = "whisper-spec"


def device(value: str) -> str:
    """An argparse type: cpu, cuda or cuda:N; anything else is a usage error (exit 2)."""
    if value in ("cpu", "cuda") or re.fullmatch(r"cuda:\d+", value):
        return value
    raise argparse.ArgumentTypeError(f"{value!r} is not a device this tool runs on (cpu, cuda, cuda:N)")


def positive_int(value: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number of at least 1")
    return number


def _temperatures(value: str) -> tuple[float, ...]:
    """An argparse type: comma-separated temperatures of at least 0."""
    try:
        temperatures = tuple(float(t) for t in value.split(","))
    except ValueError:
        temperatures = ()
    if not temperatures or any(t < 0 for t in temperatures):
        raise argparse.ArgumentTypeError(f"{value!r} is not a temperature >= 0 or a comma-separated list of them")
    return temperatures


def _optional_float(value: str) -> float | None:
    """An argparse type: a number, or 'none'."""
    if value.lower() == "none":
        return None
    try:
        return float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number or 'none'") from None


def add_draft_options(group) -> None:
    group.add_argument("--draft-tokens", "-k", type=int, default=DecodingOptions.draft_tokens,
                       help="most tokens the assistant drafts per round (default: %(default)s)")
    group.add_argument("--draft-confidence", type=float, default=DecodingOptions.draft_confidence,
                       help="a row stops drafting for the round after a draft the assistant gives less "
                            "probability than this; 0 drafts all k (default: %(default)s)")
    group.add_argument("--speculation", choices=("on", "off", "auto"), default=DecodingOptions.speculation,
                       help="on: the assistant drafts every round; off: never; auto: in a batch whose rows, times "
                            "the audio the assistant reads, stay within what drafting is measured to pay for on "
                            "this device (default: %(default)s)")


def add_model_options(parser: argparse.ArgumentParser) -> None:
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
    group.add_argument("--device", type=device, default=None, help="cpu, cuda or cuda:N (default: cuda when available)")
    group.add_argument("--threads", type=positive_int, default=None,
                       help="CPU threads for torch (default: the cores this process may use that no other "
                            "process keeps busy when it starts)")
    group.add_argument("--compile", action="store_true",
                       help="compile decoding steps with torch.compile, for long jobs, same transcripts: on CPU the "
                            "assistant's draft step (about a third cheaper, after compiling for tens of seconds once, "
                            "then some 9 s a process); on a GPU every step of a round (compiled per batch size); "
                            "bench: compiled configurations beside the others")
    group.add_argument("--no-cuda-graphs", dest="cuda_graphs", action="store_false",
                       help="on CUDA, run every decoder step eagerly instead of replaying CUDA graphs of them")
    group.add_argument("--dtype", choices=DTYPES, default=None,
                       help="weight and activation dtype (default: float16 on cuda, float32 on cpu; "
                            "bfloat16 on cpu with int8 decoders, float32 there on avx2-only cpus)")
    group.add_argument("--int8", action=argparse.BooleanOptionalAction, default=None,
                       help="int8 decoder linears for main model and assistant (default: on for cpu "
                            "where torch's int8 kernels run, off elsewhere; bench: int8 configurations "
                            "beside the float ones)")
    group.add_argument("--encoder-precision", choices=ENCODER_PRECISIONS, default=None,
                       help="the encoder's: int8 linears (weights and activations per frame, cpu only) or a dtype "
                            "(default: bfloat16 on cpus with AMX, else int8 on cpu; the --dtype on cuda)")


def add_decoding_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("decoding")
    group.add_argument("--language", "-l", default=None,
                       help="language code or name such as en, de, German; or a comma-separated list to detect "
                            "among, such as en,de,fr (default: detect among all)")
    group.add_argument("--task", choices=TASKS, default=DecodingOptions.task,
                       help="transcribe in the language spoken, or translate into English (default: %(default)s)")
    group.add_argument("--temperature", type=_temperatures, default=f"{DecodingOptions.temperature[0]:g}", metavar="T[,T...]",
                       help="the temperature every window is decoded at (0: greedy), or the comma-separated "
                            "list to try in turn, a window's text failing the thresholds below going on to the "
                            "next (default: %(default)s, then up by --temperature-increment-on-fallback)")
    group.add_argument("--temperature-increment-on-fallback", type=_optional_float, default=TEMPERATURE_INCREMENT,
                       metavar="STEP",
                       help="after a single --temperature, the fallback temperatures rise by this up to 1; "
                            "'none' or 0: no fallback (default: %(default)s)")
    group.add_argument("--seed", type=int, default=DecodingOptions.seed,
                       help="sampling seed, mixed with each window's own (default: %(default)s)")
    group.add_argument("--initial-prompt", metavar="TEXT", default=None,
                       help="text every window reads as what came before it: names, terms and spellings to "
                            "use, punctuation and style to follow (windows decode in parallel, so each reads "
                            "this, not the window before)")
    group.add_argument("--batch-size", "-b", type=positive_int, default=BATCH_SIZE,
                       help="30 s windows decoded together (default: %(default)s)")
    add_draft_options(group)
    group.add_argument("--adaptive-draft", action="store_true",
                       help="per row: draft 2 more after full acceptance, 1 fewer after a rejection")
    group.add_argument("--timestamps", action=argparse.BooleanOptionalAction, default=None,
                       help="predict segment timestamps (default: on for srt, vtt and tsv output)")
    group.add_argument("--word-timestamps", action="store_true",
                       help="time every word (json: each segment's words with start, end and probability)")
    group.add_argument("--no-speech-threshold", type=_optional_float, default=DecodingOptions.no_speech_threshold,
                       metavar="P",
                       help="a window whose no-speech probability exceeds this, with an average log-probability "
                            "at most --logprob-threshold, yields no text; 'none': never (default: %(default)s)")
    group.add_argument("--logprob-threshold", type=_optional_float, default=DecodingOptions.logprob_threshold,
                       metavar="LOGPROB",
                       help="see --no-speech-threshold and --compression-ratio-threshold; 'none': the no-speech "
                            "probability alone decides, and no fallback for doubt "
                            "(default: %(default)s)")
    group.add_argument("--compression-ratio-threshold", type=_optional_float,
                       default=DecodingOptions.compression_ratio_threshold, metavar="RATIO",
                       help="a window whose text compresses better than this (a loop), or whose average "
                            "log-probability is below --logprob-threshold, is decoded at the next temperature; "
                            "'none': no such test (default: %(default)s)")
    _add_long_audio_options(parser)


def _add_long_audio_options(parser: argparse.ArgumentParser) -> None:
    long = parser.add_argument_group("long audio")
    long.add_argument("--vad", action=argparse.BooleanOptionalAction, default=ChunkingOptions.vad,
                      help="decode only the speech Silero VAD finds, in chunks of at most --chunk-length cut at "
                           "pauses; --no-vad: windows one after another, each from where the text before it "
                           "stopped, for audio VAD misjudges (speech over music) (default: VAD for audio longer "
                           "than one window, a short clip whole)")
    vad = VadOptions()
    long.add_argument("--vad-threshold", type=float, default=vad.threshold, metavar="P",
                      help="speech probability above which a 32 ms frame is speech (default: %(default)s)")
    long.add_argument("--vad-min-silence", type=float, default=vad.min_silence, metavar="SECONDS",
                      help="a pause at least this long ends a stretch of speech (default: %(default)s)")
    long.add_argument("--vad-speech-pad", type=float, default=vad.speech_pad, metavar="SECONDS",
                      help="audio kept on each side of speech, at most half the pause (default: %(default)s)")
    long.add_argument("--vad-min-speech", type=float, default=vad.min_speech, metavar="SECONDS",
                      help="stretches of speech shorter than this are dropped (default: %(default)s)")
    long.add_argument("--chunk-length", type=float, default=ChunkingOptions.chunk_length,
                      help="most seconds of audio per window or speech chunk (default: %(default)s)")


def add_output_options(parser: argparse.ArgumentParser, output_dir_required: bool) -> None:
    out = parser.add_argument_group("output")
    out.add_argument("--format", "-f", action="append", choices=(*OUTPUT_FORMATS, "all"),
                     help="output format, repeatable (default: txt)")
    if output_dir_required:
        out.add_argument("--output-dir", "-o", type=Path, required=True, help="where outputs go: DIR/<name>.<format>")
    else:
        out.add_argument("--output-dir", "-o", type=Path, default=None,
                         help="write DIR/<name>.<format> per file instead of printing")
    out.add_argument("--max-words-per-line", type=positive_int, default=None, metavar="N",
                     help="srt and vtt lines of at most N words, a cue a line unless --max-line-count says otherwise "
                          "(implies --word-timestamps)")
    out.add_argument("--max-line-width", type=positive_int, default=None, metavar="CHARS",
                     help="srt and vtt lines of at most CHARS characters (42 is the usual subtitle width)")
    out.add_argument("--max-line-count", type=positive_int, default=None, metavar="N",
                     help="srt and vtt cues of at most N lines, timed by their words (implies --word-timestamps; "
                          "default: a segment's lines in one cue)")
    out.add_argument("--highlight-words", action="store_true",
                     help="srt and vtt: a cue per word as it is spoken, that word underlined (implies --word-timestamps)")
    talk = out.add_mutually_exclusive_group()
    talk.add_argument("--quiet", "-q", action="store_true", help="no progress bar or notes")
    talk.add_argument("--verbose", "-v", action="store_true",
                      help="each segment on stderr as it is decoded, '[start --> end] text' (a long file's text "
                           "while the rest decodes; with several files, each line begins with its file)")


class CommandParser(argparse.ArgumentParser):
    """Usage errors as the one line that matters and where to read more, not the whole usage first."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_args(self, args=None, namespace=None):
        """As argparse's, but arguments no command takes are refused by the command's parser, whose help
        is the one to read (argparse leaves them to the top-level one)."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            command = self._subparsers._group_actions[0].choices.get(getattr(parsed, "command", None)) \
                if self._subparsers is not None else None
            (command or self).error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed
