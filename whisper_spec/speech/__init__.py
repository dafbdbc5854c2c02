"""Audio in: files and streams -> 16 kHz samples and log-mel features (audio), speech regions and chunks cut at pauses (vad)."""
