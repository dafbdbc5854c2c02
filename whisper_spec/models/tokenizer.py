"""Whisper's special tokens and text decoding, read from a Hugging Face model directory."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import tokenizers

TIME_PRECISION = 0.02  # seconds per timestamp token
ENGLISH_EOT = 50256  # GPT-2's end of text, which English-only Whisper vocabularies keep (SpecialTokens.from_model_dir)


@dataclass(frozen=True)
class SpecialTokens:
    """The ids decoding needs. They differ between English-only and multilingual vocabularies."""

    eot: int
    sot: int
    transcribe: int | None
    translate: int | None
    no_timestamps: int
    lang_to_id: dict[str, int]  # "en" -> id of <|en|>; empty for English-only models
    suppress: tuple[int, ...]
    begin_suppress: tuple[int, ...]
    max_initial_timestamp_index: int | None = 50
    no_speech: int | None = None  # <|nospeech|> (<|nocaptions|> in older vocabularies): its probability after SOT
    previous: int | None = None  # <|startofprev|>: text before it, up to SOT, is read as what came before

    @property
    def timestamp_begin(self) -> int:
        return self.no_timestamps + 1

    @property
    def multilingual(self) -> bool:
        return bool(self.lang_to_id)

    @property
    def id_to_lang(self) -> dict[int, str]:
        return {i: lang for lang, i in self.lang_to_id.items()}

    def prompt(self, language: str | None, task: str, timestamps: bool, previous: Sequence[int] = ()) -> list[int]:
        """Decoder prompt: [<|startofprev|> previous] <|startoftranscript|> [<|lang|> <|task|>] [<|notimestamps|>].
        ValueError for translation with an English-only model (it has no task token: it would transcribe)."""
        if task == "translate" and not self.multilingual:
            raise ValueError("this model is English-only: it transcribes English and cannot translate (task translate)")
        tokens = [self.previous, *previous, self.sot] if previous else [self.sot]
        if self.multilingual:
            tokens += [self.lang_to_id[language], self.translate if task == "translate" else self.transcribe]
        if not timestamps:
            tokens.append(self.no_timestamps)
        return tokens

    def language_code(self, language: str | None) -> str | None:
        """The code of a language given by code or by name, as openai-whisper takes them ("de",
        "German", "german"); None stays None. ValueError where this model has no such language."""
        if language is None:
            return None
        code = language.strip().lower()
        if code not in self.lang_to_id and code != "en":
            # names and aliases: the table transformers keeps (imported only for a name)
            from transformers.models.whisper.tokenization_whisper import TO_LANGUAGE_CODE

            code = TO_LANGUAGE_CODE.get(code, code)
        if not self.multilingual:
            if code != "en":
                raise ValueError(f"this model is English-only; cannot use language {language!r}")
        elif code not in self.lang_to_id:
            raise ValueError(f"unknown language {language!r}; known: {', '.join(sorted(self.lang_to_id))} "
                             "(or their names, such as German)")
        return code

    @staticmethod
    def language_name(code: str | None) -> str | None:
        """A language's name as OpenAI's API writes it ("de" -> "german"); None stays None."""
        if code is None:
            return None
        from transformers.models.whisper.tokenization_whisper import LANGUAGES

        return LANGUAGES.get(code, code)

    @classmethod
    def from_model_dir(cls, path: Path, vocabulary: tokenizers.Tokenizer | None = None) -> "SpecialTokens":
        """From generation_config.json (written by Hugging Face and by our converter) and the
        tokenizer (vocabulary: tokenizer.json already read). What an older config lacks (languages,
        tasks, whether the model is multilingual, the no-timestamps token) is read from the tokenizer's
        special tokens, as transformers does."""
        gen = json.loads((path / "generation_config.json").read_text())
        vocabulary = vocabulary or read_vocabulary(path)
        token = vocabulary.token_to_id
        eot = gen.get("eos_token_id") or token("<|endoftext|>")
        sot = gen.get("decoder_start_token_id") or token("<|startoftranscript|>")
        task_to_id = gen.get("task_to_id") or {task: token(f"<|{task}|>") for task in ("transcribe", "translate")}
        if gen.get("lang_to_id"):
            lang_to_id = {k.strip("<|>"): v for k, v in gen["lang_to_id"].items()}
        else:  # the language tokens follow <|startoftranscript|> up to the first task token
            first_task = min((i for i in task_to_id.values() if i is not None), default=sot + 1)
            lang_to_id = {vocabulary.id_to_token(i).strip("<|>"): i for i in range(sot + 1, first_task)}
        # English-only vocabularies keep GPT-2's end of text; multilingual ones have a token more before it
        multilingual = gen.get("is_multilingual", bool(gen["lang_to_id"]) if "lang_to_id" in gen else eot > ENGLISH_EOT)
        no_speech = next((i for i in map(token, ("<|nospeech|>", "<|nocaptions|>")) if i is not None), None)
        return cls(
            eot=eot,
            sot=sot,
            transcribe=task_to_id.get("transcribe"),
            translate=task_to_id.get("translate"),
            no_timestamps=gen.get("no_timestamps_token_id") or token("<|notimestamps|>"),
            lang_to_id=lang_to_id if multilingual else {},
            suppress=tuple(gen.get("suppress_tokens") or ()),
            begin_suppress=tuple(gen.get("begin_suppress_tokens") or ()),
            max_initial_timestamp_index=gen.get("max_initial_timestamp_index"),
            no_speech=no_speech,
            previous=token("<|startofprev|>"),
        )

    def fingerprint(self) -> dict:
        """What two models must share for one to draft for the other."""
        return {
            "eot": self.eot,
            "sot": self.sot,
            "transcribe": self.transcribe,
            "translate": self.translate,
            "no_timestamps": self.no_timestamps,
            "languages": self.lang_to_id,
        }


def read_vocabulary(path: Path) -> tokenizers.Tokenizer:
    """The model's tokenizer.json; FileNotFoundError naming it where missing (the tokenizers library's
    own message names no file)."""
    file = path / "tokenizer.json"
    if not file.is_file():
        raise FileNotFoundError(f"{file}: no such file (a Whisper model directory holds its vocabulary there)")
    return tokenizers.Tokenizer.from_file(str(file))


class Tokenizer:
    """Token ids -> text, with timestamp and special tokens left out."""

    def __init__(self, vocabulary: tokenizers.Tokenizer, special: SpecialTokens):
        self._tokenizer = vocabulary
        self.special = special

    def decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode([i for i in ids if i < self.special.eot])

    def encode(self, text: str) -> list[int]:
        return self._tokenizer.encode(text, add_special_tokens=False).ids
