"""The pages of planner serve in headless Chromium (issue 25): what a user sees after a bad input, a late answer, a
fleet plan, a narrow window, an engine's budget, and a page reached through a name that is not the server's.

Debian's chromium driven by playwright's client (the `test` extra); the pages' Content-Security-Policy forbids
eval, so the waits are locator assertions, never wait_for_function."""

import json
import re
import shutil
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the web extra is not installed (pip install '.[web]')")
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright (Python client) is not installed")
expect = sync_api.expect

from serve_process import running_server  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")

SCENARIOS = Path(__file__).parents[1] / "scenarios"
CALIBRATION = Path(__file__).parents[1] / "examples" / "calibration"
WAIT_MS = 60_000  # a shared 2-core machine: an estimate takes milliseconds, a page load and a solve seconds
NARROW = {"width": 420, "height": 900}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with running_server(tmp_path_factory.mktemp("serve")) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        # evil.example resolves to this machine, as a DNS-rebinding attacker's name would
        launched = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=["--host-resolver-rules=MAP evil.example 127.0.0.1"])
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport=NARROW)
    try:
        yield context.new_page()
    finally:
        context.close()


def _calculator(page, server: str) -> None:
    page.goto(server + "/")
    expect(page.locator("#verdict")).to_have_text("Fits", timeout=WAIT_MS)


def _does_not_fit(page) -> None:
    page.fill("#sequences", "8")
    page.fill("#context", "131072")
    expect(page.locator("#verdict")).to_have_text("Does not fit", timeout=WAIT_MS)


def _solve(page, server: str, scenario: str, reload: bool = True) -> None:
    if reload:
        page.goto(server + "/planner")
    page.fill("#scenario", scenario)
    page.click("#solve")
    expect(page.locator("#status")).to_contain_text("OPTIMAL", timeout=WAIT_MS)


def test_a_bad_input_clears_the_previous_verdict(page, server):
    _calculator(page, server)
    page.fill("#context", "0")
    expect(page.locator("#error")).to_contain_text("context", timeout=WAIT_MS)
    expect(page.locator("#verdict")).to_have_text("—")
    assert page.locator("#bars > *").count() == 0 and page.locator("#warnings li").count() == 0
    assert page.text_content("#summary") == ""
    page.fill("#context", "8192")  # a good input again: the error goes
    expect(page.locator("#verdict")).to_have_text("Fits", timeout=WAIT_MS)
    assert page.text_content("#error") == ""
    page.fill("#config", "{not json")
    expect(page.locator("#error")).to_contain_text("config: not valid JSON", timeout=WAIT_MS)
    expect(page.locator("#verdict")).to_have_text("—")
    assert page.locator("#bars > *").count() == 0


def test_dropped_results_show_predicted_against_measured_and_a_bad_file_one_line(page, server):
    _calculator(page, server)
    page.select_option("#gpu", "h100-sxm")
    page.set_input_files("#results", [CALIBRATION / "vllm-llama-3.1-8b-h100-c1.json",
                                      CALIBRATION / "vllm-llama-3.1-8b-h100-c8.json"])
    expect(page.locator("#compare-status")).to_have_text("2 runs replayed", timeout=WAIT_MS)
    tables = page.locator("#comparison table")
    expect(tables).to_have_count(2)
    assert tables.nth(0).locator("caption").text_content() == (
        "vllm-llama-3.1-8b-h100-c1.json (vllm) · all at once · concurrency 1 · 1,000 → 200 tokens · "
        "10 of 10 prompts replayed")
    tpot_p99 = tables.nth(1).locator("tr").nth(6).locator("td")
    assert [tpot_p99.nth(i).text_content() for i in range(3)] == ["TPOT (ms)", "p99", "8.31"]  # c8: 8.307 ms
    assert tables.nth(1).locator("tr").nth(1).locator("td").nth(2).text_content() == "145.2"  # mean TTFT 145.19 ms
    # the factors, or (on a busy machine) the fit's one line on the web's time limit
    expect(page.locator("#factors")).to_contain_text(re.compile(r"^(Calibration factors \(hopper × vllm|"
                                                                 r"factors: not fitted)"))
    page.set_input_files("#results", files=[{"name": "bad.json", "mimeType": "application/json",
                                             "buffer": b'{"hello": 1}'}])
    expect(page.locator("#compare-error")).to_have_text(re.compile(r"^result: bad.json has none of model_id \(vLLM\)"),
                                                        timeout=WAIT_MS)
    assert page.locator("#comparison table").count() == 0 and page.text_content("#factors") == ""


def _hold_first(page, pattern: str) -> list:
    """Hold back the first request to `pattern` (its route, in the list returned); let the others through."""
    held = []
    page.route(pattern, lambda route: held.append(route) if not held else route.continue_())
    return held


