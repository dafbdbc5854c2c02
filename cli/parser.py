"""The `whisper-spec` command line: commands, options and their help. Defaults come from the option
dataclasses (whisper_spec.options), which import no torch, so --help and --version start fast."""

from __future__ import annotations

import argparse
from pathlib import Path

from whisper_spec.cli.arguments import (
    PROG,
    CommandParser,
    add_decoding_options,
    add_draft_options,
    add_model_options,
    add_output_options,
    device,
    positive_int,
)

from whisper_spec import __version__
from whisper_spec.models.sources import DEFAULT_MODEL
from whisper_spec.options import (
    DTYPES,
    LONG_RECORDING_SECONDS,
    OUTPUT_FORMATS,
    TASKS,
    BenchOptions,
    DecodingOptions,
    DistillOptions,
    RayOptions,
    ServerOptions,
)


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog=PROG, description="Whisper transcription with speculative decoding: exact output, less time.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    transcribe = sub.add_parser("transcribe", help="transcribe audio files",
                                description="Transcribe audio files (wav, flac, ogg, mp3, m4a, mp4, webm, ...; any "
                                            "rate; stereo is downmixed).")
    transcribe.add_argument("files", nargs="+", metavar="FILE", help="audio files; - reads audio piped in")
    add_model_options(transcribe)
    add_decoding_options(transcribe)
    add_output_options(transcribe, output_dir_required=False)

    batch = sub.add_parser(
        "batch", help="transcribe a folder, glob or manifest into an output folder (resumable)",
        description="Transcribe many files: each INPUT is a folder (searched recursively), an audio file (so an "
                    "unquoted glob works), a quoted glob pattern, or a JSON-lines manifest with 'path' and optional "
                    "'language' and 'prompt' per line. Outputs are written "
                    "atomically; a re-run skips files already done; failures go to DIR/failures.jsonl and the "
                    "job goes on; DIR/summary.json has the totals.")
    batch.add_argument("input", metavar="INPUT", nargs="+",
                       help="folders (searched recursively), audio files, quoted glob patterns or JSON-lines "
                            "manifests ({\"path\": ..., \"language\": ..., \"prompt\": ...} a line)")
    add_model_options(batch)
    add_decoding_options(batch)
    add_output_options(batch, output_dir_required=True)
    ray = batch.add_argument_group("ray (the [ray] extra: pip install -e '.[ray]')")
    ray.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                     help="run the job on Ray: a local instance started for it, or the cluster at ADDRESS "
                          "('auto', host:port); every worker must see the audio, the model and --output-dir")
    ray.add_argument("--ray-actors", type=positive_int, default=RayOptions.actors, metavar="N",
                     help="actors, each holding one loaded model pair; on a GPU cluster one per GPU "
                          "(default: %(default)s)")
    ray.add_argument("--ray-threads", type=positive_int, default=RayOptions.threads, metavar="N",
                     help="CPU threads per actor (default: %(default)s)")

    _add_distill_parser(sub)
    _add_export_parser(sub)
    _add_bench_parser(sub)
    _add_quantize_parser(sub)
    _add_models_parser(sub)
    _add_serve_parser(sub)
    _add_live_parser(sub)
    for command in sub.choices.values():  # `whisper-spec transcribe --version` too
        command.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    return parser


