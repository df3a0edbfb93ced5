"""The local web calculator: a JSON API under /api over planner.api, and two static pages.

Every request is hostile input: bodies are capped, models are catalog names or a pasted
config.json (never a path or a Hub fetch on the server's behalf), and every bad field comes back
as a 4xx naming it. The library returns dataclasses; the JSON renderers in render/ turn them into
the same documents the CLI prints.

A web page on another site can reach a server on 127.0.0.1 too, through a name it points there (DNS
rebinding): `Guard` answers only requests addressed to this server's own names, stops every request at a
wall-clock limit and sends the headers that keep the pages out of other sites' frames and scripts.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import re
import socket
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from functools import partial
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Literal, TypeVar

import h11
from fastapi import FastAPI, Request as HttpRequest
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException
from uvicorn import Config, Server
from uvicorn.protocols.http.h11_impl import H11Protocol

from planner import api
from planner.catalog.load import Catalog, load_catalog
from planner.errors import PlannerInputError
from planner.estimator.engines.registry import engine_names, export_targets, label, profiled_engines
from planner.units import MAX_BATCH, MAX_CONTEXT, MAX_GPUS_PER_REPLICA
from planner.yamlfile import parse_yaml

# A scenario or a config.json is a few KB; 1 MiB leaves room for the largest pasted config
# (DeepSeek-V3's config.json is 1.7 KB) while keeping a hostile client from filling memory.
MAX_BODY_BYTES = 1 << 20
# Far above what one replica serves (requests/s); a larger rate is a typo
MAX_RATE = 1e6
# Benchmark result files one comparison takes (a result is a few KB; all of them share the body's MAX_BODY_BYTES)
MAX_RESULT_FILES = 20
# Runs a calibration is fitted on at the least: a single run's factors match it exactly, with no run to test them on
FIT_RUNS = 2
# Every request is answered within this many seconds, body upload included (planner's contract: an answer or
# one error within 10 s); what is still running then is abandoned to its own time limit, below.
REQUEST_TIME_LIMIT_S = 9.0
# A solve, report or export searches for at most this many seconds from when its work starts (a report: less the
# time its charts take to draw), leaving the rest of the request's limit to re-check and render. The CLI takes longer.
WORK_TIME_LIMIT_S = 6.0
# Requests computing at once (estimates take milliseconds, solves seconds): more wait their turn, within the
# request's time limit. A request whose client has left is dropped from the queue.
WORKERS = 4
# Seconds a connection may take to send a request's headers (a browser sends them at once); an idle or trickling
# connection is closed then, so idle connections cannot hold every slot the server has.
HEADERS_TIMEOUT_S = 5.0
# Connections and requests at once; past this uvicorn answers 503 at once
MAX_CONNECTIONS = 64
# Seconds SIGTERM waits for requests in flight before cancelling them
SHUTDOWN_GRACE_S = 2.0
# Seconds a connection stays open after the answer to a request that cannot be parsed, reading what the client
# still sends (1 MiB on the loopback takes milliseconds)
LINGER_S = 2.0

_Result = TypeVar("_Result")


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReplicaBody(_Body):
    """The calculator's configuration: a model on GPUs under an engine."""

    model: str | None = Field(None, max_length=200, description="A catalog model name or HF id (see /api/catalog/models).")
    config: dict[str, Any] | None = Field(None, description="A pasted config.json, instead of a catalog model.")
    precision: str = Field("auto", max_length=40)
    kv_dtype: str = Field("auto", max_length=40)
    tp: int = Field(1, ge=1, le=MAX_GPUS_PER_REPLICA)
    pp: int = Field(1, ge=1, le=MAX_GPUS_PER_REPLICA)
    gpu: str = Field(..., max_length=80)
    engine: Literal[engine_names()] = "vllm"  # type: ignore[valid-type]  # the registry's


class EstimateBody(ReplicaBody):
    context: int = Field(8192, ge=1, le=MAX_CONTEXT)
    sequences: int = Field(1, ge=1, le=MAX_BATCH)


class ResultText(_Body):
    name: str = Field(..., max_length=255, description="The file's name: the runs' labels and errors name it.")
    text: str = Field(..., max_length=MAX_BODY_BYTES, description="The file's content, as the benchmark saved it.")


