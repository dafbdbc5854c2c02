"""What a user can set, as frozen dataclasses with their defaults: the one place those live.

Imports nothing heavy (no torch), so the command line reads its defaults from here and
`whisper-spec --help` starts fast.
"""

from __future__ import annotations

from dataclasses import dataclass

CHUNK_SECONDS = 30  # Whisper's window: the encoder's fixed input length
BATCH_SIZE = 4  # 30 s windows decoded together
DTYPES = ("float32", "bfloat16", "float16")
# an encoder's: int8 linears (quantize.DynamicInt8Linear, CPU only) or a dtype
ENCODER_PRECISIONS = ("int8", *DTYPES)
# Distillation: a file at least this long is held out by its end rather than whole (a few long
# recordings, such as the multilingual TTS set's two a language, would lose half a language)
# and can be cut into windows several ways (DistillOptions.shifts).
LONG_RECORDING_SECONDS = 60
TEMPERATURE_INCREMENT = 0.2  # openai-whisper's step between fallback temperatures
TASKS = ("transcribe", "translate")  # Whisper's: the text in the audio's language, or in English


def temperature_schedule(start: float = 0.0, increment: float | None = TEMPERATURE_INCREMENT) -> tuple[float, ...]:
    """openai-whisper's temperatures: start, then up by increment while at most 1 (None or 0: start alone)."""
    if not increment:
        return (start,)
    count = int((1.0 - start) / increment + 1e-6) + 1 if start <= 1.0 else 1
    return tuple(round(start + i * increment, 6) for i in range(count))


@dataclass(frozen=True)
class DecodingOptions:
    task: str = "transcribe"  # or "translate"
    language: str | None = None  # None: detected per row
    # where a row's language is detected: among these only (codes or names), for a job whose languages are
    # known, where a short or unclear clip can pass for another; None: among all the model knows
    language_candidates: tuple[str, ...] | None = None
    # the first temperature decodes every window (0: greedy, the speed path); a window whose text
    # fails the thresholds below is decoded again at the next one (openai-whisper's fallback). Sampling
    # draws one uniform number per (seed, window, position), so both modes keep the same tokens
    temperature: float | tuple[float, ...] = temperature_schedule()
    timestamps: bool = False  # predict segment timestamps (Whisper's timestamp rules apply)
    max_length: int | None = None  # total decoder tokens including the prompt; default: the model's 448
    draft_tokens: int = 4  # most drafted per round and row; ignored without an assistant
    adaptive_draft: bool = False  # per row: +2 after a fully accepted round, -1 after a rejection
    draft_confidence: float = 0.8  # a row stops drafting for the round after a draft the assistant gives less probability
    max_draft_tokens: int = 16  # cap for the adaptive draft length
    # on: draft every round; off: the main model alone (the assistant stays loaded, unused); auto: draft
    # in every round of a batch whose rows, times the audio frames the assistant reads, stay within what
    # drafting is measured to pay for on the device and decoder precision (platform.AUTO_MAX_DRAFT_FRAMES)
    speculation: str = "auto"
    seed: int = 0  # of sampling; mixed with each window's own (decoding.decode_windows)
    # text (or token ids) every window's decoder reads as what was said before it: names, spellings and
    # style to follow (openai-whisper's prompt; its last n_text_ctx // 2 - 1 tokens are kept). Windows
    # decode in parallel, so no window reads another's text; the same prompt goes before every one
    prompt: str | tuple[int, ...] | None = None
    # openai-whisper's rules, with its defaults. A window's text fails when it compresses better than
    # compression_ratio_threshold (a loop) or its tokens' average log-probability (end of text
    # included) is below logprob_threshold; it is then decoded at the next temperature, unless the
    # window is silent: its <|nospeech|> probability after SOT exceeds no_speech_threshold and its
    # average log-probability does not exceed logprob_threshold (or its text still loops after every
    # temperature), and it yields no text. None: no such test.
    # Where every temperature fails, the text kept is faster-whisper's choice (results.best_attempt)
    no_speech_threshold: float | None = 0.6
    logprob_threshold: float | None = -1.0
    compression_ratio_threshold: float | None = 2.4
    # times of every word (pipeline.transcribe): dynamic time warping over the main decoder's
    # cross-attention (timing.py), from the verified tokens, so the same with or without an assistant
    word_timestamps: bool = False
    cuda_graphs: bool = True  # on CUDA, replay decoder steps from CUDA graphs (same tokens, fewer launches)
    # decoding's steps through torch.compile where the platform compiles them (Platform.compiles): on CPU
    # the assistant's draft step, on a GPU a fixed-shape round's steps; faster once compiled, which takes
    # seconds to minutes a process (decisions, "Compiled steps off by default"); same transcripts
    compile: bool = False

    def __post_init__(self):
        if self.task not in TASKS:
            raise ValueError(f"task must be transcribe or translate, not {self.task!r}")
        temperatures = (self.temperature,) if isinstance(self.temperature, (int, float)) else tuple(self.temperature)
        if not temperatures or any(t < 0 for t in temperatures):
            raise ValueError(f"temperature must be one or more values >= 0, not {self.temperature}")
        object.__setattr__(self, "temperature", tuple(float(t) for t in temperatures))
        if self.draft_tokens < 0:
            raise ValueError(f"draft_tokens must be >= 0, not {self.draft_tokens}")
        if self.max_draft_tokens < 1:
            raise ValueError("max_draft_tokens must be >= 1")
        if self.adaptive_draft and self.draft_tokens > self.max_draft_tokens:
            raise ValueError(f"draft_tokens must be at most {self.max_draft_tokens} with adaptive_draft")
        if self.speculation not in ("on", "off", "auto"):
            raise ValueError(f"speculation must be on, off or auto, not {self.speculation!r}")
        if self.language_candidates is not None:
            if isinstance(self.language_candidates, str) or not self.language_candidates:
                raise ValueError(f"language_candidates must be a tuple of languages, not {self.language_candidates!r}")
            object.__setattr__(self, "language_candidates", tuple(self.language_candidates))
        if isinstance(self.prompt, str):
            object.__setattr__(self, "prompt", self.prompt.strip() or None)
        elif self.prompt is not None:
            object.__setattr__(self, "prompt", tuple(int(t) for t in self.prompt) or None)
        if not 0 <= self.draft_confidence < 1:
            raise ValueError(f"draft_confidence must be in [0, 1), not {self.draft_confidence}")