def _add_distill_parser(sub) -> None:
    distill = sub.add_parser(
        "distill", help="train a small assistant decoder for a main model",
        description="Distil an assistant decoder from the main model on unlabeled audio: it shares the main "
                    "encoder, starts from a few main decoder layers and learns the main model's pseudo-labels "
                    "(with and without timestamps) and token distributions. Encoder outputs and pseudo-labels "
                    "are cached, so a second run with other options starts training at once.")
    distill.add_argument("--main", "-m", default=DEFAULT_MODEL, help="main model (default: %(default)s)")
    distill.add_argument("--audio", required=True, metavar="INPUT", nargs="+",
                         help="training audio: folders, globs or JSON-lines manifests, as for batch")
    distill.add_argument("--output", "-o", type=Path, required=True, help="assistant directory to write")
    train = distill.add_argument_group("training")
    train.add_argument("--layers", type=int, default=DistillOptions.layers,
                       help="assistant decoder layers (default: %(default)s)")
    train.add_argument("--head", action="store_true",
                       help="train a draft head: layers that read the main decoder's final hidden states beside each "
                            "token (EAGLE), started from the main decoder's last layers")
    train.add_argument("--head-features", default=None, metavar="LAYERS",
                       help="comma-separated main decoder layers whose outputs a draft head reads beside the final "
                            "hidden states (EAGLE-3; default: the final hidden states alone)")
    train.add_argument("--head-test-depth", type=positive_int, default=DistillOptions.head_test_depth,
                       help="a draft head's training passes that read its own predicted hidden states, each the last "
                            "one's, as its drafts after the first do (default: %(default)s)")
    train.add_argument("--hidden-weight", type=float, default=DistillOptions.hidden_weight,
                       help="a draft head's regression loss onto the main decoder's hidden states, against its token "
                            "losses (default: %(default)s)")
    train.add_argument("--init-layers", default=None,
                       help="comma-separated main layers to start from (default: spread, first and last kept)")
    train.add_argument("--init-assistant", default=None, type=Path, metavar="DIR",
                       help="a distilled assistant to start from (its layers and draft vocabulary), e.g. a draft head of "
                            "--layers as many layers that starts as that assistant and learns to read the main "
                            "decoder's hidden states too")
    train.add_argument("--tasks", default=",".join(DistillOptions.tasks), metavar="TASK[,TASK]",
                       help="the tasks to label windows for and the assistant to draft for: transcribe, translate or "
                            "both, comma-separated (default: %(default)s)")
    train.add_argument("--draft-vocab", type=int, default=DistillOptions.draft_vocab,
                       help="tokens the assistant can draft, timestamps included (default: %(default)s)")
    train.add_argument("--steps", type=int, default=DistillOptions.steps, help="optimizer steps (default: %(default)s)")
    train.add_argument("--batch-size", "-b", type=positive_int, default=DistillOptions.batch_size,
                       help="sequences per step (default: %(default)s)")
    train.add_argument("--learning-rate", "--lr", type=float, default=DistillOptions.learning_rate,
                       help="peak AdamW rate (default: %(default)s)")
    train.add_argument("--warmup-steps", type=int, default=DistillOptions.warmup_steps,
                       help="steps over which the learning rate rises to --lr (default: %(default)s)")
    _add_distill_data_options(train)


def _add_distill_data_options(train) -> None:
    """What distillation trains on besides the audio given: joined and perturbed copies, shifted
    windows, the held-out part and the languages' balance; and where it runs."""
    train.add_argument("--join", type=int, default=DistillOptions.join, metavar="N",
                       help="also train on recordings of N files joined end to end, whose 30 s windows are full and "
                            "cut speech at their edges, as long-form transcription's are (default: none)")
    train.add_argument("--augment", type=int, default=DistillOptions.augment, metavar="N",
                       help="also train on N perturbed copies of every training recording: speed changed by up to "
                            "10%%, white noise at 10-30 dB SNR (default: none)")
    train.add_argument("--shifts", type=int, default=DistillOptions.shifts, metavar="N",
                       help=f"cut each recording of {LONG_RECORDING_SECONDS} s or more into 30 s windows N ways, "
                            "starting 0, 30/N, ... s in (default: %(default)s)")
    train.add_argument("--held-out", type=float, default=DistillOptions.held_out,
                       help="fraction of short files, and of the end of each recording of "
                            f"{LONG_RECORDING_SECONDS} s or more, kept out for held-out acceptance (default: %(default)s)")
    train.add_argument("--balance", type=float, default=DistillOptions.balance,
                       help="language sampling: 1 draws languages as often as the data has them, 0 equally "
                            "often (default: %(default)s)")
    train.add_argument("--eval-every", type=int, default=DistillOptions.eval_every,
                       help="steps between held-out evaluations")
    train.add_argument("--seed", type=int, default=DistillOptions.seed,
                       help="seed of the held-out split, the joined recordings and their perturbations, the student's "
                            "initialisation and the training order (default: %(default)s)")
    train.add_argument("--device", type=device, default=None,
                       help="cpu, cuda or cuda:N (default: cuda when available)")
    train.add_argument("--cache-dir", type=Path, default=None,
                       help="teacher cache (default: per main model under the whisper-spec cache)")
    train.add_argument("--resume", action="store_true", help="continue from OUTPUT/checkpoint.pt")
    train.add_argument("--threads", type=int, default=None, help="CPU threads for torch")


