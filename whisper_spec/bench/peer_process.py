"""A peer engine in a process of its own: the loop its child process runs.

Why not in the benchmark's process: there, once CTranslate2 (faster-whisper) or ggml (whisper.cpp)
has computed, their idle threads slow every torch op for as long as their model lives, and the peer
would look faster than ours where it is not (decisions, "faster-whisper in a process of its own").
Each engine in its own process, as users run them, is the fair measurement.

An engine module (faster_whisper_process, whisper_cpp_process) imports neither torch nor the rest of
whisper_spec, so the child loads only the engine: it has `load(**settings)` -> its state and
`REQUESTS`, name -> function(state, **arguments). Requests and replies are pickled over a pipe
(audio as float32 arrays: ~1 ms for a LibriSpeech clip, a few tenths of a percent of a long
recording's transcription).
"""

from __future__ import annotations

import importlib
import resource


def serve(connection, engine: str, settings: dict) -> None:
    """The child's loop: load the engine, then answer (request, arguments) until None or the parent's
    end, each with ("ok", result, peak resident bytes of this process) or ("error", message)."""
    module = importlib.import_module(engine)
    try:
        state = module.load(**settings)
    except Exception as error:  # noqa: BLE001 - reported to the parent, which raises it
        connection.send(("error", f"{type(error).__name__}: {error}"))
        return
    connection.send(("ok", None, 0))
    while True:
        try:
            request = connection.recv()
        except EOFError:  # the parent ended without saying so
            return
        if request is None:
            return
        name, arguments = request
        try:
            result = module.REQUESTS[name](state, **arguments)
        except Exception as error:  # noqa: BLE001
            connection.send(("error", f"{type(error).__name__}: {error}"))
        else:
            connection.send(("ok", result, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024))
