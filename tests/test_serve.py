"""planner serve against hostile clients (issue 25, finding 11): the server's folder, the Host check, time limits,
idle and trickling connections, SIGTERM, hostile YAML and numbers, the security headers, and messages in the
page's words. In-process through the same ASGI layers `planner serve` runs, and as a real server where the
behaviour lives in the process (its folder, its sockets, its signals)."""

import asyncio
import json
import os
import re
import signal
import socket
import sys
import threading
import time
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the web extra is not installed (pip install '.[web]')")
from fastapi.testclient import TestClient  # noqa: E402

from serve_process import running_server, start_server, stop_server  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import fuzz  # noqa: E402 - bench/ is not a package

from planner.serve.app import (HEADERS_TIMEOUT_S, REQUEST_TIME_LIMIT_S, BodyLimit, Guard, HostNames,  # noqa: E402
                               create_app)

SCENARIOS = Path(__file__).parents[1] / "scenarios"
PORT = 8000
ORIGIN = f"http://127.0.0.1:{PORT}"
LLAMA = {"model": "llama-3.1-8b", "gpu": "l40s", "context": 8192, "sequences": 1, "engine": "vllm"}
CHAT = "model: llama-3.1-8b\nworkload: {context: 8192, concurrency: 16}\nsearch: {gpus: [l40s]}\n"
# planner's own flags, which the pages do not have (vLLM's flags in an engine's advice are the engine's)
PLANNER_FLAGS = re.compile(r"--(batch|context|tp|pp|gpu|gpus|kv-dtype|precision|prompt-tokens|output-tokens|"
                           r"time-limit|checkpoint|engine|rate)\b")


def guarded(app=None, host: str = "127.0.0.1", **guard) -> TestClient:
    """A client of the ASGI stack `planner serve` runs (Guard > BodyLimit > app), addressed as a browser would."""
    return TestClient(Guard(BodyLimit(app or create_app()), HostNames.of(host, PORT), **guard), base_url=ORIGIN)


@pytest.fixture(scope="module")
def client():
    return guarded()


# --------------------------------------------------------------------------------------------
# The Host check (DNS rebinding)


@pytest.mark.parametrize("host", ["127.0.0.1:8000", "localhost:8000", "[::1]:8000", "LOCALHOST:8000"])
def test_loopback_names_with_the_port_are_answered(client, host):
    response = client.get("/api/catalog/precisions", headers={"host": host})
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("host", ["evil.example:8000", "evil.example", "127.0.0.1:8001", "127.0.0.1",
                                  "localhost.evil.example:8000", "127.0.0.1:8000.evil", "[::1]x:8000", "10.0.0.5:8000",
                                  "a" * 5000])
def test_any_other_host_is_refused_with_a_json_error(client, host):
    for method, path in (("GET", "/"), ("GET", "/api/catalog/gpus"), ("POST", "/api/estimate")):
        response = client.request(method, path, headers={"host": host}, json=LLAMA)
        assert response.status_code == 421, (host, path)
        error = response.json()["error"]
        assert error.startswith("Host: ") and "\n" not in error and len(error) < 400


def test_a_missing_host_is_refused():
    assert HostNames.of("127.0.0.1", PORT).refusal("").startswith("Host: missing")


def test_host_names_follow_the_listening_address():
    named = HostNames.of("planner.lan", PORT)
    assert named.refusal("planner.lan:8000") is None and named.refusal("localhost:8000") is None
    assert named.refusal("other.lan:8000")
    everywhere = HostNames.of("0.0.0.0", PORT)
    # on every address a client may use any of the machine's addresses, but a name only if it is the machine's
    assert everywhere.refusal("192.168.1.5:8000") is None and everywhere.refusal("[fe80::1]:8000") is None
    assert everywhere.refusal("evil.example:8000") and everywhere.refusal("192.168.1.5:9999")
    assert HostNames.of("127.0.0.1", 80).refusal("localhost") is None


# --------------------------------------------------------------------------------------------
# Security headers on every response, and no third-party script


def test_every_response_carries_the_security_headers(client):
    responses = [client.get("/"), client.get("/planner"), client.get("/static/calculator.js"),
                 client.get("/api/catalog/gpus"), client.get("/api/nothing"), client.get("/api/docs"),
                 client.post("/api/estimate", json={**LLAMA, "gpu": "h900"}),
                 client.post("/api/estimate", content=b"x" * (2 << 20)),
                 client.get("/", headers={"host": "evil.example:8000"})]
    assert [r.status_code for r in responses] == [200, 200, 200, 200, 404, 404, 400, 413, 421]
    for response in responses:
        policy = response.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in policy and "http" not in policy, response.url
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["x-frame-options"] == "DENY"
    page_policy = responses[0].headers["content-security-policy"]
    assert "default-src 'self'" in page_policy and "unsafe" not in page_policy


