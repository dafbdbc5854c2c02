"""Requests in flight -> one decoding thread -> their transcripts: the windows (speech chunks of long
uploads included) of every request with the same decoding options share batches of up to max_batch,
new requests' windows joining the next batch as others finish (docs/decisions.md, "Serving"). Live
streams' audio -> the same thread -> their updates: every stream with a second of new audio is
updated in one batch (live.update), before the next batch of windows.

A request's transcript is what `pipeline.transcribe` gives for its audio with its options: a
window's result does not depend on its batch; a live update is the main model's decoding of its
stream's buffer whatever shares its batch. The thread owns the model pair, the jobs and the streams;
requests and audio reach it through a queue, and leave with a future or a callback."""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field, replace

import numpy as np

from ..longform.pipeline import DecodingJob, transcribe
from ..longform.transcript import Failure, Transcript
from ..models.pair import WhisperPair
from ..options import ChunkingOptions, DecodingOptions
from ..speech.audio import SAMPLE_RATE
from .live import LiveStream, LiveUpdate, finish, transcript, update

LIVE_STEP_SECONDS = 1.0  # a live stream is updated once it has this much new audio (live.py's figures)
# when one is, every other stream with this much new audio joins its batch: streams out of step share batches
LIVE_JOIN_SECONDS = 0.5


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
    live_streams: int = 0  # opened
    live_updates: int = 0  # batches of live streams updated together
    live_rows: int = 0  # the streams those batches held

    def as_dict(self) -> dict:
        return {**vars(self), "mean_batch": round(self.batch_windows / self.batches, 3) if self.batches else None,
                "mean_live_batch": round(self.live_rows / self.live_updates, 3) if self.live_updates else None}


@dataclass
class _Request:
    name: str  # what errors and the job call it (the upload's file name)
    audio: np.ndarray
    options: DecodingOptions
    future: Future
    index: int = -1


@dataclass
class _Live:
    """A live stream the thread holds: its state, the new audio not yet decoded, and whom to tell. report
    is called on the thread with each update (None where the stream failed: error says why), and last
    with the finished Transcript."""

    stream: LiveStream
    report: Callable[[LiveUpdate | Transcript | None, str | None], None]
    fresh: int = 0  # samples fed since its last update
    ending: bool = False
    failed: bool = False
    incoming: list[np.ndarray] = field(default_factory=list)


