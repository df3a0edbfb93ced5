"""The local web calculator: a JSON API under /api over planner.api, and two static pages.

Every request is hostile input: bodies are capped, models are catalog names or a pasted
config.json (never a path or a Hub fetch on the server's behalf), and every bad field comes back
as a 4xx naming it. The library returns dataclasses; the JSON renderers in render/ turn them into
the same documents the CLI prints.
"""

from __future__ import annotations

import json
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from fastapi import FastAPI, Request as HttpRequest
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException

from planner import api
from planner.catalog.load import Catalog, load_catalog
from planner.errors import PlannerInputError
from planner.units import MAX_BATCH, MAX_CONTEXT, MAX_GPUS_PER_REPLICA

# A scenario or a config.json is a few KB; 1 MiB leaves room for the largest pasted config
# (DeepSeek-V3's config.json is 1.7 KB) while keeping a hostile client from filling memory.
MAX_BODY_BYTES = 1 << 20
# Far above what one replica serves (requests/s); a larger rate is a typo
MAX_RATE = 1e6
# A web request waits for its answer: CP-SAT gets at most this long (the CLI default is the scenario's).
SOLVE_TIME_LIMIT_S = 20.0


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EstimateBody(_Body):
    model: str | None = Field(None, max_length=200, description="A catalog model name or HF id (see /api/catalog/models).")
    config: dict[str, Any] | None = Field(None, description="A pasted config.json, instead of a catalog model.")
    precision: str = Field("auto", max_length=40)
    kv_dtype: str = Field("auto", max_length=40)
    context: int = Field(8192, ge=1, le=MAX_CONTEXT)
    sequences: int = Field(1, ge=1, le=MAX_BATCH)
    tp: int = Field(1, ge=1, le=MAX_GPUS_PER_REPLICA)
    pp: int = Field(1, ge=1, le=MAX_GPUS_PER_REPLICA)
    gpu: str = Field(..., max_length=80)
    engine: Literal["simple", "vllm", "sglang", "llamacpp"] = "vllm"


class PerfBody(_Body):
    model: str = Field(..., max_length=200, description="A catalog model name or HF id.")
    gpu: str = Field(..., max_length=80)
    tp: int = Field(1, ge=1, le=MAX_GPUS_PER_REPLICA)
    pp: int = Field(1, ge=1, le=MAX_GPUS_PER_REPLICA)
    precision: str = Field("auto", max_length=40)
    kv_dtype: str = Field("auto", max_length=40)
    engine: Literal["vllm", "sglang", "llamacpp"] = "vllm"
    batch: int = Field(1, ge=1, le=MAX_BATCH)
    prompt_tokens: int = Field(1024, ge=1, le=MAX_CONTEXT)
    output_tokens: int = Field(256, ge=1, le=MAX_CONTEXT)
    rate: float | None = Field(None, ge=0, le=MAX_RATE, description="Requests/s arriving: adds the steady state.")


class ScenarioBody(_Body):
    scenario: str = Field(..., max_length=MAX_BODY_BYTES, description="The scenario YAML text.")


class ExportBody(ScenarioBody):
    target: Literal["vllm", "sglang", "llamacpp", "skypilot", "kubernetes"]
    plan: int = Field(0, ge=0, le=1000, description="0 = the best plan, N = the N-th alternative.")
    checkpoint: str | None = Field(None, max_length=200, description="A pre-quantized repository ORG/NAME, when needed.")


class BodyLimit:
    """ASGI middleware: refuse bodies over `limit` bytes (413) whether or not Content-Length is sent."""

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

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


async def _too_large(scope, receive, send, limit: int) -> None:
    await JSONResponse({"error": f"body: larger than {limit} bytes"}, status_code=413)(scope, receive, send)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _architecture_model(body: EstimateBody, catalog: Catalog, folder: Path) -> str:
    """The `model` argument for planner.api: a catalog name, or the pasted config written to a private folder."""
    if (body.model is None) == (body.config is None):
        raise PlannerInputError("model: give a catalog model or a pasted config, not both and not neither")
    if body.config is not None:
        path = folder / "pasted-config" / "config.json"
        path.parent.mkdir()
        path.write_text(json.dumps(body.config), encoding="utf-8")
        return str(path)
    return catalog.models.get(body.model).name  # catalog only: never a server path or a Hub download


