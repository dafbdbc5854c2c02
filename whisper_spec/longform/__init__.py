"""Files -> windows (speech chunks or one after another) -> decoded batches -> segments with words -> one Transcript per file."""