def _add_export_parser(sub) -> None:
    export = sub.add_parser(
        "export", help="write an assistant as a standard WhisperForCausalLM directory",
        description="Write a distilled assistant (with the weights it shares with its main model) as a Hugging "
                    "Face WhisperForCausalLM directory, usable as transformers' assistant_model.")
    export.add_argument("assistant", metavar="ASSISTANT", help="distilled assistant directory")
    export.add_argument("--main", "-m", default=DEFAULT_MODEL, help="its main model (default: %(default)s)")
    export.add_argument("--output", "-o", type=Path, required=True, help="the Hugging Face directory to write")
    export.add_argument("--dtype", choices=DTYPES, default="float16",
                        help="the dtype of the written weights (default: %(default)s)")


def _add_bench_parser(sub) -> None:
    bench = sub.add_parser(
        "bench", help="WER and time: main-only vs speculative (and peers), with an exactness check",
        description="Benchmark main-only against speculative decoding on one set of utterances, at each batch size "
                    "(optionally int8), next to transformers' generate, faster-whisper and whisper.cpp where installed. "
                    "Writes "
                    "DIR/report.json, DIR/report.md and PNG plots; exits 1 if any greedy speculative output differs "
                    "from the main-only output.")
    bench.add_argument("source", metavar="SOURCE",
                       help="JSON-lines manifest (path, text, language), audio folder or glob, or a Hugging Face "
                            "dataset id (with --config and --split)")
    data = bench.add_argument_group("data")
    data.add_argument("--config", default=None, help="dataset config, e.g. clean or nl")
    data.add_argument("--split", default="test", help="dataset split (default: %(default)s)")
    data.add_argument("--set", dest="sets", default=None, help="manifest sets to keep, comma-separated")
    data.add_argument("--limit", type=int, default=None, help="first N utterances only")
    data.add_argument("--language", "-l", default=None, help="language of every utterance (default: given or detected)")
    add_model_options(bench)
    runs = bench.add_argument_group("configurations")
    runs.add_argument("--batch-sizes", default=",".join(map(str, BenchOptions.batch_sizes)),
                      help="comma-separated (default: %(default)s)")
    add_draft_options(runs)
    runs.add_argument("--repeats", type=int, default=BenchOptions.repeats, help="timed repeats, median reported (default: %(default)s)")
    runs.add_argument("--peers", default=",".join(BenchOptions.peers),
                      help="comma-separated peers to run where installed, or none (default: %(default)s)")
    runs.add_argument("--task", choices=TASKS, default=DecodingOptions.task,
                      help="transcribe, or translate into English (default: %(default)s)")
    runs.add_argument("--initial-prompt", metavar="TEXT", default=None,
                      help="text before every utterance, ours and the peers' (transcribe's --initial-prompt)")
    bench.add_argument("--output-dir", "-o", type=Path, default=Path("bench-results"),
                       help="where the report and plots go (default: %(default)s)")
    bench.add_argument("--quiet", "-q", action="store_true", help="no progress bar or notes")


