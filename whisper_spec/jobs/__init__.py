"""A job's inputs (folders, globs, manifests, stdin) -> batch runs with resumable outputs and a summary, on this machine or on Ray."""