def _scenario(text: str, catalog: Catalog) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PlannerInputError(f"scenario: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise PlannerInputError("scenario: the YAML must hold a mapping of keys (model:, workload:, ...)")
    services = data.get("workloads") if isinstance(data.get("workloads"), list) else [data]
    for service in services:
        model = service.get("model") if isinstance(service, dict) else None
        if isinstance(model, str):
            catalog.models.get(model)  # the web page solves catalog models only: no server paths or downloads
    return data


def _rank_bars(estimate: api.EngineEstimate | None, memory) -> list[dict[str, Any]]:
    """Per GPU: weights / KV / overhead / headroom in bytes, as the chosen memory model sizes them."""
    card = memory.gpu.memory_bytes
    if estimate is None:
        return [{"rank": r.rank, "weights_bytes": r.weights_bytes, "kv_bytes": r.kv_cache_bytes,
                 "overhead_bytes": r.overhead_bytes, "headroom_bytes": card - r.total_bytes, "memory_bytes": card}
                for r in memory.per_gpu]
    bars = []
    need = {r.rank: r.kv_cache_bytes for r in memory.per_gpu}
    for r in estimate.engine.per_rank:
        overhead = r.activation_bytes + r.non_torch_bytes + r.cuda_graph_bytes
        kv = need.get(r.rank, 0)
        bars.append({"rank": r.rank, "weights_bytes": r.weights_bytes, "kv_bytes": kv, "overhead_bytes": overhead,
                     "headroom_bytes": r.memory_bytes - r.weights_bytes - kv - overhead,
                     "memory_bytes": r.memory_bytes, "kv_pool_bytes": r.kv_pool_bytes})
    return bars


def create_app(catalog: Catalog | None = None) -> FastAPI:
    from planner.estimator.engines import EngineSettings
    from planner.plan.scenario import parse_scenario
    from planner.render.export import export_all
    from planner.render.records import catalog_rows, engine_estimate_record, fleet_json, record, solve_json

    catalog = catalog or load_catalog()
    app = FastAPI(title="planner", description="GPU memory and fleet planning for LLM inference.",
                  version="0.1.0", docs_url="/api/docs", openapi_url="/api/openapi.json", redoc_url=None)

    @app.exception_handler(PlannerInputError)
    async def _input_error(_: HttpRequest, exc: PlannerInputError) -> JSONResponse:
        return _error(400, str(exc))

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

    @app.post("/api/estimate", summary="Memory per GPU for one configuration, and the engine's verdict")
    def estimate(body: EstimateBody) -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="planner-web-") as folder:
            model = _architecture_model(body, catalog, Path(folder))
            common = dict(context=body.context, batch=body.sequences, tp=body.tp, pp=body.pp,
                          precision=body.precision, kv_dtype=body.kv_dtype, gpu=body.gpu, catalog=catalog)
            if body.engine == "simple":
                memory, both = api.estimate(model, **common), None
                data, fits = record(memory), memory.gpu.fits
                warnings = list(memory.warnings)
            else:
                both = api.engine_estimate(model, EngineSettings(body.engine), **common)
                memory, data, fits = both.memory, engine_estimate_record(both.memory, both.engine), both.engine.fits
                warnings = list(dict.fromkeys([*memory.warnings, *both.engine.warnings]))
        data["verdict"] = {"fits": fits, "engine": body.engine, "gpus": body.tp * body.pp,
                           "message": both.engine.message if both else None, "warnings": warnings}
        data["bars"] = _rank_bars(both, memory)
        return data

    @app.post("/api/perf", summary="Speed of one replica: TTFT, TPOT, tokens/s; with a rate, its steady state")
    def perf(body: PerfBody) -> dict[str, Any]:
        model = catalog.models.get(body.model).name  # catalog only: never a server path or a Hub download
        return api.perf(model, gpu=body.gpu, tp=body.tp, pp=body.pp, precision=body.precision, kv_dtype=body.kv_dtype,
                        engine=body.engine, batch=body.batch, prompt_tokens=body.prompt_tokens,
                        output_tokens=body.output_tokens, rate=body.rate, catalog=catalog).to_dict()

    def solved(text: str) -> tuple[Any, str]:
        scenario = parse_scenario(_scenario(text, catalog), "scenario")
        if scenario.is_fleet:
            plan = api.plan_fleet(scenario, time_limit_s=SOLVE_TIME_LIMIT_S, catalog=catalog)
            return plan, fleet_json(plan, scenario.name or "fleet")
        result = api.solve(scenario, time_limit_s=SOLVE_TIME_LIMIT_S, catalog=catalog)
        return result, solve_json(result)

    @app.post("/api/solve", summary="The cheapest plan for a scenario (the JSON of `planner solve --format json`)")
    def solve(body: ScenarioBody) -> Response:
        return Response(solved(body.scenario)[1], media_type="application/json")

    @app.post("/api/report", summary="The review page of `planner report` (HTML)", response_class=HTMLResponse)
    def report(body: ScenarioBody) -> HTMLResponse:
        from planner.render.html import fleet_html, review_html

        scenario = parse_scenario(_scenario(body.scenario, catalog), "scenario")
        if scenario.is_fleet:
            plan = api.plan_fleet(scenario, time_limit_s=SOLVE_TIME_LIMIT_S, catalog=catalog)
            return HTMLResponse(fleet_html(scenario.name or "fleet", plan, body.scenario))
        return HTMLResponse(review_html(api.review(scenario, catalog=catalog), body.scenario))

    @app.post("/api/export", summary="A launch command or deployment file for a solved plan",
              response_class=PlainTextResponse)
    def export_plan(body: ExportBody) -> PlainTextResponse:
        _, text = solved(body.scenario)
        with tempfile.TemporaryDirectory(prefix="planner-web-") as folder:
            path = Path(folder) / "plan.json"
            path.write_text(text, encoding="utf-8")
            plans = api.export_plans(path, plan_index=body.plan, catalog=catalog)
            return PlainTextResponse(export_all(plans, body.target, body.checkpoint))

    static = resources.files("planner.serve") / "static"

    def page(name: str) -> HTMLResponse:
        return HTMLResponse((static / name).read_text(encoding="utf-8"))

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


def serve(host: str = "127.0.0.1", port: int = 8000) -> None:
    """Run the calculator with uvicorn until interrupted."""
    import uvicorn

    wrapped = BodyLimit(create_app())
    uvicorn.run(wrapped, host=host, port=port, log_level="info", limit_concurrency=32)
