"""What the commands share: one-line errors and notes, device and options from the arguments, the
pair loaded as the arguments say."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import replace

from whisper_spec.cli.arguments import PROG

from whisper_spec.options import (
    ChunkingOptions,
    DecodingOptions,
    VadOptions,
    temperature_schedule,
)


def print_error(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr)


def note_printer(quiet: bool):
    """What prints a command's notes on stderr, one line each; nothing with --quiet."""
    return (lambda message: None) if quiet else (lambda message: print(f"{PROG}: {message}", file=sys.stderr))


def pick_device(device: str | None, dtype: str | None, int8: bool | None = False) -> tuple[str, str, bool]:
    """Device, dtype and int8 decoders from the flags; None: the device's default (platform.default_precision)."""
    import torch

    from whisper_spec.models.platform import default_device, default_precision

    device = device or str(default_device())
    int8, dtype = default_precision(torch.device(device), int8, dtype)
    return device, dtype, int8


def options_from(cls, **values):
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
    device, dtype, int8 = pick_device(args.device, args.dtype, args.int8)
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


def output_formats(args) -> list[str]:
    from whisper_spec.options import OUTPUT_FORMATS

    formats = args.format or ["txt"]
    return list(OUTPUT_FORMATS) if "all" in formats else list(dict.fromkeys(formats))


def temperatures_from(args) -> tuple[float, ...]:
    """--temperature's list, or its one value and the fallbacks --temperature-increment-on-fallback adds."""
    if len(args.temperature) > 1:
        return args.temperature
    return temperature_schedule(args.temperature[0], args.temperature_increment_on_fallback)


def setup(args, formats: list[str], load: bool = True):
    """Decoding, chunking and subtitle options, checked, then the model pair (None unless load) and a
    note printer."""
    from whisper_spec.options import SubtitleOptions
    from whisper_spec.outputs.writers import SUBTITLES, TIMED

    timestamps = args.timestamps if args.timestamps is not None else any(f in TIMED for f in formats)
    note = note_printer(args.quiet)
    layout = options_from(SubtitleOptions, max_words_per_line=args.max_words_per_line, max_line_width=args.max_line_width,
                      max_line_count=args.max_line_count, highlight_words=args.highlight_words)
    # --language de,fr,en: detect among these
    named = [language.strip() for language in (args.language or "").split(",") if language.strip()]
    language, candidates = (named[0], None) if len(named) == 1 else (None, tuple(named) or None)
    options = options_from(
        DecodingOptions, task=args.task, language=language, temperature=temperatures_from(args), timestamps=timestamps,
        draft_tokens=args.draft_tokens, draft_confidence=args.draft_confidence, adaptive_draft=args.adaptive_draft,
        speculation=args.speculation, seed=args.seed, prompt=args.initial_prompt, cuda_graphs=args.cuda_graphs,
        compile=args.compile, word_timestamps=args.word_timestamps or layout.needs_word_times,
        no_speech_threshold=args.no_speech_threshold, logprob_threshold=args.logprob_threshold,
        compression_ratio_threshold=args.compression_ratio_threshold,
    )
    vad = VadOptions(threshold=args.vad_threshold, min_silence=args.vad_min_silence, speech_pad=args.vad_speech_pad,
                     min_speech=args.vad_min_speech)  # its errors already name the --vad-* settings
    chunking = options_from(ChunkingOptions, chunk_length=args.chunk_length, vad=args.vad, vad_options=vad)
    if max(options.temperature) > 1:
        note(f"--temperature {','.join(f'{t:g}' for t in options.temperature)}: above 1 sampling is close to uniform "
             "(text barely follows the audio), and the fallbacks stop at 1")
    shaping = [f"--{name.replace('_', '-')}" for name, value in vars(layout).items() if value]
    if shaping and not set(SUBTITLES) & set(formats):
        note(f"{', '.join(shaping)} shape{'s' * (len(shaping) == 1)} srt and vtt cues; the {', '.join(formats)} output has none")
    pair = load_from_args(args, note) if load else None
    try:
        special = pair.main.special if pair is not None else special_tokens_of(args.model)
        candidates = tuple(special.language_code(candidate) for candidate in candidates) if candidates else None
        options = replace(options, language=special.language_code(language), language_candidates=candidates)
    except ValueError as error:
        raise ValueError(f"--language: {error}") from None
    return options, chunking, layout, pair, note


def special_tokens_of(model: str):
    """The model's special tokens without loading its weights."""
    from whisper_spec.models.sources import resolve_model
    from whisper_spec.models.tokenizer import SpecialTokens

    return SpecialTokens.from_model_dir(resolve_model(model))
