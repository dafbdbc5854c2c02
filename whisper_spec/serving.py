"""Requests in flight -> one decoding thread -> their transcripts: the windows (speech chunks of long
uploads included) of every request with the same decoding options share batches of up to max_batch,
new requests' windows joining the next batch as others finish (docs/decisions.md, "Serving").

A request's transcript is what `pipeline.transcribe` gives for its audio with its options: a
window's result does not depend on its batch. The thread owns the model pair and the jobs; requests
reach it through a queue and leave with a future."""

from __future__ import annotations

import itertools
import queue
import threading
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, replace

import numpy as np

from .options import ChunkingOptions, DecodingOptions
from .pair import WhisperPair
from .pipeline import Failure, Transcript, _Job, transcribe


class Busy(Exception):
    """The queue of requests in flight is full: the caller is to try again later."""


@dataclass
class ServingStats:
    """What the scheduler has done since it started (GET /health): requests by outcome, batches and
    the windows they held (their mean is the batch occupancy)."""

    requests: int = 0
    finished: int = 0
    failed: int = 0
    cancelled: int = 0
    refused: int = 0
    batches: int = 0
    batch_windows: int = 0

    def as_dict(self) -> dict:
        return {**vars(self), "mean_batch": round(self.batch_windows / self.batches, 3) if self.batches else None}


@dataclass
class _Request:
    name: str  # what errors and the job call it (the upload's file name)
    audio: np.ndarray
    options: DecodingOptions
    future: Future
    index: int = -1


