"""Distil a small assistant decoder from a main Whisper model (distil-whisper's recipe, made small).

The assistant cross-attends to the main encoder (never trained, never stored). Its decoder starts
from the main decoder's embedding and a few of its layers spread out (first and last kept), and
learns to match the main model: cross-entropy on the main model's own greedy transcripts
(pseudo-labels, with and without timestamps) plus KL divergence to the main model's token
distributions (its top-k logits). It drafts from a subset of the vocabulary (see
choose_draft_vocab), so its output projection costs a fraction of the main model's.

Shared with the main model and not stored: the token embedding (and so the draft projection's
rows) and the cross-attention key/value projections, kept frozen. Encoder outputs, pseudo-labels
and teacher logits are computed once and cached on disk, so training epochs cost only the
assistant's own layers.
"""
