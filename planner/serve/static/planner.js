"use strict";
const $ = (id) => document.getElementById(id);
// The columns shown of each kind of row (the plan JSON holds more: it is under "Plan JSON")
const PLAN_COLUMNS = ["rank", "gpu", "gpus_per_replica", "tp", "pp", "replicas", "precision", "kv_dtype", "context",
  "concurrency", "provider", "instance", "market", "usd_per_hour"];
const ASSIGNMENT_COLUMNS = ["workload", "replicas", "gpu", "gpus_per_replica", "tp", "pp", "precision", "kv_dtype",
  "max_model_len", "capacity_rps_per_replica", "ttft_s", "tpot_s", "provider", "instance", "market"];
const POOL_COLUMNS = ["provider", "instance", "region", "market", "gpu", "instances", "gpus_used", "usd_per_hour"];

async function post(url, body, signal) {
  const response = await fetch(url, {method: "POST", headers: {"Content-Type": "application/json"},
    body: JSON.stringify(body), signal});
  if (!response.ok) {
    const data = await response.json().catch(() => ({error: response.statusText}));
    throw new Error(data.error);
  }
  return response;
}

function table(id, title, rows, columns) {
  const t = $(id);
  t.replaceChildren();
  if (!rows.length) return;
  t.createCaption().textContent = title;
  const shown = columns.filter((c) => c in rows[0]);
  const head = t.createTHead().insertRow();
  for (const c of shown) head.append(Object.assign(document.createElement("th"), {textContent: c}));
  const body = t.createTBody();
  for (const r of rows) {
    const tr = body.insertRow();
    for (const c of shown) tr.insertCell().textContent = r[c] ?? "";
  }
}

function money(usd) {
  return usd === undefined || usd === null ? "" : ` · $${usd.toFixed(2)}/hour`;
}

// A fleet plan lists assignments (workload x configuration) and the instance pools it rents; a single plan, options
function show(data) {
  if (data.kind === "fleet") {
    $("status").textContent = `${data.status} · fleet${money(data.usd_per_hour)}`;
    table("plans", "Assignments", data.assignments, ASSIGNMENT_COLUMNS);
    table("pools", "Rented", data.pools, POOL_COLUMNS);
  } else {
    $("status").textContent = `${data.status}${money(data.plans[0]?.usd_per_hour)}`;
    table("plans", "Plans", data.plans, PLAN_COLUMNS);
    table("pools", "", [], []);
  }
  $("raw").textContent = JSON.stringify(data, null, 2);
  $("error").textContent = "";
}

// A bad scenario leaves nothing of the previous plan on screen: only the error
function fail(message) {
  for (const id of ["plans", "pools"]) $(id).replaceChildren();
  $("status").textContent = "";
  $("raw").textContent = "";
  $("error").textContent = message;
}

$("upload").addEventListener("change", async (event) => {
  const file = event.target.files[0];
  if (file) $("scenario").value = await file.text();
});

// Each solve aborts the one before it; an answer that still arrives late is dropped by its ticket
let latest = 0;
let inFlight = null;
$("solve").addEventListener("click", async () => {
  const ticket = ++latest;
  if (inFlight) inFlight.abort();
  inFlight = new AbortController();
  $("error").textContent = ""; $("status").textContent = "solving…";
  try {
    const data = await (await post("/api/solve", {scenario: $("scenario").value}, inFlight.signal)).json();
    if (ticket === latest) show(data);
  } catch (e) {
    if (ticket === latest) fail(e.message);
  }
});

$("download").addEventListener("click", async () => {
  $("error").textContent = "";
  const target = $("target").value;
  const scenario = $("scenario").value;
  try {
    const response = target === "report" ? await post("/api/report", {scenario})
      : target === "plan" ? await post("/api/solve", {scenario}) : await post("/api/export", {scenario, target});
    const names = {report: "report.html", plan: "plan.json", skypilot: "task.yaml", kubernetes: "manifest.yaml"};
    const link = Object.assign(document.createElement("a"), {
      href: URL.createObjectURL(await response.blob()), download: names[target] ?? `${target}.sh`});
    link.click();
  } catch (e) { $("error").textContent = e.message; }
});