def _add_quantize_parser(sub) -> None:
    quantize = sub.add_parser(
        "quantize", help="write a pre-quantized int8 copy of a model or a distilled assistant",
        description="Write MODEL (embedded name, model directory, hub id) or a distilled assistant directory with "
                    "int8 weight-only decoder linears (per output channel, symmetric, float32 scales); the encoder "
                    "and other float tensors are kept in --dtype. Loading the result never builds float decoder "
                    "weights. Use it as --model or --assistant; --int8 is then implied for it.")
    quantize.add_argument("model", metavar="MODEL",
                          help="embedded model name, model directory, hub id or distilled assistant directory")
    quantize.add_argument("--output", "-o", type=Path, required=True, help="the directory to write")
    quantize.add_argument("--dtype", choices=DTYPES, default="float16",
                          help="dtype of the tensors that stay float (default: %(default)s)")


def _add_models_parser(sub) -> None:
    models = sub.add_parser("models", help="list the embedded models and prepare them",
                            description="List the embedded models; --prepare converts them into the cache.")
    models.add_argument("--prepare", nargs="*", metavar="NAME", default=None,
                        help="convert these embedded models now (no names: all)")
    models.add_argument("--json", action="store_true", help="print JSON")


def _add_live_parser(sub) -> None:
    live = sub.add_parser(
        "live", help="transcribe live audio: a microphone, raw PCM on stdin, or a file played at real time",
        description="Live transcription: the audio so far is decoded again every --step seconds, its last "
                    "hypothesis the draft; text two updates in a row agree on is confirmed and printed, the "
                    "rest shown as tentative. At the end (Ctrl-C, end of input) the transcript is written in "
                    "the usual formats. Every update is exactly the main model's decoding of its audio.")
    live.add_argument("source", nargs="?", default=None, metavar="-",
                      help="- : raw 16 kHz mono 16-bit PCM on stdin (default: the microphone, with sounddevice)")
    live.add_argument("--realtime", type=Path, default=None, metavar="FILE",
                      help="play an audio file at real time instead (any format transcribe reads)")
    live.add_argument("--step", type=float, default=1.0, metavar="SECONDS",
                      help="seconds of audio between updates (default: %(default)s)")
    live.add_argument("--language", "-l", default=None, help="language code or name (default: detected at the start)")
    add_model_options(live)
    out = live.add_argument_group("output")
    out.add_argument("--format", "-f", action="append", choices=(*OUTPUT_FORMATS, "all"),
                     help="the final transcript's format, repeatable (default: txt)")
    out.add_argument("--output-dir", "-o", type=Path, default=None,
                     help="write the final transcript to DIR/<name>.<format> (name: the file's, or 'live')")
    out.add_argument("--quiet", "-q", action="store_true", help="no notes; only the confirmed text as it comes")


def _add_serve_parser(sub) -> None:
    serve = sub.add_parser(
        "serve", help="serve OpenAI's audio API over HTTP, concurrent requests decoded in shared batches",
        description="An OpenAI-compatible transcription server: POST /v1/audio/transcriptions and "
                    "/v1/audio/translations (OpenAI's form fields and response formats), GET /v1/models, "
                    "GET /health. The windows of concurrent requests share the decoder's batches; each "
                    "response is what `whisper-spec transcribe` gives for the file.")
    add_model_options(serve)
    server = serve.add_argument_group("server")
    server.add_argument("--host", default="127.0.0.1",
                        help="address to listen on; other than loopback only with --api-key (default: %(default)s)")
    server.add_argument("--port", type=int, default=8000, help="(default: %(default)s)")
    server.add_argument("--max-batch", type=positive_int, default=ServerOptions.max_batch, metavar="N",
                        help="windows of the requests in flight decoded together (default: %(default)s)")
    server.add_argument("--max-queue", type=positive_int, default=ServerOptions.max_queue, metavar="N",
                        help="requests in flight; more are answered 503 with Retry-After (default: %(default)s)")
    server.add_argument("--max-upload-mb", type=float, default=ServerOptions.max_upload_mb, metavar="MB",
                        help="largest upload; larger ones are answered 413 (default: %(default)s)")
    server.add_argument("--api-key", default=None, metavar="KEY",
                        help="every request must send 'Authorization: Bearer KEY' (default: none, loopback only)")
    server.add_argument("--quiet", "-q", action="store_true", help="no access log")
