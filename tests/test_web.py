"""planner serve: the JSON API in-process, and the calculator page driven in headless Chromium."""

import json
import shutil
from dataclasses import asdict
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the web extra is not installed (pip install '.[web]')")
from fastapi.testclient import TestClient  # noqa: E402
from serve_process import running_server  # noqa: E402
from test_calibration import EXAMPLES, guidellm_benchmark, sglang_line  # noqa: E402

from planner import api  # noqa: E402
from planner.serve.app import MAX_BODY_BYTES, MAX_RESULT_FILES, BodyLimit, create_app  # noqa: E402

SCENARIOS = Path(__file__).parents[1] / "scenarios"
LLAMA = {"model": "llama-3.1-8b", "gpu": "l40s", "context": 8192, "sequences": 1, "engine": "vllm"}


@pytest.fixture(scope="module")
def client():
    return TestClient(BodyLimit(create_app()))


def test_estimate_gives_bars_that_add_up_and_a_verdict(client):
    data = client.post("/api/estimate", json=LLAMA).json()
    [bar] = data["bars"]
    assert bar["weights_bytes"] == data["weights_bytes"] and bar["kv_bytes"] == data["kv_cache_bytes"]
    parts = bar["weights_bytes"] + bar["kv_bytes"] + bar["overhead_bytes"] + bar["headroom_bytes"]
    assert parts == bar["memory_bytes"]
    assert data["verdict"]["fits"] is True and data["engine"]["release"] == "v0.34.0"


def test_a_longer_context_grows_the_kv_cache_until_it_no_longer_fits(client):
    short = client.post("/api/estimate", json=LLAMA).json()
    long = client.post("/api/estimate", json={**LLAMA, "context": 131072, "sequences": 8}).json()
    assert long["kv_cache_bytes"] == short["kv_cache_bytes"] * 16 * 8
    assert long["verdict"]["fits"] is False and long["verdict"]["message"]
    assert any("KV cache is" in w for w in long["verdict"]["warnings"])


def test_tensor_parallel_gives_one_bar_per_gpu_and_simple_uses_the_margin(client):
    data = client.post("/api/estimate", json={**LLAMA, "model": "llama-3.1-70b", "tp": 4, "gpu": "h100-sxm"}).json()
    assert len(data["bars"]) == 4
    simple = client.post("/api/estimate", json={**LLAMA, "engine": "simple"}).json()
    assert simple["bars"][0]["overhead_bytes"] == simple["overhead_bytes"]


def test_pasted_config_is_estimated(client):
    config = json.loads((Path(__file__).parent / "data" / "configs" / "gemma-3-27b-it" / "config.json").read_text())
    response = client.post("/api/estimate", json={"config": config, "gpu": "h100-sxm", "engine": "simple"})
    assert response.status_code == 200, response.text
    assert response.json()["weights_bytes"] > 0


@pytest.mark.parametrize("body, status, field", [
    ({**LLAMA, "context": 0}, 422, "context"),
    ({**LLAMA, "gpu": "h900"}, 400, "gpu"),
    ({**LLAMA, "engine": "tgi"}, 422, "engine"),
    ({**LLAMA, "colour": "red"}, 422, "colour"),
    ({**LLAMA, "model": "/etc/passwd"}, 400, "model"),  # never a path on the server
    ({**LLAMA, "model": "meta-llama/Some-Gated-Model"}, 400, "model"),  # never a Hub download
    ({**LLAMA, "config": {"num_hidden_layers": "many"}}, 400, "model"),  # both model and config
    ({"gpu": "l40s", "config": {"num_hidden_layers": "many"}}, 400, "config"),
    ({**LLAMA, "precision": "int3"}, 400, "precision"),
])
def test_bad_requests_get_a_4xx_naming_the_field(client, body, status, field):
    response = client.post("/api/estimate", json=body)
    assert response.status_code == status, response.text
    assert field in response.json()["error"]


