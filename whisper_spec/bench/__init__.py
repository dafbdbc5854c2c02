"""Benchmark harness: the same utterances through main-only and speculative decoding (and the
tools people would use instead), WER with Whisper's normalizers, and a hard exactness check.

Timing discipline: audio is decoded before any timing; every configuration runs once as warm-up;
within each repeat every configuration runs on a block of utterances (a multiple of every batch
size) before the next block, so drifts in machine speed hit all alike; medians over repeats.
Generation time covers features, encoder and decoder.
"""
