"""Weights in: checkpoints (Hugging Face, CTranslate2, the embedded defaults) -> a loaded main model and assistant (WhisperPair) prepared for the device; out again as exports (Hugging Face, ggml)."""
