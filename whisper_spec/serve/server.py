"""HTTP requests -> the serving scheduler -> OpenAI's response shapes: `whisper-spec serve`.

OpenAI's audio API (POST /v1/audio/transcriptions and /v1/audio/translations, GET /v1/models) on
Starlette: the form fields OpenAI takes, its response formats, and its error shape ({"error":
{"message", "type", "param", "code"}}) for what it refuses. A request's transcript is what
`whisper-spec transcribe` gives for the file with the same options (serving.Scheduler).

Live: a WebSocket at /v1/audio/live takes 16 kHz mono 16-bit PCM (binary messages) and answers each
update with {"type": "update", "confirmed", "tentative", "text", "seconds"}; {"type": "end"} (or
closing) ends the stream, answered with {"type": "final", "text", "language", "duration", "segments"}.
GET /live is a page that streams the browser's microphone there (data/live.html)."""

from __future__ import annotations

import asyncio
import hmac
import json
import tempfile
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path

import numpy as np
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import HTTPConnection, Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from ..longform.transcript import Failure, Transcript
from ..models.pair import WhisperPair
from ..options import TEMPERATURE_INCREMENT, ChunkingOptions, DecodingOptions, ServerOptions, temperature_schedule
from ..outputs.writers import render
from ..speech.audio import AudioError, load_audio
from .live import LiveUpdate
from .serving import Busy, Scheduler

RESPONSE_FORMATS = ("json", "text", "srt", "verbose_json", "vtt")
GRANULARITIES = ("word", "segment")
FIELDS = {"file", "model", "language", "prompt", "response_format", "temperature", "timestamp_granularities[]", "stream"}
OPENAI_MODEL = "whisper-1"  # the name OpenAI's clients send by default: the model this server serves
RETRY_AFTER_SECONDS = 1


class ApiError(Exception):
    """A request refused: its HTTP status and OpenAI's error body."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 kind: str = "invalid_request_error", headers: dict | None = None):
        super().__init__(message)
        self.status, self.param, self.code, self.kind, self.headers = status, param, code, kind, headers

    def response(self) -> JSONResponse:
        body = {"error": {"message": str(self), "type": self.kind, "param": self.param, "code": self.code}}
        return JSONResponse(body, status_code=self.status, headers=self.headers)


class _Api:
    """The application's handlers, over one pair and its scheduler (one decoding thread), which the
    application's lifespan starts and stops (its requests in flight finish first)."""

    def __init__(self, pair: WhisperPair, options: ServerOptions, chunking: ChunkingOptions):
        self.pair, self.options, self.chunking = pair, options, chunking
        self.scheduler: Scheduler | None = None

    @asynccontextmanager
    async def lifespan(self, app):
        self.scheduler = Scheduler(self.pair, self.options.max_batch, self.options.max_queue, self.chunking)
        yield
        await run_in_threadpool(self.scheduler.close)

    async def transcriptions(self, request: Request) -> Response:
        return await self.audio(request, "transcribe")

    async def translations(self, request: Request) -> Response:
        return await self.audio(request, "translate")

    async def audio(self, request: Request, task: str) -> Response:
        form = None
        try:
            _authorize(request, self.options.api_key)
            form = await _form(request, self.options.max_upload_mb)
            upload, decoding, response_format, words = _read_form(form, task, self.pair, self.options.model_id)
            audio = await run_in_threadpool(_decode_upload, upload)
            try:
                future = self.scheduler.submit(upload.filename or "upload", audio, decoding)
            except Busy as busy:
                raise ApiError(503, f"the server is busy: {busy}; try again shortly", code="server_busy",
                               kind="server_error", headers={"Retry-After": str(RETRY_AFTER_SECONDS)}) from None
            result = await _wait(request, asyncio.wrap_future(future), self.scheduler, future)
            if result is None:  # the client left
                return Response(status_code=499)
            if isinstance(result, Failure):
                raise ApiError(400, result.error, param="file")
            return _respond(result, response_format, words, task, self.pair)
        except ApiError as error:
            return error.response()
        finally:
            if form is not None:  # the upload's spooled file
                await form.close()

    async def models(self, request: Request) -> Response:
        try:
            _authorize(request, self.options.api_key)
        except ApiError as error:
            return error.response()
        return JSONResponse({"object": "list", "data": [_model(self.options.model_id)]})

    async def health(self, request: Request) -> Response:
        scheduler, options = self.scheduler, self.options
        return JSONResponse({"status": "ok" if scheduler.alive else "stopped", "model": options.model_id,
                             "in_flight": scheduler.in_flight, "max_batch": options.max_batch,
                             "max_queue": options.max_queue, **scheduler.stats.as_dict()},
                            status_code=200 if scheduler.alive else 503)

    async def live(self, websocket: WebSocket) -> None:
        await websocket.accept()
        try:
            _authorize(websocket, self.options.api_key, in_query=True)
            try:
                language = self.pair.main.special.language_code(websocket.query_params.get("language") or None)
            except ValueError as error:
                raise ApiError(400, f"language: {error}", param="language") from None
            await _live(websocket, self.scheduler, language, self.pair)
        except ApiError as error:
            await websocket.send_json({"type": "error", "message": str(error), "code": error.code})
            await websocket.close(1013 if error.status == 503 else 1008)

    async def page(self, request: Request) -> Response:
        return HTMLResponse(resources.files("whisper_spec").joinpath("data/live.html").read_text())