class CompareBody(ReplicaBody):
    results: list[ResultText] = Field(..., min_length=1, max_length=MAX_RESULT_FILES, description=(
        "vllm bench serve --save-result JSON, SGLang bench_serving JSONL or GuideLLM benchmarks.json files."))


class PerfBody(_Body):
    model: str = Field(..., max_length=200, description="A catalog model name or HF id.")
    gpu: str = Field(..., max_length=80)
    tp: int = Field(1, ge=1, le=MAX_GPUS_PER_REPLICA)
    pp: int = Field(1, ge=1, le=MAX_GPUS_PER_REPLICA)
    precision: str = Field("auto", max_length=40)
    kv_dtype: str = Field("auto", max_length=40)
    engine: Literal[profiled_engines()] = "vllm"  # type: ignore[valid-type]
    batch: int = Field(1, ge=1, le=MAX_BATCH)
    prompt_tokens: int = Field(1024, ge=1, le=MAX_CONTEXT)
    output_tokens: int = Field(256, ge=1, le=MAX_CONTEXT)
    rate: float | None = Field(None, ge=0, le=MAX_RATE, description="Requests/s arriving: adds the steady state.")


class ScenarioBody(_Body):
    scenario: str = Field(..., max_length=MAX_BODY_BYTES, description="The scenario YAML text.")


class ExportBody(ScenarioBody):
    target: Literal[export_targets()]  # type: ignore[valid-type]
    plan: int = Field(0, ge=0, le=1000, description="0 = the best plan, N = the N-th alternative.")
    checkpoint: str | None = Field(None, max_length=200, description="A pre-quantized repository ORG/NAME, when needed.")


class BodyLimit:
    """ASGI middleware: refuse bodies over `limit` bytes (413) whether or not Content-Length is sent; once the
    body is in, the client leaving (its connection closed) cancels the request's work."""

    def __init__(self, app, limit: int = MAX_BODY_BYTES) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await _too_large(scope, receive, send, self.limit)
            return
        # Read the body here (it is small by definition), so the app never sees more than the limit
        chunks, seen, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunks.append(message.get("body", b""))
            seen += len(chunks[-1])
            if seen > self.limit:
                await _too_large(scope, receive, send, self.limit)
                return
            more = message.get("more_body", False)
        body, replayed = b"".join(chunks), False
        # The one message left to come is http.disconnect: the client left, or the response is complete
        left = asyncio.ensure_future(receive())

        async def replay():
            nonlocal replayed
            if replayed:
                return await asyncio.shield(left)
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        answer = asyncio.ensure_future(self.app(scope, replay, send))
        try:
            await asyncio.wait((answer, left), return_when=asyncio.FIRST_COMPLETED)
        finally:
            left.cancel()
            answer.cancel()  # unless it is done: the client left, or the Guard's time limit struck; stop the work
        if answer.done() and not answer.cancelled():
            answer.result()  # the app's own exception, if any


async def _too_large(scope, receive, send, limit: int) -> None:
    await JSONResponse({"error": f"body: larger than {limit} bytes"}, status_code=413)(scope, receive, send)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
# Pages load their own script and style only, fetch only this server, and are never framed
PAGE_POLICY = ("default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'self'; "
               "frame-ancestors 'none'")
# An API answer is data (the review report's HTML: inline style and SVG, no script)
API_POLICY = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'; " \
             "frame-ancestors 'none'"


def security_headers(path: str) -> list[tuple[bytes, bytes]]:
    """What every response carries: its Content-Security-Policy, no MIME sniffing, no framing, no referrer."""
    policy = API_POLICY if path.startswith("/api/") else PAGE_POLICY
    return [(b"content-security-policy", policy.encode()), (b"x-content-type-options", b"nosniff"),
            (b"x-frame-options", b"DENY"), (b"referrer-policy", b"no-referrer")]