@dataclass(frozen=True)
class VadOptions:
    """Silero VAD's settings (vad.py), with faster-whisper's batched pipeline's values."""

    threshold: float = 0.5  # a 32 ms frame is speech above this probability
    min_silence: float = 0.16  # seconds below it (less 0.15) that end a stretch of speech
    speech_pad: float = 0.4  # seconds of the pause kept on each side of speech (at most half a pause)
    min_speech: float = 0.0  # stretches of speech shorter than this are dropped

    def __post_init__(self):
        if not 0 < self.threshold < 1:
            raise ValueError(f"VAD threshold must be in (0, 1), not {self.threshold}")
        for name in ("min_silence", "speech_pad", "min_speech"):
            if getattr(self, name) < 0:
                raise ValueError(f"VAD {name.replace('_', ' ')} must be >= 0 seconds, not {getattr(self, name)}")


@dataclass(frozen=True)
class ChunkingOptions:
    chunk_length: float = CHUNK_SECONDS  # most seconds of audio per window, at most 30
    # True: decode a file's speech only, in chunks cut at its pauses (vad.py); False: windows one
    # after another, each from where the text before it stopped (openai-whisper's way; for audio the
    # detector misjudges, such as speech over music); None: chunks for audio longer than one window,
    # a short clip whole (docs/decisions.md, "Long audio: VAD chunks")
    vad: bool | None = None
    vad_options: VadOptions = VadOptions()

    def __post_init__(self):
        if not 0 < self.chunk_length <= CHUNK_SECONDS:
            raise ValueError(f"chunk_length must be in (0, {CHUNK_SECONDS}] seconds, not {self.chunk_length}")


@dataclass(frozen=True)
class DistillOptions:
    layers: int = 2  # assistant decoder layers
    head: bool = False  # a draft head (model.DraftHead) rather than a decoder of its own
    hidden_weight: float = 1.0  # a draft head's: its regression loss onto the main decoder's hidden states
    head_features: tuple[int, ...] = ()  # main decoder layers whose outputs a head reads too (model.DraftHead)
    # a head's passes that read its own predicted hidden states, each the last one's, as drafts past the
    # first do (EAGLE-3's training-time test); k drafts read k - 1 generations of them
    head_test_depth: int = 1
    init_layers: tuple[int, ...] | None = None  # main layers to start from; default: spread, first and last kept
    # a distilled assistant (decoder kind) whose layers and draft vocabulary to start from instead
    init_assistant: str | None = None
    draft_vocab: int = 16384  # tokens the assistant can draft (timestamps and EOT included)
    # the tasks the main model labels windows for, so the tasks the assistant drafts for (its draft_tasks)
    tasks: tuple[str, ...] = ("transcribe",)
    steps: int = 1000
    batch_size: int = 16
    learning_rate: float = 3e-4
    warmup_steps: int = 50
    ce_weight: float = 0.8  # distil-whisper's weights and temperature
    kl_weight: float = 1.0
    kl_temperature: float = 2.0
    top_k: int = 16  # teacher logits kept per position
    join: int = 0  # also train on recordings of this many files end to end (see distill.data); 0: none
    augment: int = 0  # perturbed copies of every training recording (see distill.data.perturb)
    shifts: int = 1  # ways a long recording is cut into windows (see distill.data.plan_recordings)
    held_out: float = 0.1  # fraction of short files, and of each long file's end, kept out of training
    balance: float = 0.5  # language sampling: 1 as the data has them, 0 every language equally often
    eval_every: int = 100
    checkpoint_every: int = 100
    seed: int = 0

    def __post_init__(self):
        if self.init_layers is not None and self.init_assistant is not None:
            raise ValueError("init_layers and init_assistant both name what to start from: give one")
        if self.init_layers is not None and len(self.init_layers) != self.layers:
            raise ValueError(f"init_layers names {len(self.init_layers)} layers, layers is {self.layers}")
        if self.layers < 1 or self.steps < 1 or self.batch_size < 1 or not 0 <= self.held_out < 1:
            raise ValueError("layers, steps and batch_size must be >= 1 and held_out in [0, 1)")
        if self.join == 1 or self.join < 0:
            raise ValueError("join must be 0 (no joined recordings) or at least 2 files")
        if self.augment < 0 or self.shifts < 1:
            raise ValueError("augment must be >= 0 and shifts >= 1")
        if not 0 <= self.balance <= 1:
            raise ValueError("balance must be in [0, 1]")
        if not self.tasks or not set(self.tasks) <= set(TASKS) or len(set(self.tasks)) < len(self.tasks):
            raise ValueError(f"tasks must be one or both of {', '.join(TASKS)}, not {','.join(self.tasks)}")