def test_malformed_and_oversized_bodies_are_refused(client):
    bad = client.post("/api/estimate", content=b'{"model": ', headers={"content-type": "application/json"})
    assert bad.status_code == 422 and bad.json()["error"].startswith("body: not valid JSON")
    assert client.post("/api/estimate", content=b"x" * (MAX_BODY_BYTES + 1)).status_code == 413

    def chunks():  # no Content-Length: the cap counts what arrives
        for _ in range(MAX_BODY_BYTES // 65536 + 2):
            yield b" " * 65536

    assert client.post("/api/estimate", content=chunks()).status_code == 413
    assert client.post("/api/solve", json={"scenario": "[1, 2"}).json()["error"].startswith("scenario: not valid YAML")
    deep = client.post("/api/estimate", content=b"[" * 200_000, headers={"content-type": "application/json"})
    assert deep.status_code == 400 and deep.json()["error"].startswith("body:")
    assert client.get("/api/nothing").json() == {"error": "Not Found"}


@pytest.mark.parametrize("body", [
    {"gpu": "l40s", "config": {"num_hidden_layers": 10**12, "hidden_size": 4096, "model_type": "llama"}},
    {"gpu": "l40s", "config": {"model_type": "llama", "hidden_size": -1}},
    {"gpu": "l40s", "config": []},
    {"gpu": "l40s", "model": None, "config": None},
    {"gpu": ["l40s"], "model": "llama-3.1-8b"},
    {"gpu": "l40s", "model": "llama-3.1-8b", "tp": 3},
    {"gpu": "l40s", "model": "llama-3.1-8b", "context": 10**30},
])
def test_hostile_estimate_bodies_get_a_4xx(client, body):
    response = client.post("/api/estimate", json=body)
    assert 400 <= response.status_code < 500 and response.json()["error"], response.text


def test_solve_and_export_a_shipped_scenario(client):
    text = (SCENARIOS / "8b-budget.yaml").read_text()
    plan = client.post("/api/solve", json={"scenario": text}).json()
    assert plan["status"] in ("OPTIMAL", "FEASIBLE") and plan["plans"][0]["gpu"] == plan["best"]["gpu"]
    task = client.post("/api/export", json={"scenario": text, "target": "vllm"})
    assert task.status_code == 200 and "vllm serve" in task.text
    refused = client.post("/api/solve", json={"scenario": "model: ../../etc/config.json\nworkload: {context: 1}"})
    assert refused.status_code == 400 and "model" in refused.json()["error"]


def test_perf_of_one_replica_and_its_steady_state(client):
    body = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "batch": 8, "prompt_tokens": 1000, "output_tokens": 200}
    one = client.post("/api/perf", json=body).json()
    assert one["output_tokens_per_s"] > 0 and one["tpot_ms"] > 0 and "steady_state" not in one
    steady = client.post("/api/perf", json={**body, "rate": 2}).json()["steady_state"]
    assert steady["requests_per_s"] == 2 and steady["keeps_up"] is True
    assert client.post("/api/perf", json={**body, "rate": -1}).status_code == 422
    assert "model" in client.post("/api/perf", json={**body, "model": "/etc/passwd"}).json()["error"]


def test_catalog_and_openapi(client):
    gpus = client.get("/api/catalog/gpus").json()
    assert any(g["name"] == "h100-sxm" for g in gpus)
    assert client.get("/api/catalog/prices").status_code == 422
    paths = client.get("/api/openapi.json").json()["paths"]
    assert {"/api/estimate", "/api/solve", "/api/export", "/api/report", "/api/perf", "/api/catalog/{kind}"} <= set(paths)


# --------------------------------------------------------------------------------------------
# Benchmark results dropped on the calculator: measured against predicted, and the factors

H100 = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "tp": 1, "engine": "vllm"}


def results_body(*files: tuple[str, str], **config) -> dict:
    return {**H100, **config, "results": [{"name": name, "text": text} for name, text in files]}


@pytest.fixture(scope="module")
def unhurried():
    """A client whose fits always finish (the served page's limit is WORK_TIME_LIMIT_S)."""
    return TestClient(BodyLimit(create_app(time_limit_s=600)))


def _written(tmp_path: Path, files: list[tuple[str, str]]) -> list[Path]:
    for name, text in files:
        (tmp_path / name).write_text(text)
    return [tmp_path / name for name, _ in files]