@dataclass(frozen=True)
class HostNames:
    """The Host headers this server answers: its loopback names and the address it listens on, with its port.
    Listening on every address (0.0.0.0, ::), an IP address is accepted too: a DNS-rebinding page reaches the
    server through a name it controls, never through a bare address."""

    names: frozenset[str]
    port: int
    any_address: bool = False

    @classmethod
    def of(cls, host: str, port: int) -> HostNames:
        listening = f"[{host}]" if ":" in host else host
        wildcard = host in ("0.0.0.0", "::", "")
        names = {*LOOPBACK_NAMES, listening.lower()}
        if wildcard:
            names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
        return cls(frozenset(names), port, wildcard)

    def refusal(self, header: str) -> str | None:
        """Why a request with this Host header is refused (None: it is not)."""
        if not header:
            return f"Host: missing; send the server's name (http://127.0.0.1:{self.port})"
        name, port = _split_host(header.lower())
        shown = repr(header[:100])
        if port != str(self.port) and not (port == "" and self.port == 80):
            return f"Host: {shown} is not this server (port {self.port}); open http://127.0.0.1:{self.port}"
        if name in self.names or (self.any_address and _is_address(name)):
            return None
        return (f"Host: {shown} is not a name of this server; open http://127.0.0.1:{self.port} "
                "(or start planner serve with --host set to the name you use)")


def _split_host(header: str) -> tuple[str, str]:
    """A Host header's name and port ("" when it has none): name:port, [IPv6]:port, name or [IPv6]."""
    if header.startswith("["):
        name, _, rest = header.partition("]")
        return name + "]", rest[1:] if rest.startswith(":") else rest and "not a port"
    name, _, port = header.partition(":")
    return name, port


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name.removeprefix("[").removesuffix("]"))
        return True
    except ValueError:
        return False


class Guard:
    """The outermost ASGI layer: the Host check (DNS rebinding), the wall-clock limit of every request (the work
    of one that runs out is cancelled), and the security headers on every response."""

    def __init__(self, app, hosts: HostNames, limit_s: float = REQUEST_TIME_LIMIT_S) -> None:
        self.app, self.hosts, self.limit_s = app, hosts, limit_s

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = body_received = False

        async def send_guarded(message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message = {**message, "headers": [*message.get("headers", []), *security_headers(scope["path"])]}
            await send(message)

        async def receive_counted():
            nonlocal body_received
            message = await receive()
            body_received = body_received or (message["type"] == "http.request" and not message.get("more_body"))
            return message

        host = dict(scope.get("headers") or []).get(b"host", b"").decode("latin-1")
        refusal = self.hosts.refusal(host)
        if refusal:
            await _error(421, refusal)(scope, receive, send_guarded)
            return
        try:
            async with asyncio.timeout(self.limit_s):
                await self.app(scope, receive_counted, send_guarded)
        except asyncio.CancelledError:  # SIGTERM, past its grace: uvicorn cancels what is still running
            if not started:
                await _error(503, "server: shutting down; try again once it is back")(scope, receive, send_guarded)
            raise
        except TimeoutError:
            if started:
                return  # part of the answer is out: uvicorn closes the connection
            if not body_received:
                await _error(408, f"body: not received within {self.limit_s:g} s; send it at once")(
                    scope, receive, send_guarded)
            else:
                await _error(503, f"request: not answered within the server's {self.limit_s:g} s limit (it is busy); "
                                  "try again")(scope, receive, send_guarded)


class HeaderTimeoutH11(H11Protocol):
    """uvicorn's h11 protocol with a deadline on each request's headers (uvicorn's own keep-alive timeout
    starts only after a first response, and any byte resets it: a connection that never sends a request,
    or sends it a byte at a time, would hold its slot forever)."""

    waiting = None  # the timer that closes the connection if the next request's headers are late

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._await_headers()

    def on_response_complete(self) -> None:
        self._await_headers()  # the next request's (a pipelined one already in starts below and cancels it)
        super().on_response_complete()

    def handle_events(self) -> None:
        cycle = self.cycle
        super().handle_events()
        if self.cycle is not cycle and self.waiting is not None:  # a request's headers are in
            self.waiting.cancel()

    def connection_lost(self, exc) -> None:
        if self.waiting is not None:
            self.waiting.cancel()
        super().connection_lost(exc)

    def _await_headers(self) -> None:
        if self.waiting is not None:
            self.waiting.cancel()
        self.waiting = self.loop.call_later(HEADERS_TIMEOUT_S, self._headers_late)

    def _headers_late(self) -> None:
        if not self.transport.is_closing():
            self.transport.close()

    def send_400_response(self, msg: str) -> None:
        """A request h11 cannot parse (a Content-Length that is not a number, a bad header line), answered as the
        app answers: one JSON error line and the security headers (uvicorn's own answer is plain text)."""
        body = json.dumps({"error": f"request: not valid HTTP/1.1 ({msg.rstrip('.')}); check its headers"}).encode()
        headers = [(b"content-type", b"application/json"), (b"connection", b"close"), *security_headers("/api/")]
        for event in (h11.Response(status_code=400, headers=headers, reason=b"Bad Request"), h11.Data(data=body),
                      h11.EndOfMessage()):
            self.transport.write(self.conn.send(event))
        # Closing with the client's body unread would reset the connection before it reads the answer: read and drop
        # what it still sends, for a moment (a lingering close)
        self.discarding = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_S, self.transport.close)

    discarding = False  # after an answer to a request h11 could not parse: what arrives is dropped

    def data_received(self, data: bytes) -> None:
        if not self.discarding:
            super().data_received(data)