@dataclass
class _LiveMessage:
    id: int
    samples: np.ndarray | None = None  # None: the stream ends
    opened: _Live | None = None


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
        self._admit("requests")
        future: Future = Future()
        future.add_done_callback(self._left)
        self._inbox.put(_Request(name, audio, options, future))
        return future

    def open_live(self, language: str | None, report) -> int:
        """A live stream (its language; None: detected), counted among the requests in flight (Busy beyond
        max_queue); report(update, error) is called on the decoding thread (_Live). Returns its id."""
        self._admit("live_streams")
        live_id = next(self._ids)
        self._inbox.put(_LiveMessage(live_id, opened=_Live(LiveStream(language=language), report)))
        return live_id

    def _admit(self, counted: str) -> None:
        """One more in flight, counted in stats under `counted`; Busy where max_queue are, or closing."""
        with self._lock:
            if self._closing or self._in_flight >= self.max_queue:
                self.stats.refused += 1
                raise Busy(f"{self._in_flight} requests in flight, the most this server holds")
            self._in_flight += 1
            setattr(self.stats, counted, getattr(self.stats, counted) + 1)

    def feed_live(self, live_id: int, samples: np.ndarray) -> None:
        """More of a live stream's 16 kHz samples."""
        self._inbox.put(_LiveMessage(live_id, samples=np.asarray(samples, np.float32)))

    def end_live(self, live_id: int) -> None:
        """The stream's audio is over: its last update and its transcript follow (report)."""
        self._inbox.put(_LiveMessage(live_id))

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
        jobs: dict[DecodingOptions, DecodingJob] = {}
        requests: dict[tuple[DecodingOptions, int], _Request] = {}
        lives: dict[int, _Live] = {}
        while True:
            idle = not any(job.pending for job in jobs.values()) and not any(_due(live) for live in lives.values())
            if idle and self._closing and not requests and not lives:
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
            for message in [m for m in incoming if isinstance(m, _LiveMessage)]:
                _take(lives, message)
            self._update_live(lives)
            try:
                for request in [r for r in incoming if isinstance(r, _Request)]:
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

    def _update_live(self, lives: dict[int, _Live]) -> None:
        """Where a stream has a step of new audio (or is at its end), it and every stream with
        LIVE_JOIN_SECONDS of new audio updated, max_batch at a time; an ending stream then finished. A
        batch that fails is updated stream by stream, and only a stream whose own update fails is
        dropped, told why."""
        due = []
        if any(_due(live) for live in lives.values()):
            due = [live_id for live_id, live in lives.items()
                   if _due(live) or live.fresh >= LIVE_JOIN_SECONDS * SAMPLE_RATE]
        for start in range(0, len(due), self.max_batch):
            group = [lives[live_id] for live_id in due[start : start + self.max_batch]]
            for live in group:
                live.stream.feed(np.concatenate(live.incoming) if live.incoming else np.zeros(0, np.float32))
                live.incoming, live.fresh = [], 0
            try:
                results = update(self.pair, [live.stream for live in group])
            except Exception:  # noqa: BLE001 -- which stream's fault: each alone
                results = [self._update_alone(live) for live in group]
            self.stats.live_updates += 1
            self.stats.live_rows += len(group)
            for live, result in zip(group, results):
                if result is not None:
                    _tell(live, result)
        for live_id in [live_id for live_id, live in lives.items() if live.failed or (live.ending and not live.fresh)]:
            live = lives.pop(live_id)
            if not live.failed:
                try:
                    finish(self.pair, live.stream)
                    _tell(live, transcript(self.pair, live.stream))
                except Exception as error:  # noqa: BLE001
                    _tell(live, None, f"the live stream failed: {type(error).__name__}: {error}")
            self._live_left()

    def _update_alone(self, live: _Live) -> LiveUpdate | None:
        try:
            return update(self.pair, [live.stream])[0]
        except Exception as error:  # noqa: BLE001
            _tell(live, None, f"the live stream failed: {type(error).__name__}: {error}")
            live.failed = True
            return None

    def _live_left(self) -> None:
        with self._lock:
            self._in_flight -= 1
            self.stats.finished += 1

    def _add(self, jobs: dict, requests: dict, request: _Request) -> None:
        """Plan a request's windows into the job of its options: requests that differ only in language
        and prompt share one (a batch decodes each window in its own language, and a prompt's windows
        batch apart: pipeline._Kind)."""
        key = replace(request.options, language=None, prompt=None)
        job = jobs.get(key)
        if job is None:
            job = jobs[key] = DecodingJob(self.pair, {}, key, self.max_batch, self.chunking, {}, {}, None, None)
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

    def _flush(self, job: DecodingJob, requests: dict) -> None:
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

    def _deliver(self, job: DecodingJob, requests: dict) -> None:
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


def _tell(live: _Live, result, error: str | None = None) -> None:
    """A live stream's update, transcript or error to its reporter; one whose listener is gone (a closed
    event loop) is not the thread's fault."""
    try:
        live.report(result, error)
    except Exception:  # noqa: BLE001
        live.failed = True


def _due(live: _Live) -> bool:
    """A live stream is updated once it has a step of new audio, and at its end."""
    return live.fresh >= LIVE_STEP_SECONDS * SAMPLE_RATE or (live.ending and live.fresh > 0)


def _take(lives: dict[int, _Live], message: _LiveMessage) -> None:
    """A live stream opened, fed or ended."""
    if message.opened is not None:
        lives[message.id] = message.opened
        return
    live = lives.get(message.id)
    if live is None or live.ending:
        return
    if message.samples is None:
        live.ending = True
    else:
        live.incoming.append(message.samples)
        live.fresh += len(message.samples)


def _answer(request: _Request, result: Transcript | Failure) -> None:
    try:
        request.future.set_result(result)
    except InvalidStateError:  # cancelled meanwhile: its client left
        pass


def _oldest(job: DecodingJob) -> int:
    return min(w.file for windows in job.pending.values() for w in windows)


def _withdraw(job: DecodingJob, index: int) -> None:
    """A request's windows out of the job's queue, and its file and result out of the job."""
    for kind in list(job.pending):
        job.pending[kind] = [w for w in job.pending[kind] if w.file != index]
        if not job.pending[kind]:
            del job.pending[kind]
    job.files.pop(index, None)
    job.done.pop(index, None)


def _forget(job: DecodingJob, index: int) -> None:
    """What a job keeps of a request by its name: nothing once it has left (a server runs for days)."""
    path = job.paths.pop(index, None)
    job.languages.pop(path, None)
    job.prompts.pop(path, None)