def test_no_swagger_ui_and_no_script_from_elsewhere(client):
    assert client.get("/api/docs").status_code == 404
    assert client.get("/api/openapi.json").status_code == 200
    for page in ("/", "/planner"):
        html = client.get(page).text
        assert re.findall(r"<script[^>]*>", html) == [f'<script src="/static/{page.strip("/") or "calculator"}.js">']
        for link in re.findall(r'(?:src|href)="([^"]*)"', html):  # this server's paths only
            assert link == "data:," or (link.startswith("/") and not link.startswith("//")), (page, link)


# --------------------------------------------------------------------------------------------
# Hostile YAML and numbers: a 4xx with one error line, never a 500


@pytest.mark.parametrize("scenario, field", [
    ("[" * 100_000, "scenario"),
    ("{a: " * 50_000, "scenario"),
    ("model: llama-3.1-8b\nworkload: {context: " + "9" * 5000 + "}\n", "scenario"),
    ("model: llama-3.1-8b\nworkload: {context: 1e999}\n", "context"),
    ("&a [*a]", "scenario"),
    ("model: llama-3.1-8b\nmodel: llama-3.1-70b\nworkload: {context: 8192}\n", "scenario"),
    ("calibration: /etc/passwd\nmodel: llama-3.1-8b\nworkload: {context: 8192}\n", "calibration"),
])
def test_hostile_scenarios_get_a_4xx_naming_the_field(client, scenario, field):
    for path, extra in (("/api/solve", {}), ("/api/report", {}), ("/api/export", {"target": "vllm"})):
        started = time.perf_counter()
        response = client.post(path, json={"scenario": scenario, **extra})
        assert 400 <= response.status_code < 500, (path, response.text[:300])
        error = response.json()["error"]
        assert field in error and "\n" not in error and "Traceback" not in error
        assert time.perf_counter() - started < 10


@pytest.mark.parametrize("body", [
    b'{"model": "llama-3.1-8b", "gpu": "l40s", "context": ' + b"9" * 5000 + b"}",
    b'{"model": "llama-3.1-8b", "gpu": "l40s", "context": 1e400}',
    b'{"config": ' + b'{"a": ' * 5000 + b"1" + b"}" * 5001,
    b"\xff\xfe{}",
])
def test_hostile_json_numbers_and_nesting_get_a_4xx(client, body):
    response = client.post("/api/estimate", content=body, headers={"content-type": "application/json"})
    assert 400 <= response.status_code < 500 and response.json()["error"].startswith(("body", "context")), response.text


# --------------------------------------------------------------------------------------------
# Messages in the page's words


def test_engine_verdicts_name_the_pages_fields_and_drop_the_simple_margins_verdict(client):
    data = client.post("/api/estimate", json={**LLAMA, "context": 131072, "sequences": 8}).json()
    verdict = data["verdict"]
    assert verdict["fits"] is False and "fewer than sequences 8" in verdict["message"]
    shown = [verdict["message"], *verdict["warnings"]]
    assert not any(PLANNER_FLAGS.search(text) for text in shown), shown
    # the simple margin's "does not fit" is not vLLM's verdict; the model's own warnings stay
    assert not any(text.startswith(("does not fit:", "little headroom:")) for text in verdict["warnings"])
    assert any("KV cache is" in text for text in verdict["warnings"])
    simple = client.post("/api/estimate", json={**LLAMA, "context": 131072, "sequences": 8, "engine": "simple"}).json()
    [margin] = [w for w in simple["verdict"]["warnings"] if w.startswith("does not fit:")]
    assert "lower context/sequences" in margin and not PLANNER_FLAGS.search(margin)


def test_errors_name_the_requests_fields(client):
    perf = client.post("/api/perf", json={"model": "llama-3.1-8b", "gpu": "l40s", "prompt_tokens": 131072,
                                          "output_tokens": 1})
    assert perf.status_code == 400 and perf.json()["error"].startswith("prompt_tokens / output_tokens: ")
    export = client.post("/api/export", json={"scenario": CHAT, "target": "vllm", "checkpoint": "--trust-remote-code"})
    assert export.status_code == 400 and export.json()["error"].startswith("checkpoint: ")