def _wait_until_held(page, held: list) -> None:
    for _ in range(WAIT_MS // 100):
        if held:
            return
        page.wait_for_timeout(100)
    pytest.fail("the page sent no request")


def _answer_late(page, held: list) -> dict:
    """Answer the held request now, with what the server says to it; its JSON."""
    answer = held[0].fetch()
    try:
        held[0].fulfill(response=answer)
    except sync_api.Error:
        pass  # the page aborted that request when the newer one started: the answer can no longer arrive
    page.wait_for_timeout(500)
    return answer.json()


def test_a_late_estimate_does_not_overwrite_a_newer_one(page, server):
    _calculator(page, server)
    held = _hold_first(page, "**/api/estimate")
    page.fill("#context", "16384")  # its answer is held back...
    _wait_until_held(page, held)
    _does_not_fit(page)  # ...while the next change is answered
    assert _answer_late(page, held)["verdict"]["fits"] is True  # what the late answer would have shown
    expect(page.locator("#verdict")).to_have_text("Does not fit")


def test_a_late_plan_does_not_overwrite_a_newer_one(page, server):
    page.goto(server + "/planner")
    held = _hold_first(page, "**/api/solve")
    page.fill("#scenario", (SCENARIOS / "8b-budget.yaml").read_text())
    page.click("#solve")  # its answer is held back...
    _wait_until_held(page, held)
    _solve(page, server, (SCENARIOS / "multi-model-fleet.yaml").read_text(), reload=False)  # ...this one is shown
    assert _answer_late(page, held)["kind"] == "plan"  # what the late answer would have shown
    expect(page.locator("#plans caption")).to_have_text("Assignments")
    assert page.text_content("#status").startswith("OPTIMAL · fleet")


def test_under_vllm_the_bar_is_drawn_against_the_budget_with_the_overflow(page, server):
    _calculator(page, server)
    caption = page.locator("#bars > div").first
    # vLLM 0.34.0's budget is the whole card (its extensible KV cache defaults gpu_memory_utilization to 1.0), so the
    # caption names the card; the bar is still the engine's budget, and what is past it is drawn as overflow
    expect(caption).to_contain_text("card")
    assert page.locator(".bar .headroom").count() == 1 and page.locator(".bar .over").count() == 0
    _does_not_fit(page)
    expect(caption).to_contain_text("over by")
    assert page.locator(".bar .over").count() == 1 and page.locator(".bar .headroom").count() == 0
    bar, over = page.locator(".bar").bounding_box(), page.locator(".bar .over").bounding_box()
    assert over["width"] > 0.5 * bar["width"]  # 155 GB against a 48 GB budget: most of the bar is past it
    assert over["x"] + over["width"] == pytest.approx(bar["x"] + bar["width"], abs=1)
    warnings = page.text_content("#warnings")
    assert "fewer than sequences 8" in warnings and "--batch" not in warnings and "does not fit:" not in warnings
    page.select_option("#engine", "simple")  # the simple margin's budget is the whole card
    expect(caption).to_contain_text("card", timeout=WAIT_MS)
    expect(caption).not_to_contain_text("budget")


def test_the_verdict_is_announced_and_the_bars_are_readable(page, server):
    _calculator(page, server)
    assert page.get_attribute("#verdict", "aria-live") == "polite"
    _does_not_fit(page)
    for kind in ("weights", "kv", "overhead", "over"):
        colour, background = page.locator(f".bar .{kind}").evaluate(
            "e => [getComputedStyle(e).color, getComputedStyle(e).backgroundColor]")
        assert _contrast(colour, background) >= 4.5, (kind, colour, background)
    assert "GiB" in page.text_content("#bars") and "GB" in page.text_content("#bars")
    assert " GiB)" in page.locator("#gpu option").first.text_content()


def _contrast(colour: str, background: str) -> float:
    """WCAG 2 contrast ratio of two CSS rgb() colours."""
    def luminance(css: str) -> float:
        channels = [int(c) / 255 for c in css[css.index("(") + 1:css.index(")")].split(",")[:3]]
        r, g, b = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
        return 0.2126 * r + 0.7152 * g + 0.0722 * b
    light, dark = sorted((luminance(colour), luminance(background)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def test_fleet_plans_are_tables(page, server):
    fleet = (SCENARIOS / "multi-model-fleet.yaml").read_text()
    _solve(page, server, fleet)
    expect(page.locator("#plans caption")).to_have_text("Assignments")
    plan = json.loads(page.text_content("#raw"))
    assert page.locator("#plans tbody tr").count() == len(plan["assignments"]) > 1
    assert page.locator("#pools tbody tr").count() == len(plan["pools"]) > 0
    workloads = page.locator("#plans tbody tr td:first-child").all_text_contents()
    assert sorted(set(workloads)) == sorted({a["workload"] for a in plan["assignments"]})
    assert "{" not in page.text_content("#plans")
    assert page.text_content("#status").startswith(f"{plan['status']} · fleet · ${plan['usd_per_hour']:.2f}/hour")


def test_a_bad_scenario_clears_the_previous_plan(page, server):
    _solve(page, server, (SCENARIOS / "8b-budget.yaml").read_text())
    assert page.locator("#plans tbody tr").count() > 0
    page.fill("#scenario", "model: llama-3.1-8b\nworkload: {context: many}\n")
    page.click("#solve")
    expect(page.locator("#error")).to_contain_text("context", timeout=WAIT_MS)
    assert page.locator("#plans tr").count() == 0 and page.text_content("#status") == ""
    assert page.text_content("#raw") == ""


@pytest.mark.parametrize("path", ["/", "/planner"])
def test_narrow_windows_do_not_scroll_sideways(page, server, path):
    if path == "/":
        _calculator(page, server)
        _does_not_fit(page)  # long warnings and a bar past its budget
    else:
        _solve(page, server, (SCENARIOS / "multi-model-fleet.yaml").read_text())  # wide tables
    assert page.evaluate("document.documentElement.scrollWidth") <= NARROW["width"]
    page.set_viewport_size({"width": 1280, "height": 900})  # and a wide window uses its width
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280


def test_a_page_reached_through_another_name_is_refused(page, server):
    port = server.rsplit(":", 1)[1]
    response = page.goto(f"http://evil.example:{port}/")
    assert response.status == 421 and "Host: 'evil.example:" in page.text_content("body")
    assert page.locator("#verdict").count() == 0  # not the calculator
    response = page.goto(f"http://localhost:{port}/")
    assert response.status == 200
    expect(page.locator("#verdict")).to_have_text("Fits", timeout=WAIT_MS)
