"""Verified tokens -> word timestamps, by openai-whisper's method (its timing.py): dynamic time
warping over the main decoder's cross-attention of its alignment heads.

The main decoder reads each window's prompt, text tokens and end of text in one pass; the
attention scores of the alignment heads over the window's audio frames, softmaxed, normalised per
frame and median-filtered, form a token-by-frame similarity, and the cheapest monotonic path
through it gives each token the frame where it begins. Only the main model's tokens and weights
enter, so word times are the same with and without an assistant.
"""

from __future__ import annotations

import string
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..decode.caches import kept_cache_length, self_attention_caches
from ..models.attention import CrossStates, DecoderCaches
from ..models.pair import Whisper
from ..models.tokenizer import TIME_PRECISION, Tokenizer
from ..speech.audio import HOP_LENGTH

MEDIAN_FILTER_WIDTH = 7  # encoder frames
# punctuation joined to the next word (prepended) or to the previous one (appended), as openai-whisper does
PREPEND_PUNCTUATIONS = "\"'“¿([{-"
APPEND_PUNCTUATIONS = "\"'.。,，!！?？:：”)]}、"
SENTENCE_END_MARKS = ".。!！?？"
NO_SPACE_LANGUAGES = {"zh", "ja", "th", "lo", "my", "yue"}  # words are split on characters there


@dataclass
class Word:
    word: str  # with its leading space, as Whisper writes it
    start: float  # seconds; on the window's timeline until placed on the file's
    end: float
    probability: float  # mean of its tokens' probabilities
    tokens: list[int]

    def as_dict(self) -> dict:
        return {"word": self.word, "start": round(self.start, 3), "end": round(self.end, 3),
                "probability": round(self.probability, 4)}