def test_a_search_that_runs_out_of_time_says_so_without_cli_flags():
    out_of_time = guarded(create_app(time_limit_s=0.001))
    response = out_of_time.post("/api/solve", json={"scenario": (SCENARIOS / "8b-budget.yaml").read_text()})
    assert response.status_code == 400
    error = response.json()["error"]
    assert "time limit ran out" in error and "web planner's limit" in error and not PLANNER_FLAGS.search(error)


# --------------------------------------------------------------------------------------------
# Time limits and cancellation, in-process


def never_answers(cancelled: threading.Event):
    """An ASGI app that works for a minute unless cancelled, and says when it was."""
    async def app(scope, receive, send):
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise
    return app


def test_a_request_past_the_limit_gets_a_json_error_and_its_work_is_cancelled():
    cancelled = threading.Event()
    started = time.perf_counter()
    response = guarded(never_answers(cancelled), limit_s=0.3).post("/api/solve", json={"scenario": CHAT})
    assert time.perf_counter() - started < 5
    assert response.status_code == 503 and "0.3 s limit" in response.json()["error"]
    assert cancelled.wait(5)


def test_the_client_leaving_cancels_the_work():
    """BodyLimit owns the request's messages: http.disconnect after the body cancels the app."""
    cancelled = threading.Event()

    async def run() -> float:
        messages = [{"type": "http.request", "body": b"{}", "more_body": False}]

        async def receive():
            if messages:
                return messages.pop(0)
            await asyncio.sleep(0.2)  # the client leaves a moment after sending its request
            return {"type": "http.disconnect"}

        async def send(message):
            raise AssertionError(f"nothing is sent to a client that left: {message}")

        started = time.perf_counter()
        await BodyLimit(never_answers(cancelled))({"type": "http", "headers": []}, receive, send)
        await asyncio.sleep(0)  # the cancelled work runs its last step
        return time.perf_counter() - started

    assert asyncio.run(run()) < 5 and cancelled.is_set()


# --------------------------------------------------------------------------------------------
# The real server: its folder, its connections, its signals


def _post(url: str, body: dict, timeout: float = 30) -> tuple[int, dict | str]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            text = response.read().decode()
            return response.status, json.loads(text) if "json" in response.headers["content-type"] else text
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """A server started in a folder holding what a catalog name would find as a path: a model folder with its own
    config, a symbolic link to another, a file."""
    folder = tmp_path_factory.mktemp("server-folder")
    (folder / "llama-3.1-8b").mkdir()
    (folder / "llama-3.1-8b" / "config.json").write_text(json.dumps(
        {"model_type": "planted-type", "architectures": ["LlamaForCausalLM"], "hidden_size": 64,
         "num_hidden_layers": 1, "num_attention_heads": 1, "intermediate_size": 64, "vocab_size": 10}))
    (folder / "llama-3.1-70b").symlink_to(folder / "llama-3.1-8b")
    (folder / "qwen3-8b").write_text('{"model_type": "planted-file"}')
    with running_server(folder) as url:
        yield url


def test_catalog_names_are_never_paths_in_the_servers_folder(planted, client):
    for model in ("llama-3.1-8b", "llama-3.1-70b", "qwen3-8b"):
        body = {**LLAMA, "model": model, "gpu": "h100-sxm", "tp": 2}
        status, data = _post(planted + "/api/estimate", body)
        assert status == 200 and data == client.post("/api/estimate", json=body).json(), model
        assert "planted" not in json.dumps(data)
        speed = {"model": model, "gpu": "h100-sxm", "tp": 2}
        status, timed = _post(planted + "/api/perf", speed)
        assert status == 200 and timed == client.post("/api/perf", json=speed).json(), model
    status, plan = _post(planted + "/api/solve", {"scenario": CHAT.replace("llama-3.1-8b", "llama-3.1-70b")})
    assert status == 200 and plan["model"] == "llama-3.1-70b" and plan["best"]["gpus_per_replica"] > 1
    status, text = _post(planted + "/api/export", {"scenario": CHAT, "target": "vllm"})
    assert status == 200 and "meta-llama/Llama-3.1-8B-Instruct" in text and "planted" not in text