def _architecture_model(body: ReplicaBody, catalog: Catalog, folder: Path) -> str:
    """The `model` argument for planner.api: a catalog name, or the pasted config written to a private folder."""
    if (body.model is None) == (body.config is None):
        raise PlannerInputError("model: give a catalog model or a pasted config, not both and not neither")
    if body.config is not None:
        path = folder / "pasted-config" / "config.json"
        path.parent.mkdir()
        path.write_text(json.dumps(body.config), encoding="utf-8")
        return str(path)
    return catalog.models.get(body.model).name  # catalog only: never a server path or a Hub download


# What a dropped file's name keeps as the name of its copy in the request's private folder
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._+-]+")


def _result_files(results: list[ResultText], folder: Path) -> list[Path]:
    """Each dropped file's text, written to a folder of its own under `folder` as its name's last part (only
    letters, digits and ._+-; never hidden, never a path elsewhere): the paths planner.api reads."""
    paths = []
    for i, result in enumerate(results):
        name = _UNSAFE_NAME.sub("_", result.name.replace("\\", "/").rsplit("/", 1)[-1]).lstrip(".")[:100]
        path = folder / "results" / str(i) / (name or f"result-{i + 1}.json")
        path.parent.mkdir(parents=True)
        path.write_text(result.text, encoding="utf-8")
        paths.append(path)
    return paths


def _scenario(text: str, catalog: Catalog) -> dict[str, Any]:
    try:
        data = parse_yaml(text, "scenario")
    except PlannerInputError as exc:  # worded as the API words a body that is not JSON ("body: not valid JSON")
        raise PlannerInputError(str(exc).replace("scenario: invalid YAML", "scenario: not valid YAML", 1)) from None
    if not isinstance(data, dict):
        raise PlannerInputError("scenario: the YAML must hold a mapping of keys (model:, workload:, ...)")
    if "calibration" in data:  # a file on the server: the web planner reads none
        raise PlannerInputError("scenario: calibration: the web planner reads no files; remove it (planner solve "
                                "takes it on the command line)")
    services = data.get("workloads") if isinstance(data.get("workloads"), list) else [data]
    for service in services:
        model = service.get("model") if isinstance(service, dict) else None
        if isinstance(model, str):
            catalog.models.get(model)  # the web page solves catalog models only: no server paths or downloads
    return data


# The page's and the API's names for the CLI flags the library's messages name (the rest are the engines' own)
_FLAG = re.compile(r"(?<![\w-])--([a-z][a-z0-9-]*)")
_ESTIMATE_ALIASES = {"batch": "sequences"}  # /api/estimate's name for --batch
_OUT_OF_TIME = ((" (--time-limit, solver.time_limit_s)", ""), ("raise --time-limit or narrow", "narrow"))


def _page_message(message: str, fields: set[str], aliases: dict[str, str]) -> str:
    """A library message with the CLI's flags named as the request's fields (--kv-dtype: kv_dtype)."""
    def field(match: re.Match) -> str:
        name = aliases.get(match[1], match[1].replace("-", "_"))
        return name if name in fields else match[0]
    return _FLAG.sub(field, message)


