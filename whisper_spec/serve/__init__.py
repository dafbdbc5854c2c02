"""HTTP requests and live audio streams -> decoding batches shared between them -> OpenAI-shaped responses and live text."""