def test_idle_and_trickling_connections_are_closed_and_others_served(planted):
    host, port = planted.removeprefix("http://").split(":")
    idle = [socket.create_connection((host, int(port))) for _ in range(70)]  # more than the server's slots
    trickle = socket.create_connection((host, int(port)))
    started = time.perf_counter()
    try:
        for byte in b"GET /api/catalog/gpus HTTP/1.1\r\nHost: 127.0.0.1\r\n":  # never ends its headers
            try:
                trickle.sendall(bytes([byte]))
            except OSError:
                break  # closed by the server: the point
            time.sleep(0.2)
            if time.perf_counter() - started > HEADERS_TIMEOUT_S + 5:
                break
        assert time.perf_counter() - started < HEADERS_TIMEOUT_S + 5
        for connection in idle:
            connection.settimeout(HEADERS_TIMEOUT_S + 5)
            assert connection.recv(1) == b""  # closed by the server
        with urllib.request.urlopen(planted + "/api/catalog/precisions", timeout=5) as response:
            assert response.status == 200
    finally:
        for connection in (*idle, trickle):
            connection.close()


def test_a_body_that_never_arrives_gets_408(planted):
    host, port = planted.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as connection:
        connection.sendall(f"POST /api/estimate HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                           "Content-Length: 100\r\n\r\n{\"model\":".encode())
        connection.settimeout(REQUEST_TIME_LIMIT_S + 10)
        started = time.perf_counter()
        answer = b""
        while not answer.endswith(b"}"):  # the headers and the JSON body may come in separate reads
            answer += connection.recv(65536) or b"}"
        answer = answer.decode()
    assert time.perf_counter() - started < REQUEST_TIME_LIMIT_S + 5
    assert answer.startswith("HTTP/1.1 408") and '{"error":"body: not received within' in answer


def test_sigterm_ends_the_server_while_a_report_runs(tmp_path):
    process, url = start_server(tmp_path)
    heavy = {"scenario": (SCENARIOS / "moe-qwen3-30b-a3b.yaml").read_text()}  # about 7 s of search and charts
    answers = []
    request = threading.Thread(target=lambda: answers.append(_post(url + "/api/report", heavy)), daemon=True)
    request.start()
    time.sleep(1.0)
    started = time.perf_counter()
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=30)
    assert time.perf_counter() - started < REQUEST_TIME_LIMIT_S + 3
    request.join(5)
    [(status, data)] = answers  # the request in flight is told, not dropped
    assert status == 503 and data["error"].startswith("server: shutting down")


def test_a_request_h11_cannot_parse_gets_a_json_400_and_its_body_is_read(planted):
    host, port = planted.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as connection:
        connection.sendall(f"POST /api/estimate HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Length: 1e3\r\n\r\n".encode())
        connection.sendall(b"x" * (1 << 20))  # still sending when the answer comes: no reset before it is read
        connection.settimeout(10)
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    head, _, body = answer.decode().partition("\r\n\r\n")
    assert head.startswith("HTTP/1.1 400") and "x-content-type-options: nosniff" in head
    assert json.loads(body)["error"].startswith("request: not valid HTTP/1.1")


def test_a_trailing_slash_is_not_found_rather_than_redirected(client):
    response = client.get("/api/estimate/", follow_redirects=False)
    assert response.status_code == 404 and response.json() == {"error": "Not Found"}


def test_the_http_fuzz_surface_runs_clean(tmp_path):
    tally = fuzz.run_surface("http", 150, int(os.environ.get("PLANNER_FUZZ_SEED", "0")), tmp_path)
    assert not tally.findings and tally.results + tally.errors == 150, tally.summary()


def test_the_http_fuzz_surface_sees_what_breaks_the_contract():
    """Its check is not vacuous: a 5xx, a 3xx, a slow answer, a plain-text error, a missing header are findings."""
    headers = {"content-type": "application/json", "x-content-type-options": "nosniff",
               "content-security-policy": "default-src 'none'; frame-ancestors 'none'"}
    good = fuzz.HttpAnswer("POST", "/api/estimate", 400, headers, b'{"error": "gpu: no such GPU"}', 0.1)
    assert fuzz.http_problem(good) is None
    for bad in (replace(good, status=500), replace(good, status=307), replace(good, seconds=11.0),
                replace(good, body=b"Bad Request"), replace(good, body=b'{"error": "a\nb"}'),
                replace(good, headers={"content-type": "application/json"}),
                replace(good, status=200, path="/api/report", headers={**headers, "content-type": "text/plain"})):
        assert fuzz.http_problem(bad), bad


def test_listening_beyond_this_machine_warns_that_there_is_no_authentication(tmp_path):
    process, _ = start_server(tmp_path, "--host", "0.0.0.0")
    stop_server(process)
    assert "no authentication" in process.stderr.read()
    process, _ = start_server(tmp_path)
    stop_server(process)
    assert "no authentication" not in process.stderr.read()
