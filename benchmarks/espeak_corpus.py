"""Synthetic multilingual training speech with other words than the shared TTS text: espeak-ng
reading thousands of distinct sentences a language, for assistant distillation only.

The shared `unlabeled_tts` audio is one ~1,000-word text a language in two voices, and a second
voice of the same text did not move acceptance on real speech (`distill_data_curve.sh`). This
writes what it lacks, other sentences: Debian's fortune collections (de, es, pt; for French the
Spanish ones machine-translated by Apertium) and the Debian Administrator's Handbook's
translations (de, es, fr, pt-BR), sentences of 6-30 words with no digits or command-like tokens,
read by espeak-ng with another voice variant, rate and pitch each, joined into recordings of a few
minutes (silence between sentences), 16 kHz FLAC, and a `manifest.jsonl` naming each recording's
language (so distill does not detect it). The voices are robotic: the point is the words; the
main model's transcripts are the labels.

    apt-get install espeak-ng fortunes-de fortunes-es fortunes-br debian-handbook apertium-fr-es
    python benchmarks/espeak_corpus.py --minutes 12 --output /tmp/ws/espeak
"""

from __future__ import annotations

import argparse
import html
import json
import random
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import librosa
import numpy as np
import soundfile as sf

SAMPLE_RATE = 16000
FORTUNES = Path("/usr/share/games/fortunes")
HANDBOOK = Path("/usr/share/doc/debian-handbook/html")
# language: (espeak-ng voice, fortune files, handbook translation); FLEURS' Portuguese is Brazilian
LANGUAGES = {
    "de": ("de", sorted((FORTUNES / "de").glob("*.u8")), "de-DE"),
    "es": ("es", sorted((FORTUNES / "es").glob("*.fortunes")), "es-ES"),
    "fr": ("fr-fr", [], "fr-FR"),
    "pt": ("pt-br", [FORTUNES / "brasil"], "pt-BR"),
}
# a sentence counts as the language's with one of its function words and none of English's (the
# handbook's translations leave some paragraphs in English)
FUNCTION_WORDS = {
    "de": {"der", "die", "das", "und", "ist", "nicht", "ein", "eine", "mit", "sich"},
    "es": {"el", "la", "los", "las", "que", "y", "es", "un", "una", "por"},
    "fr": {"le", "la", "les", "des", "est", "et", "une", "un", "que", "pas"},
    "pt": {"o", "a", "os", "as", "que", "e", "um", "uma", "não", "para"},
}
ENGLISH_WORDS = {"the", "and", "you", "is", "of", "with", "this", "that", "for", "are"}
VARIANTS = ["m1", "m2", "m3", "m4", "m5", "m6", "m7", "f1", "f2", "f3", "f4", "f5"]
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
# letters of these languages, spaces and sentence punctuation only: no digits, paths, options or code
SPEAKABLE = re.compile(r"^[A-Za-zÀ-ÖØ-öø-ÿŒœ ,.;:!?¡¿'’\"«»()-]+$")


def fortune_sentences(files: list[Path]) -> list[str]:
    texts = []
    for file in files:
        for entry in file.read_text(encoding="utf-8", errors="replace").split("\n%\n"):
            texts.append(" ".join(line.strip() for line in entry.splitlines() if not line.strip().startswith("--")))
    return texts


def handbook_sentences(translation: str) -> list[str]:
    texts = []
    for page in sorted((HANDBOOK / translation).glob("*.html")):
        for paragraph in re.findall(r"<p[^>]*>(.*?)</p>", page.read_text(encoding="utf-8", errors="replace"), re.S):
            texts.append(html.unescape(re.sub(r"<[^>]+>", "", paragraph)))
    return texts


def translated_fortunes(source: str, target: str) -> list[str]:
    """Another language's fortunes machine-translated (Apertium), those with no unknown word: Debian
    has no French fortunes, and the handbook alone is a few hundred French sentences."""
    lines = [" ".join(t.split()) for t in fortune_sentences(LANGUAGES[source][1])]
    out = subprocess.run(["apertium", f"{source}-{target}"], input="\n".join(lines), capture_output=True, text=True, check=True).stdout
    return [line for line in out.split("\n") if not re.search(r"[*#@]", line)]


def sentences(language: str) -> list[str]:
    """Distinct speakable sentences of 6-30 words, in a seeded order."""
    _, fortune_files, translation = LANGUAGES[language]
    extra = translated_fortunes("es", "fr") if language == "fr" else []
    found = set()
    for text in fortune_sentences(fortune_files) + handbook_sentences(translation) + extra:
        for sentence in SENTENCE_END.split(" ".join(text.split())):
            words = sentence.split()
            lowered = {w.strip(",.;:!?¡¿'’\"«»()").lower() for w in words}
            if (6 <= len(words) <= 30 and SPEAKABLE.match(sentence) and lowered & FUNCTION_WORDS[language]
                    and not lowered & ENGLISH_WORDS and not any(w.isupper() and len(w) > 3 for w in words)):
                found.add(sentence)
    ordered = sorted(found)
    random.Random(language).shuffle(ordered)
    return ordered


def speak(sentence: str, voice: str, rng: random.Random, workdir: Path) -> np.ndarray:
    wav = workdir / "sentence.wav"
    subprocess.run(["espeak-ng", "-v", f"{voice}+{rng.choice(VARIANTS)}", "-s", str(rng.randint(140, 190)),
                    "-p", str(rng.randint(30, 70)), "-w", str(wav), sentence], check=True, capture_output=True)
    audio, rate = sf.read(wav, dtype="float32")
    return librosa.resample(audio, orig_sr=rate, target_sr=SAMPLE_RATE)


def write_language(language: str, minutes: float, recording_minutes: float, output: Path, seed: int) -> list[dict]:
    voice = LANGUAGES[language][0]
    rng = random.Random(f"{seed}:{language}")
    pool = iter(sentences(language))
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for index in range(max(1, round(minutes / recording_minutes))):
            parts, seconds = [], 0.0
            while seconds < 60 * recording_minutes:
                sentence = next(pool, None)
                if sentence is None:
                    break
                audio = speak(sentence, voice, rng, Path(workdir))
                parts += [audio, np.zeros(int(SAMPLE_RATE * rng.uniform(0.3, 0.9)), dtype=np.float32)]
                seconds += len(parts[-2]) / SAMPLE_RATE + len(parts[-1]) / SAMPLE_RATE
            if not parts:
                break
            path = output / f"espeak-{language}-{index}.flac"
            sf.write(path, np.concatenate(parts), SAMPLE_RATE)
            rows.append({"path": path.name, "language": language, "duration_s": round(seconds, 2)})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--languages", default=",".join(LANGUAGES), help="comma-separated (default: %(default)s)")
    parser.add_argument("--minutes", type=float, default=12, help="audio a language (default: %(default)s)")
    parser.add_argument("--recording-minutes", type=float, default=3, help="length of each file (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args()
    for tool, package in (("espeak-ng", "espeak-ng"), ("apertium", "apertium-fr-es")):
        if shutil.which(tool) is None:
            parser.error(f"{tool} is not installed (apt-get install {package})")
    args.output.mkdir(parents=True, exist_ok=True)
    rows = []
    for language in args.languages.split(","):
        rows += write_language(language, args.minutes, args.recording_minutes, args.output, args.seed)
        print(f"{language}: {sum(r['duration_s'] for r in rows if r['language'] == language) / 60:.1f} min")
    (args.output / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