def _rank_bars(estimate: api.EngineEstimate | None, memory) -> list[dict[str, Any]]:
    """Per GPU: weights / KV / overhead / headroom on the card in bytes, as the chosen memory model sizes them, and
    the budget the page draws them against (an engine's: what it may use of the card; the simple margin's: all)."""
    card = memory.gpu.memory_bytes
    if estimate is None:
        return [{"rank": r.rank, "weights_bytes": r.weights_bytes, "kv_bytes": r.kv_cache_bytes,
                 "overhead_bytes": r.overhead_bytes, "headroom_bytes": card - r.total_bytes, "memory_bytes": card,
                 "budget_bytes": card}
                for r in memory.per_gpu]
    bars = []
    need = {r.rank: r.kv_cache_bytes for r in memory.per_gpu}
    for r in estimate.engine.per_rank:
        overhead = r.activation_bytes + r.non_torch_bytes + r.cuda_graph_bytes
        kv = need.get(r.rank, 0)
        bars.append({"rank": r.rank, "weights_bytes": r.weights_bytes, "kv_bytes": kv, "overhead_bytes": overhead,
                     "headroom_bytes": r.memory_bytes - r.weights_bytes - kv - overhead,
                     "memory_bytes": r.memory_bytes, "budget_bytes": r.budget_bytes, "kv_pool_bytes": r.kv_pool_bytes})
    return bars


# The simple margin's verdict on the card, among a memory estimate's warnings: under an engine its budget decides
_MARGIN_VERDICTS = ("does not fit:", "little headroom:")


def _page_warnings(memory, engine) -> list[str]:
    """The warnings of the chosen memory model: the model's and the engine's, not the simple margin's verdict."""
    own = [w for w in memory.warnings if engine is None or not w.startswith(_MARGIN_VERDICTS)]
    return list(dict.fromkeys([*own, *(engine.warnings if engine else ())]))


def engine_options(page: str) -> str:
    """The pages' engine lists, from the registry: each engine's budget (the calculator's memory model, at its default
    release) and command (the planner's downloads)."""
    from planner.estimator.engines.profiles import load_profiles

    profiles = load_profiles()
    budgets = "".join(f'<option value="{name}">{label(name)} {profiles.versions(name).default} budget</option>'
                      for name in profiled_engines())
    commands = "".join(f'<option value="{name}">{label(name)} command</option>' for name in profiled_engines())
    return page.replace("<!--engine budgets-->", budgets).replace("<!--engine commands-->", commands)