def create_app(pair: WhisperPair, options: ServerOptions, chunking: ChunkingOptions = ChunkingOptions()) -> Starlette:
    """The ASGI application: OpenAI's audio API, the models list, health, and the live socket and page."""
    api = _Api(pair, options, chunking)
    return Starlette(routes=[
        Route("/v1/audio/transcriptions", api.transcriptions, methods=["POST"]),
        Route("/v1/audio/translations", api.translations, methods=["POST"]),
        Route("/v1/models", api.models, methods=["GET"]),
        Route("/health", api.health, methods=["GET"]),
        WebSocketRoute("/v1/audio/live", api.live),
        Route("/live", api.page, methods=["GET"]),
    ], lifespan=api.lifespan)


async def _live(websocket: WebSocket, scheduler: Scheduler, language: str | None, pair: WhisperPair) -> None:
    """One live stream: the socket's PCM fed to the scheduler, each update sent back as it comes; the
    stream ends with the socket's {"type": "end"} or its close (then nothing is sent)."""
    loop, outbox = asyncio.get_running_loop(), asyncio.Queue()
    tokenizer, text = pair.main.tokenizer, []

    def report(result, error) -> None:  # on the decoding thread
        if isinstance(result, LiveUpdate):
            text.append(tokenizer.decode(result.confirmed))
            result = {"type": "update", "confirmed": text[-1], "tentative": tokenizer.decode(result.tentative),
                      "text": "".join(text).strip(), "seconds": round(result.seconds, 2)}
        elif isinstance(result, Transcript):
            result = {"type": "final", "text": result.text, "duration": round(result.duration, 3),
                      "language": pair.main.special.language_name(result.language),
                      "segments": [{"start": round(s.start, 3), "end": round(s.end, 3), "text": s.text}
                                   for s in result.segments]}
        else:
            result = {"type": "error", "message": error, "code": "live_failed"}
        loop.call_soon_threadsafe(outbox.put_nowait, result)

    try:
        live_id = scheduler.open_live(language, report)
    except Busy as busy:
        raise ApiError(503, f"the server is busy: {busy}; try again shortly", code="server_busy") from None

    async def send() -> None:
        while True:
            message = await outbox.get()
            await websocket.send_json(message)
            if message["type"] != "update":
                await websocket.close()
                return

    sender = asyncio.create_task(send())
    try:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                break
            if message.get("bytes") is not None:
                scheduler.feed_live(live_id, np.frombuffer(message["bytes"][: len(message["bytes"]) // 2 * 2],
                                                           dtype="<i2").astype(np.float32) / 32768.0)
            elif json.loads(message.get("text") or "{}").get("type") == "end":
                scheduler.end_live(live_id)
                await sender
                return
    except (WebSocketDisconnect, json.JSONDecodeError):
        pass
    scheduler.end_live(live_id)  # the client left: its stream still ends, freeing its place
    sender.cancel()


def _model(model_id: str) -> dict:
    return {"id": model_id, "object": "model", "created": 0, "owned_by": "whisper-spec"}


def _authorize(connection: HTTPConnection, api_key: str | None, in_query: bool = False) -> None:
    """The request's key (Authorization: Bearer KEY) against the server's; in_query: a WebSocket's may
    come as ?api_key=KEY too (a browser cannot set a socket's headers)."""
    if api_key is None:
        return
    scheme, _, token = connection.headers.get("authorization", "").partition(" ")
    given = token.strip() if scheme.lower() == "bearer" else ""
    if in_query and not given:
        given = connection.query_params.get("api_key", "")
    if not hmac.compare_digest(given.encode(), api_key.encode()):
        where = "Authorization: Bearer KEY" + (" or ?api_key=KEY" if in_query else "")
        raise ApiError(401, f"Incorrect API key provided: send {where} with the server's --api-key",
                       code="invalid_api_key")


async def _form(request: Request, max_upload_mb: float):
    """The multipart form, its size held to max_upload_mb however the body is sent (413 beyond)."""
    limit = int(max_upload_mb * 1024 * 1024)
    too_large = ApiError(413, f"the upload is over the server's limit of {max_upload_mb:g} MB (--max-upload-mb)",
                         param="file", code="file_too_large")
    if int(request.headers.get("content-length") or 0) > limit:
        raise too_large
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise ApiError(400, "the request must be multipart/form-data with the audio as 'file'")

    async def limited():
        received = 0
        async for chunk in request.stream():
            received += len(chunk)
            if received > limit:
                raise too_large
            yield chunk

    try:
        return await MultiPartParser(request.headers, limited(), max_part_size=limit).parse()
    except MultiPartException as error:
        raise ApiError(400, f"the form could not be read: {error.message}") from None


def _read_form(form, task: str, pair: WhisperPair, model_id: str) -> tuple[UploadFile, DecodingOptions, str, bool]:
    """The upload, the decoding options the form asks for (as `whisper-spec transcribe` would take
    them), the response format, and whether words are timed; ApiError for what OpenAI would refuse."""
    unknown = sorted(set(form.keys()) - (FIELDS if task == "transcribe" else FIELDS - {"language"}))
    if unknown:
        raise ApiError(400, f"Unrecognized request argument supplied: {', '.join(unknown)}", param=unknown[0])
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        raise ApiError(400, "you must provide a 'file' (the audio) with the request", param="file")
    model = form.get("model")
    if not model:
        raise ApiError(400, "you must provide a model parameter", param="model")
    if model not in (model_id, OPENAI_MODEL):
        raise ApiError(404, f"The model `{model}` does not exist: this server serves `{model_id}` "
                            f"(also named `{OPENAI_MODEL}`)", param="model", code="model_not_found")
    response_format = form.get("response_format") or "json"
    if response_format not in RESPONSE_FORMATS:
        raise ApiError(400, f"'{response_format}' is not one of {', '.join(RESPONSE_FORMATS)} - 'response_format'",
                       param="response_format")
    if str(form.get("stream", "false")).lower() not in ("false", "0"):
        raise ApiError(400, "streamed responses are not supported by this server: leave 'stream' out", param="stream")
    granularities = form.getlist("timestamp_granularities[]")
    if any(g not in GRANULARITIES for g in granularities):
        raise ApiError(400, f"timestamp_granularities[] takes {' and '.join(GRANULARITIES)}, not {granularities}",
                       param="timestamp_granularities[]")
    if granularities and response_format != "verbose_json":
        raise ApiError(400, "response_format must be set verbose_json to use timestamp granularities",
                       param="timestamp_granularities[]")
    try:
        temperature = float(form.get("temperature") or 0.0)
    except ValueError:
        raise ApiError(400, f"temperature must be a number, not {form.get('temperature')!r}", param="temperature") from None
    if not 0.0 <= temperature <= 1.0:
        raise ApiError(400, f"temperature must be between 0 and 1, not {temperature:g}", param="temperature")
    language = form.get("language") or None
    if language is not None:
        try:
            language = pair.main.special.language_code(language)
        except ValueError as error:
            raise ApiError(400, str(error), param="language") from None
    words = "word" in granularities
    options = DecodingOptions(task=task, language=language, prompt=form.get("prompt") or None,
                              temperature=temperature_schedule(temperature, TEMPERATURE_INCREMENT),
                              timestamps=response_format in ("srt", "vtt", "verbose_json"), word_timestamps=words)
    return upload, options, response_format, words


def _decode_upload(upload: UploadFile):
    """The upload's 16 kHz samples; ApiError (400) naming the file where it holds no audio."""
    name = upload.filename or "upload"
    upload.file.seek(0, 2)
    if upload.file.tell() == 0:
        raise ApiError(400, f"{name}: the file is empty", param="file")
    upload.file.seek(0)
    with tempfile.NamedTemporaryFile(suffix=Path(name).suffix) as copy:
        while chunk := upload.file.read(1 << 20):
            copy.write(chunk)
        copy.flush()
        try:
            return load_audio(copy.name)
        except AudioError as error:
            raise ApiError(400, str(error).replace(copy.name, name), param="file") from None


async def _wait(request: Request, result: asyncio.Future, scheduler: Scheduler, future) -> Transcript | Failure | None:
    """The request's result, or None where its client disconnected first (its windows then leave the batches)."""
    while True:
        done, _ = await asyncio.wait([result], timeout=0.25)
        if done:
            return result.result()
        if await request.is_disconnected():
            scheduler.cancel(future)
            return None


def _respond(transcript: Transcript, response_format: str, words: bool, task: str, pair: WhisperPair) -> Response:
    if response_format == "json":
        return JSONResponse({"text": transcript.text})
    if response_format == "text":
        return PlainTextResponse(transcript.text + "\n")
    if response_format in ("srt", "vtt"):
        return PlainTextResponse(render(transcript, response_format))
    body = {"task": task, "language": pair.main.special.language_name(transcript.language),
            "duration": round(transcript.duration, 3), "text": transcript.text,
            "segments": [{"id": i, "seek": 0, "start": round(s.start, 3), "end": round(s.end, 3), "text": s.text,
                          "tokens": s.tokens, "temperature": s.temperature, "avg_logprob": s.avg_logprob,
                          "compression_ratio": s.compression_ratio, "no_speech_prob": s.no_speech_prob}
                         for i, s in enumerate(transcript.segments)]}
    if words:
        body["words"] = [{"word": w.word.strip(), "start": round(w.start, 3), "end": round(w.end, 3)}
                         for s in transcript.segments for w in s.words]
    return JSONResponse(body)