SGLANG = [("sglang.jsonl", json.dumps(sglang_line()))]
GUIDELLM = [("benchmarks.json", json.dumps({"metadata": {"guidellm_version": "0.8.1"}, "benchmarks": [
    guidellm_benchmark({"type_": "synchronous"}), guidellm_benchmark({"type_": "concurrent", "streams": 8})]}))]


@pytest.mark.parametrize("files", [[(p.name, p.read_text()) for p in EXAMPLES], SGLANG, GUIDELLM],
                         ids=["vllm", "sglang", "guidellm"])
def test_dropped_results_are_replayed_measured_against_predicted(unhurried, tmp_path, files):
    response = unhurried.post("/api/compare-results", json=results_body(*files))
    assert response.status_code == 200, response.text
    data = response.json()
    paths = _written(tmp_path, files)
    replayed = api.replay_results(paths, model="llama-3.1-8b", gpu="h100-sxm", tp=1)
    assert [run["result"] for run in data["runs"]] == [run.measured.label for run in replayed]
    for shown, run in zip(data["runs"], replayed):
        rows = {(c["metric"], c["statistic"]): c for c in shown["comparisons"]}
        assert rows["tpot_ms", "p99"]["measured"] == run.measured.tpot.p99_ms
        assert rows["ttft_ms", "median"]["measured"] == run.measured.ttft.median_ms
        assert rows["ttft_ms", "mean"]["predicted"] == run.predicted.ttft.mean_ms
        # as the fit compares it: a closed loop's throughput at the concurrency the run held
        throughput = next(c for c in run.comparisons() if c.metric == "output_tok_s")
        assert rows["output_tok_s", "mean"]["error"] == pytest.approx(
            throughput.predicted / run.measured.output_throughput - 1)
        assert shown["replayed_prompts"] == run.predicted.run.num_prompts
    if len(replayed) == 1:
        assert data["calibration"] is None and data["calibration_note"].startswith("factors: fitted on 2 runs or more")
    else:  # the factors api.calibrate fits, and its file
        calibration = api.calibrate(paths, model="llama-3.1-8b", gpu="h100-sxm", tp=1)
        assert data["calibration"] == json.loads(json.dumps(asdict(calibration)))
        assert data["calibration_yaml"] == calibration.to_yaml() and data["calibration_note"] is None


EXAMPLE = json.loads(EXAMPLES[0].read_text())


@pytest.mark.parametrize("files, config, status, names", [
    ([("r.json", "not json at all\nnor this")], {}, 400, "result: r.json is not JSON or JSONL"),
    ([("r.json", '{"hello": 1}')], {}, 400, "result: r.json has none of model_id (vLLM)"),
    ([("r.json", json.dumps({**EXAMPLE, "model_id": "meta-llama/Llama-3.1-70B-Instruct"}))], {}, 400,
     "result: r.json ran meta-llama/Llama-3.1-70B-Instruct (llama-3.1-70b), not model llama-3.1-8b"),
    ([("r.json", json.dumps(EXAMPLE).replace("8.255", "NaN"))], {}, 400, "NaN is not a measurement"),
    ([("r.json", json.dumps({**EXAMPLE, "completed": 0}))], {}, 400, "completed is 0"),
    ([("../../../etc/evil.json", '{"hello": 1}')], {}, 400, "result: evil.json has none of"),  # never a path
    ([(".hidden", '{"hello": 1}')], {}, 400, "result: hidden has none of"),
    ([("r.json", "[" * 100_000)], {}, 400, "nested too deeply"),
    ([("r.json", EXAMPLES[0].read_text())], {"model": "/etc/passwd"}, 400, "unknown model '/etc/passwd'"),
    ([("r.json", EXAMPLES[0].read_text())], {"gpu": "h900"}, 400, "h900"),
    ([], {}, 422, "results: List should have at least 1 item"),
    ([("r.json", "{}")] * (MAX_RESULT_FILES + 1), {}, 422, "results: List should have at most 20 items"),
])
def test_a_bad_result_file_is_one_line_and_a_4xx(client, files, config, status, names):
    response = client.post("/api/compare-results", json=results_body(*files, **config))
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert names in error and "\n" not in error and "Traceback" not in error