def dtw(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The cheapest path from the first to the last cell of cost [tokens, frames], moving one
    token, one frame or both at each step: (token index, frame index) of each cell on it.

    Anti-diagonals are computed a whole one at a time (a cell needs only the two before), with
    openai-whisper's order among equal costs: diagonal, then token, then frame."""
    n, m = cost.shape
    total = np.full((n + 1, m + 1), np.inf)
    total[0, 0] = 0.0
    trace = np.full((n + 1, m + 1), -1, dtype=np.int8)
    for diagonal in range(2, n + m + 1):
        i = np.arange(max(1, diagonal - m), min(n, diagonal - 1) + 1)
        j = diagonal - i
        c0, c1, c2 = total[i - 1, j - 1], total[i - 1, j], total[i, j - 1]
        step = np.where((c0 < c1) & (c0 < c2), 0, np.where((c1 < c0) & (c1 < c2), 1, 2))
        total[i, j] = cost[i - 1, j - 1] + np.choose(step, (c0, c1, c2))
        trace[i, j] = step
    trace[0, :], trace[:, 0] = 2, 1
    path = []
    i, j = n, m
    while i > 0 or j > 0:
        path.append((i - 1, j - 1))
        move = trace[i, j]
        i, j = (i - 1, j - 1) if move == 0 else (i - 1, j) if move == 1 else (i, j - 1)
    tokens, frames = np.array(path[::-1]).T
    return tokens, frames


def median_filter(x: Tensor, width: int) -> Tensor:
    """Median over a sliding window along the last axis, edges reflected."""
    pad = width // 2
    if x.shape[-1] <= pad:
        return x
    padded = F.pad(x, (pad, pad), mode="reflect")
    return padded.unfold(-1, width, 1).sort(dim=-1).values[..., pad]


def split_words(tokenizer: Tokenizer, tokens: list[int], language: str | None) -> list[list[int]]:
    """Tokens (end of text last) grouped into words: tokens that only together decode to whole
    characters stay together; a word begins at a space, a punctuation mark or a special token
    (at every character in languages written without spaces)."""
    eot = tokenizer.special.eot
    whole = tokenizer.decode([t for t in tokens if t < eot])
    pieces, current, offset = [], [], 0
    for token in tokens:
        current.append(token)
        text = tokenizer.decode(current)
        # an incomplete character the whole text has too is never completed: a piece of its own, as
        # openai-whisper splits (else every later token joined it, and went with the end of text)
        if "\ufffd" not in text or token >= eot or whole[offset + text.index("\ufffd") : ][:1] == "\ufffd":
            pieces.append((text, current))
            offset += len(text)
            current = []
    if current:
        pieces.append((tokenizer.decode(current), current))
    words: list[list[int]] = []
    for text, piece in pieces:
        begins = (language in NO_SPACE_LANGUAGES or piece[0] >= eot or text.startswith(" ")
                  or text.strip() in string.punctuation or not words)
        if begins:
            words.append(list(piece))
        else:
            words[-1] += piece
    return words


def _cap_sentence_ends(words: list[Word]) -> None:
    """A word at a sentence boundary is not longer than twice the median word (at most 0.7 s):
    DTW gives the pause after a sentence to its last word or the next one's first."""
    durations = np.array([w.end - w.start for w in words])
    durations = durations[durations.nonzero()]
    if not len(durations):
        return
    longest = 2 * min(0.7, float(np.median(durations)))
    for previous, word in zip(words, words[1:]):
        if word.end - word.start > longest:
            if word.word in SENTENCE_END_MARKS:
                word.end = word.start + longest
            elif previous.word in SENTENCE_END_MARKS:
                word.start = word.end - longest


def merge_punctuations(words: list[Word]) -> list[Word]:
    """Opening punctuation joins the next word, closing punctuation the previous one (keeping
    that word's times); the words that are left."""
    following = len(words) - 1  # the word prepended punctuation joins
    for i in range(len(words) - 2, -1, -1):
        previous = words[i]
        if previous.word.startswith(" ") and previous.word.strip() in PREPEND_PUNCTUATIONS:
            words[following].word = previous.word + words[following].word
            words[following].tokens = previous.tokens + words[following].tokens
            previous.word, previous.tokens = "", []
        else:
            following = i
    previous = 0  # the word appended punctuation joins
    for i in range(1, len(words)):
        word = words[i]
        if not words[previous].word.endswith(" ") and word.word and word.word in APPEND_PUNCTUATIONS:
            words[previous].word += word.word
            words[previous].tokens = words[previous].tokens + word.tokens
            word.word, word.tokens = "", []
        else:
            previous = i
    return [w for w in words if w.word]


def alignment_heads(model: Whisper) -> list[tuple[int, int]]:
    """The model's published alignment heads; where none are known, every head of the later
    half of the decoder layers (openai-whisper's fallback)."""
    if model.alignment_heads:
        return list(model.alignment_heads)
    dims = model.dims
    return [(layer, head) for layer in range(dims.n_text_layer // 2, dims.n_text_layer) for head in range(dims.n_text_head)]


@torch.inference_mode()
def word_timings(model: Whisper, cross: CrossStates, tokens: list[int], language: str | None, task: str,
                 n_samples: int) -> list[Word]:
    """A window's words, timed on its timeline; cross: its main decoder cross-attention states
    (one row of encoding.Encoded.main), tokens: its decoded tokens (timestamps are left out),
    n_samples: its audio samples (the attention is read over those frames only). One window a call:
    the alignment's shapes are the window's own, so its times do not depend on the windows decoded
    beside it (decisions, "A file's output does not depend on its batch")."""
    special, decoder = model.special, model.decoder
    text = [t for t in tokens if t < special.eot]
    if not text:
        return []
    prompt = special.prompt(language, task, timestamps=False)
    sequence = prompt + text + [special.eot]
    device = decoder.positional_embedding.device
    width = len(sequence)
    n_ctx = kept_cache_length(decoder) or 0  # the decoding's length where it holds the text: no new caches
    caches = DecoderCaches(cross, self_attention_caches(decoder, 1, n_ctx if n_ctx >= width else width))
    scores: list[Tensor] = []
    hidden = decoder.features(torch.tensor([sequence], device=device), torch.arange(width, device=device)[None], caches,
                              cross_scores=scores)[0]
    heads = torch.stack([scores[layer][0, head] for layer, head in alignment_heads(model)])

    first = len(prompt) - 1  # <|notimestamps|>: its logits are the first text token's
    probs = decoder.logits(hidden[first : first + len(text)])[:, : special.eot].softmax(dim=-1)
    token_probs = probs[torch.arange(len(text)), torch.tensor(text, device=device)].tolist()
    frames = max(n_samples // HOP_LENGTH // 2, 1)  # encoder frames of the audio: 2 mel frames each
    weights = heads[:, :width, :frames].float().softmax(dim=-1)
    std, mean = torch.std_mean(weights, dim=-2, keepdim=True, unbiased=False)
    weights = median_filter((weights - mean) / std, MEDIAN_FILTER_WIDTH)
    matrix = weights.mean(dim=0)[first:-1]  # rows: the positions that predict each text token and the end
    token_index, frame_index = dtw(-matrix.double().cpu().numpy())
    first_frames = frame_index[np.diff(token_index, prepend=-1).astype(bool)] * TIME_PRECISION
    groups = split_words(model.tokenizer, text + [special.eot], language)[:-1]  # the end of text is no word
    bounds = np.cumsum([0] + [len(g) for g in groups])
    words = [Word(model.tokenizer.decode(g), float(first_frames[a]), float(first_frames[b]),
                  float(np.mean(token_probs[a:b])), g) for g, a, b in zip(groups, bounds, bounds[1:])]
    _cap_sentence_ends(words)
    return merge_punctuations(words)