def create_app(catalog: Catalog | None = None, time_limit_s: float = WORK_TIME_LIMIT_S) -> FastAPI:
    """The API and the pages; `time_limit_s`: what a solve, report or export may take from when its work starts."""
    from planner.estimator.engines import EngineSettings
    from planner.plan.deadline import OutOfTime
    from planner.plan.scenario import parse_scenario
    from planner.render.export import export_all
    from planner.render.records import catalog_rows, engine_estimate_record, fleet_json, record, solve_json

    catalog = catalog or load_catalog()
    # No /api/docs: Swagger UI is a third-party script; the schema itself is /api/openapi.json
    app = FastAPI(title="planner", description="GPU memory and fleet planning for LLM inference.",
                  version="0.1.0", docs_url=None, openapi_url="/api/openapi.json", redoc_url=None,
                  redirect_slashes=False)  # /api/estimate/ is not found (JSON), not a redirect
    fields = {name for body in (EstimateBody, PerfBody, ExportBody, CompareBody) for name in body.model_fields}
    work = ThreadPoolExecutor(WORKERS, thread_name_prefix="planner-web")

    async def off_loop(function: Callable[[], _Result]) -> _Result:
        """`function` on a worker thread; cancelling the request (client gone, time limit) abandons it: queued, it
        never runs; running, it stops at its own time limit."""
        return await asyncio.get_running_loop().run_in_executor(work, function)

    @app.exception_handler(PlannerInputError)
    async def _input_error(request: HttpRequest, exc: PlannerInputError) -> JSONResponse:
        message = str(exc)
        if isinstance(exc, OutOfTime):
            for cli, page in _OUT_OF_TIME:
                message = message.replace(cli, page)
            message = (f"scenario: {message} (the web planner's limit; planner solve on the command line takes "
                       "longer ones)")
        aliases = _ESTIMATE_ALIASES if request.url.path == "/api/estimate" else {}
        return _error(400, _page_message(message, fields, aliases))

    @app.exception_handler(HTTPException)
    async def _http_error(_: HttpRequest, exc: HTTPException) -> JSONResponse:
        # FastAPI's own refusals (a body it cannot parse, an unknown path) in the same one-line shape
        return _error(exc.status_code, f"body: {exc.detail}" if exc.status_code == 400 else str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: HttpRequest, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0]
        if first["type"] == "json_invalid":
            return _error(422, f"body: not valid JSON ({first.get('ctx', {}).get('error', first['msg'])})")
        where = ".".join(str(p) for p in first["loc"] if p != "body") or "body"
        return _error(422, f"{where}: {first['msg']}")

    @app.exception_handler(Exception)
    async def _unexpected(_: HttpRequest, exc: Exception) -> JSONResponse:
        return _error(500, f"internal error ({type(exc).__name__}); please report it with the request")

    @app.get("/api/catalog/{kind}", summary="GPUs, models or precisions with their sources")
    def catalog_list(kind: Literal["gpus", "models", "precisions"]) -> list[dict[str, Any]]:
        return catalog_rows(catalog, kind)

    def estimated(body: EstimateBody) -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="planner-web-") as folder:
            model = _architecture_model(body, catalog, Path(folder))
            common = dict(context=body.context, batch=body.sequences, tp=body.tp, pp=body.pp,
                          precision=body.precision, kv_dtype=body.kv_dtype, gpu=body.gpu, catalog=catalog)
            if body.engine == "simple":
                memory, both = api.estimate(model, **common), None
                data, fits = record(memory), memory.gpu.fits
            else:
                both = api.engine_estimate(model, EngineSettings(body.engine), **common)
                memory, data, fits = both.memory, engine_estimate_record(both.memory, both.engine), both.engine.fits
        message = both.engine.message if both and both.engine.message else None
        data["verdict"] = {"fits": fits, "engine": body.engine, "gpus": body.tp * body.pp,
                           "message": message and _page_message(message, fields, _ESTIMATE_ALIASES),
                           "warnings": [_page_message(w, fields, _ESTIMATE_ALIASES)
                                        for w in _page_warnings(memory, both.engine if both else None)]}
        data["bars"] = _rank_bars(both, memory)
        return data

    @app.post("/api/estimate", summary="Memory per GPU for one configuration, and the engine's verdict")
    async def estimate(body: EstimateBody) -> dict[str, Any]:
        return await off_loop(partial(estimated, body))

    def timed(body: PerfBody) -> dict[str, Any]:
        model = catalog.models.get(body.model).name  # catalog only: never a server path or a Hub download
        return api.perf(model, gpu=body.gpu, tp=body.tp, pp=body.pp, precision=body.precision, kv_dtype=body.kv_dtype,
                        engine=body.engine, batch=body.batch, prompt_tokens=body.prompt_tokens,
                        output_tokens=body.output_tokens, rate=body.rate, catalog=catalog).to_dict()

    @app.post("/api/perf", summary="Speed of one replica: TTFT, TPOT, tokens/s; with a rate, its steady state")
    async def perf(body: PerfBody) -> dict[str, Any]:
        return await off_loop(partial(timed, body))

    def compared(body: CompareBody) -> dict[str, Any]:
        """Each run of the dropped results replayed on the configuration, measured against predicted, and the factors
        fitted to them when there are FIT_RUNS runs or more, all within the time limit from now."""
        started = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="planner-web-") as folder:
            settings = dict(model=_architecture_model(body, catalog, Path(folder)), gpu=body.gpu, tp=body.tp,
                            pp=body.pp, precision=body.precision, kv_dtype=body.kv_dtype, engine=body.engine,
                            catalog=catalog)
            paths = _result_files(body.results, Path(folder))
            try:
                runs = api.replay_results(paths, time_limit_s=time_limit_s, **settings)
            except OutOfTime as exc:
                raise PlannerInputError(f"{exc} (the web calculator's time limit; planner calibrate on the command "
                                        "line has none)") from None
            calibration, note = None, None
            if len(runs) < FIT_RUNS:
                note = (f"factors: fitted on {FIT_RUNS} runs or more (one run's factors match it exactly, with no run "
                        "left to test them on); drop more runs")
            else:
                try:
                    left_s = round(time_limit_s - (time.perf_counter() - started), 1)
                    calibration = api.calibrate(paths, time_limit_s=left_s, **settings)
                except OutOfTime as exc:
                    note = (f"factors: not fitted ({exc}); planner calibrate on the command line has no time "
                            "limit")
        return {"runs": [run.to_dict() for run in runs],
                "calibration": None if calibration is None else asdict(calibration),
                "calibration_yaml": None if calibration is None else calibration.to_yaml(),
                "calibration_note": note and _page_message(note, fields, {})}

    @app.post("/api/compare-results", summary="Benchmark results replayed on one configuration: measured against "
                                              "predicted per run, and the calibration factors fitted to them")
    async def compare_results(body: CompareBody) -> dict[str, Any]:
        return await off_loop(partial(compared, body))

    def solved(text: str) -> str:
        """The plan JSON of a scenario (a fleet's with traffic), within the time limit from now."""
        scenario = parse_scenario(_scenario(text, catalog), "scenario")
        if scenario.is_fleet:
            return fleet_json(api.plan_fleet(scenario, time_limit_s=time_limit_s, catalog=catalog),
                              scenario.name or "fleet")
        return solve_json(api.solve(scenario, time_limit_s=time_limit_s, catalog=catalog))

    @app.post("/api/solve", summary="The cheapest plan for a scenario (the JSON of `planner solve --format json`)")
    async def solve(body: ScenarioBody) -> Response:
        return Response(await off_loop(partial(solved, body.scenario)), media_type="application/json")

    def reviewed(text: str) -> str:
        from planner.render.html import CHARTS_S, fleet_html, review_html

        search_s = max(time_limit_s - CHARTS_S, time_limit_s / 2)  # the charts draw after the search
        scenario = parse_scenario(_scenario(text, catalog), "scenario")
        if scenario.is_fleet:
            return fleet_html(scenario.name or "fleet", api.plan_fleet(scenario, time_limit_s=search_s, catalog=catalog),
                              text)
        return review_html(api.review(scenario, time_limit_s=search_s, catalog=catalog), text)

    @app.post("/api/report", summary="The review page of `planner report` (HTML)", response_class=HTMLResponse)
    async def report(body: ScenarioBody) -> HTMLResponse:
        return HTMLResponse(await off_loop(partial(reviewed, body.scenario)))

    def exported(body: ExportBody) -> str:
        text = solved(body.scenario)
        with tempfile.TemporaryDirectory(prefix="planner-web-") as folder:
            path = Path(folder) / "plan.json"
            path.write_text(text, encoding="utf-8")
            plans = api.export_plans(path, plan_index=body.plan, catalog=catalog)
            return export_all(plans, body.target, body.checkpoint)

    @app.post("/api/export", summary="A launch command or deployment file for a solved plan",
              response_class=PlainTextResponse)
    async def export_plan(body: ExportBody) -> PlainTextResponse:
        return PlainTextResponse(await off_loop(partial(exported, body)))

    static = resources.files("planner.serve") / "static"

    def page(name: str) -> HTMLResponse:
        return HTMLResponse(engine_options((static / name).read_text(encoding="utf-8")))

    @app.get("/", include_in_schema=False)
    def calculator_page() -> HTMLResponse:
        return page("calculator.html")

    @app.get("/planner", include_in_schema=False)
    def planner_page() -> HTMLResponse:
        return page("planner.html")

    @app.get("/static/{name}", include_in_schema=False)
    def asset(name: Literal["app.css", "calculator.js", "planner.js"]) -> Response:
        kind = "text/css" if name.endswith(".css") else "text/javascript"
        return Response((static / name).read_text(encoding="utf-8"), media_type=kind)

    return app


def is_loopback(host: str) -> bool:
    """Whether listening on `host` keeps the server to this machine."""
    return host == "localhost" or (_is_address(host) and ipaddress.ip_address(host.strip("[]")).is_loopback)


def serve(host: str = "127.0.0.1", port: int = 8000) -> None:
    """Run the calculator with uvicorn until interrupted, from an empty private folder: the library looks a model
    name up as a path before the catalog, and no request may find anything there."""
    if not is_loopback(host):
        print(f"warning: planner serve listens on {host}:{port} with no authentication: anyone who can reach that "
              "address can use it and its CPU; use --host 127.0.0.1 to keep it to this machine", file=sys.stderr)
    wrapped = Guard(BodyLimit(create_app()), HostNames.of(host, port))
    with tempfile.TemporaryDirectory(prefix="planner-serve-") as empty:
        os.chdir(empty)
        config = Config(wrapped, host=host, port=port, log_level="info", http=HeaderTimeoutH11,
                                limit_concurrency=MAX_CONNECTIONS, timeout_graceful_shutdown=SHUTDOWN_GRACE_S)
        Server(config).run()