@pytest.mark.parametrize("body, status, names", [
    (b'{"model": "llama-3.1-8b", "gpu": "h100-sxm", "results": [{"name": "r.json", "text": 5}]}', 422,
     "results.0.text: Input should be a valid string"),
    (b'{"model": "llama-3.1-8b", "gpu": "h100-sxm", "results": [{"name": "r.json", "text": "\\ud800"}]}', 422,
     "results.0.text"),
    (b'{"model": "llama-3.1-8b", "gpu": "h100-sxm", "results": [{"name": "r", "text": "", "path": "/etc"}]}', 422,
     "results.0.path: Extra inputs"),
    (json.dumps(results_body(("r.json", "x" * MAX_BODY_BYTES))).encode(), 413, "body: larger than 1048576 bytes"),
])
def test_hostile_result_bodies_get_a_4xx(client, body, status, names):
    response = client.post("/api/compare-results", content=body, headers={"content-type": "application/json"})
    assert response.status_code == status and names in response.json()["error"], response.text


def test_replays_and_the_fit_keep_to_the_web_time_limit(monkeypatch):
    examples = [(p.name, p.read_text()) for p in EXAMPLES]
    none = TestClient(BodyLimit(create_app(time_limit_s=0))).post("/api/compare-results", json=results_body(*examples))
    assert none.status_code == 400 and none.json()["error"] == (
        "results: the 0 s time limit ran out after 0 simulated runs, before every run was replayed; give fewer runs "
        "(the web calculator's time limit; planner calibrate on the command line has none)")
    # the fit's share of the limit runs out before its first replay (as when the runs take the whole limit): the runs
    # are compared, the factors not fitted
    fit = api.calibrate
    monkeypatch.setattr(api, "calibrate", lambda paths, time_limit_s=None, **settings: fit(paths, time_limit_s=0,
                                                                                            **settings))
    short = TestClient(BodyLimit(create_app(time_limit_s=60))).post("/api/compare-results", json=results_body(*examples))
    data = short.json()
    assert short.status_code == 200 and len(data["runs"]) == 3 and data["calibration"] is None
    assert data["calibration_note"].startswith("factors: not fitted (results: the ")
    assert "before the factors were fitted" in data["calibration_note"]


def test_the_calculator_page_has_the_drop_zone(client):
    page = client.get("/").text
    assert '<input id="results" type="file" multiple' in page and 'id="drop"' in page
    assert f"const MAX_RESULT_BYTES = {MAX_BODY_BYTES};" in client.get("/static/calculator.js").text
    assert "/api/compare-results" in client.get("/api/openapi.json").json()["paths"]


# --------------------------------------------------------------------------------------------
# End to end: the real server on a free port, the page in headless Chromium


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def server():
    with running_server() as url:
        yield url


@pytest.fixture(scope="module")
def page():
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright (Python client) is not installed")
    browser_path = _chromium()
    if browser_path is None:
        pytest.skip("no chromium on PATH (.ci/run installs Debian's chromium)")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=browser_path, headless=True)
        try:
            yield browser.new_page()
        finally:
            browser.close()


def test_calculator_page_in_headless_chromium(server, page):
    expect = pytest.importorskip("playwright.sync_api").expect  # the page's CSP forbids wait_for_function's eval
    page.goto(server + "/")
    expect(page.locator("#verdict")).to_have_text("Fits", timeout=30_000)
    kv_before = page.text_content("#kv-total")
    page.fill("#sequences", "8")
    page.fill("#context", "131072")
    expect(page.locator("#verdict")).to_have_text("Does not fit", timeout=30_000)
    assert page.text_content("#kv-total") != kv_before
    assert page.locator(".bar .kv").count() == 1
    assert "KV cache is" in page.text_content("#warnings")


def test_planner_page_solves_in_headless_chromium(server, page):
    page.goto(server + "/planner")
    page.click("#solve")
    page.locator("#plans tr").nth(1).wait_for()
    assert page.text_content("#status").startswith("OPTIMAL")
    assert "l40s" in page.text_content("#plans") or "h100-sxm" in page.text_content("#plans")