class Scheduler:
    """A thread decoding the windows of every request in flight in shared batches.

    submit() returns a Future of the request's Transcript (or Failure); cancel() takes a request's
    windows out of the batches to come (a client that left); close() lets the requests in flight
    finish, then stops the thread. At most max_queue requests are in flight: submit() raises Busy
    beyond that, so memory stays bounded."""

    def __init__(self, pair: WhisperPair, max_batch: int, max_queue: int, chunking: ChunkingOptions = ChunkingOptions()):
        self.pair, self.max_batch, self.max_queue, self.chunking = pair, max_batch, max_queue, chunking
        self.stats = ServingStats()
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._in_flight = 0
        self._closing = False
        self._ids = itertools.count()
        self._thread = threading.Thread(target=self._run, name="whisper-spec-decoder", daemon=True)
        self._thread.start()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def submit(self, name: str, audio: np.ndarray, options: DecodingOptions) -> Future:
        """Queue a request: its 16 kHz samples and options; raises Busy where max_queue are in flight."""
        with self._lock:
            if self._closing or self._in_flight >= self.max_queue:
                self.stats.refused += 1
                raise Busy(f"{self._in_flight} requests in flight, the most this server holds")
            self._in_flight += 1
            self.stats.requests += 1
        future: Future = Future()
        future.add_done_callback(self._left)
        self._inbox.put(_Request(name, audio, options, future))
        return future

    def cancel(self, future: Future) -> None:
        """The request's client left: its windows leave the batches to come (those decoding finish)."""
        if future.cancel():
            self._inbox.put(None)  # wake the thread to drop its windows

    def close(self, timeout: float | None = None) -> None:
        """Refuse new requests, finish those in flight, stop the thread."""
        with self._lock:
            self._closing = True
        self._inbox.put(None)
        self._thread.join(timeout)

    def _left(self, future: Future) -> None:
        with self._lock:
            self._in_flight -= 1
            if future.cancelled():
                self.stats.cancelled += 1
            elif isinstance(future.result(), Failure):
                self.stats.failed += 1
            else:
                self.stats.finished += 1

    def _run(self) -> None:
        jobs: dict[DecodingOptions, _Job] = {}
        requests: dict[tuple[DecodingOptions, int], _Request] = {}
        while True:
            idle = not any(job.pending for job in jobs.values())
            if idle and self._closing and not requests:
                return
            try:  # wait for work only where there is none to do
                incoming = [self._inbox.get(timeout=None if idle else 0)]
            except queue.Empty:
                incoming = []
            while True:
                try:
                    incoming.append(self._inbox.get_nowait())
                except queue.Empty:
                    break
            try:
                for request in filter(None, incoming):
                    if not request.future.cancelled():
                        self._add(jobs, requests, request)
                self._drop_cancelled(jobs, requests)
                waiting = [job for job in jobs.values() if job.pending]
                if waiting:  # the job whose oldest request waits longest
                    self._flush(min(waiting, key=_oldest), requests)
                for key in [key for key, job in jobs.items() if not job.files and not job.pending]:
                    del jobs[key]
            except Exception as error:  # noqa: BLE001 -- a fault of the scheduler's own: answer everyone, go on
                for request in requests.values():
                    _answer(request, Failure(request.name, f"{request.name}: the server failed: {error}"))
                jobs.clear()
                requests.clear()

    def _add(self, jobs: dict, requests: dict, request: _Request) -> None:
        """Plan a request's windows into the job of its options: requests that differ only in language
        and prompt share one (a batch decodes each window in its own language, and a prompt's windows
        batch apart: pipeline._Kind)."""
        key = replace(request.options, language=None, prompt=None)
        job = jobs.get(key)
        if job is None:
            job = jobs[key] = _Job(self.pair, {}, key, self.max_batch, self.chunking, {}, {}, None, None)
        request.index = next(self._ids)
        path = job.paths[request.index] = f"{request.index}:{request.name}"  # what languages and prompts are keyed by
        if request.options.prompt is not None:
            job.prompts[path] = request.options.prompt
        requests[key, request.index] = request
        try:
            language = self.pair.main.special.language_code(request.options.language)
            job.add(request.index, path, request.audio, language)
        except Exception as error:  # noqa: BLE001 -- this request's failure, never the server's
            _withdraw(job, request.index)
            job.done[request.index] = Failure(request.name, f"{request.name}: {error}")
        self._deliver(job, requests)

    def _flush(self, job: _Job, requests: dict) -> None:
        """Decode the next batch of a job; where it fails, its requests are decoded one by one, and only
        one whose own decoding fails gets a Failure."""
        kind = next(iter(job.pending))
        batch = job.pending[kind][: job.batch_size]
        self.stats.batches += 1
        self.stats.batch_windows += len(batch)
        try:
            job.flush(kind)
        except Exception:  # noqa: BLE001
            for index in sorted({w.file for w in batch}):
                _withdraw(job, index)
                job.done[index] = self._alone(requests[job.options, index])
        self._deliver(job, requests)

    def _alone(self, request: _Request) -> Transcript | Failure:
        try:
            return next(transcribe(self.pair, [request.name], request.options, batch_size=1, chunking=self.chunking,
                                   load=lambda _: request.audio))
        except Exception as error:  # noqa: BLE001
            return Failure(request.name, f"{request.name}: {type(error).__name__}: {error}")

    def _deliver(self, job: _Job, requests: dict) -> None:
        """Hand the job's finished results to their requests, and forget them."""
        for index in list(job.done):
            request = requests.pop((job.options, index))
            result = job.done.pop(index)
            _forget(job, index)
            if isinstance(result, Transcript):
                result.path = request.name
            _answer(request, result)

    def _drop_cancelled(self, jobs: dict, requests: dict) -> None:
        for (options, index), request in list(requests.items()):
            if request.future.cancelled():
                _withdraw(jobs[options], index)
                _forget(jobs[options], index)
                del requests[options, index]


def _answer(request: _Request, result: Transcript | Failure) -> None:
    try:
        request.future.set_result(result)
    except InvalidStateError:  # cancelled meanwhile: its client left
        pass


def _oldest(job: _Job) -> int:
    return min(w.file for windows in job.pending.values() for w in windows)


def _withdraw(job: _Job, index: int) -> None:
    """A request's windows out of the job's queue, and its file and result out of the job."""
    for kind in list(job.pending):
        job.pending[kind] = [w for w in job.pending[kind] if w.file != index]
        if not job.pending[kind]:
            del job.pending[kind]
    job.files.pop(index, None)
    job.done.pop(index, None)


def _forget(job: _Job, index: int) -> None:
    """What a job keeps of a request by its name: nothing once it has left (a server runs for days)."""
    path = job.paths.pop(index, None)
    job.languages.pop(path, None)
    job.prompts.pop(path, None)