PEERS = ("transformers", "faster-whisper", "whisper.cpp")  # bench.peers


@dataclass(frozen=True)
class BenchOptions:
    batch_sizes: tuple[int, ...] = (1, 4)
    int8: bool = False  # add int8 configurations (main-only and speculative)
    peers: tuple[str, ...] = PEERS  # those installed run too
    repeats: int = 3
    draft_tokens: int = DecodingOptions.draft_tokens
    draft_confidence: float = DecodingOptions.draft_confidence
    speculation: str = DecodingOptions.speculation  # of the speculative configurations
    task: str = "transcribe"
    prompt: str | None = None  # before every utterance (DecodingOptions.prompt), ours and the peers' alike
    cuda_graphs: bool = DecodingOptions.cuda_graphs
    compile: bool = False  # also time compiled configurations (DecodingOptions.compile)

    def __post_init__(self):
        unknown = [peer for peer in self.peers if peer not in PEERS]
        if unknown:
            raise ValueError(f"peers: no peer named {unknown[0]!r} (choose from {', '.join(PEERS)}, or none)")


OUTPUT_FORMATS = ("txt", "json", "srt", "vtt", "tsv")  # writers.RENDERERS


@dataclass(frozen=True)
class SubtitleOptions:
    """How srt and vtt cues are cut from segments (writers.cues). A cue never spans two segments;
    cutting one takes word timestamps (splits_segments), wrapping its lines does not."""

    max_words_per_line: int | None = None
    max_line_width: int | None = None  # characters; a longer word stands alone on its line
    # lines a cue holds; None: one with max_words_per_line (a cue per run of words), else the segment's all
    max_line_count: int | None = None
    # a cue's text shown word by word, the word being spoken underlined (openai-whisper's --highlight_words)
    highlight_words: bool = False

    def __post_init__(self):
        for name in ("max_words_per_line", "max_line_width", "max_line_count"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, not {getattr(self, name)}")

    @property
    def splits_segments(self) -> bool:
        """Whether cues can end inside a segment, so are timed by its words."""
        return self.max_words_per_line is not None or self.max_line_count is not None

    @property
    def needs_word_times(self) -> bool:
        """Whether its cues are timed by words (so decoding has to time them)."""
        return self.splits_segments or self.highlight_words


@dataclass(frozen=True)
class RayOptions:
    address: str | None = None  # None: a local Ray instance started for the run; "auto" or host:port: a cluster
    actors: int = 1  # actors holding one loaded pair each (on a GPU cluster: one per GPU)
    threads: int = 1  # CPU threads (and Ray CPUs) per actor

    def __post_init__(self):
        if self.actors < 1 or self.threads < 1:
            raise ValueError("actors and threads must be >= 1")


@dataclass(frozen=True)
class ServerOptions:
    """`whisper-spec serve`'s (server.create_app)."""

    model_id: str  # what GET /v1/models lists and requests name (besides OpenAI's whisper-1)
    max_batch: int = BATCH_SIZE  # windows of the requests in flight decoded together
    max_queue: int = 32  # requests in flight; more are answered 503 with Retry-After
    max_upload_mb: float = 25.0  # OpenAI's own limit
    api_key: str | None = None  # every request must send Authorization: Bearer KEY

    def __post_init__(self):
        if self.max_batch < 1 or self.max_queue < 1:
            raise ValueError(f"max_batch and max_queue must be at least 1, not {self.max_batch} and {self.max_queue}")
        if self.max_upload_mb <= 0:
            raise ValueError(f"max_upload_mb must be positive, not {self.max_upload_mb}")
