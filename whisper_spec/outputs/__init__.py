"""A Transcript -> txt, json, srt, vtt and tsv, written atomically."""
