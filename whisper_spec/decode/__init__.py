"""A batch of 30 s windows' features -> the encoder's states -> speculative rounds -> each window's tokens and verdicts (WindowResult), exactly the main model's."""
