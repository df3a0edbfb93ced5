"use strict";
const $ = (id) => document.getElementById(id);
const GB = 1e9;
const GiB = 2 ** 30;
const fmt = (bytes) => (bytes / GB).toFixed(2) + " GB";
const both = (bytes) => `${fmt(bytes)} (${(bytes / GiB).toFixed(2)} GiB)`;

async function getJSON(url) {
  const response = await fetch(url);
  return response.json();
}

async function fillCatalog() {
  const [models, gpus, precisions] = await Promise.all(
    ["models", "gpus", "precisions"].map((kind) => getJSON("/api/catalog/" + kind)));
  for (const m of models) $("models").append(new Option(`${m.hf_id} · ${m.params_b}B`, m.name));
  for (const g of gpus) $("gpu").append(new Option(`${g.name} · ${g.memory_gb} GB (${g.memory_gib} GiB)`, g.name));
  for (const p of precisions) $("precision").append(new Option(`${p.name} (${p.bits} bits)`, p.name));
  $("gpu").value = gpus.some((g) => g.name === "l40s") ? "l40s" : gpus[0].name;
}

function request() {
  const body = {};
  const pasted = $("config").value.trim();
  if (pasted) {
    try { body.config = JSON.parse(pasted); } catch (e) { throw new Error("config: not valid JSON (" + e.message + ")"); }
  } else {
    body.model = $("model").value.trim();
  }
  for (const id of ["precision", "kv_dtype", "gpu", "engine"]) body[id] = $(id).value;
  for (const id of ["context", "sequences", "tp", "pp"]) body[id] = Number($(id).value);
  return body;
}

function segment(kind, bytes, scale, label) {
  const div = document.createElement("div");
  div.className = kind;
  div.style.width = Math.max(0, (100 * bytes) / scale) + "%";
  div.textContent = label;
  div.title = `${kind}: ${both(bytes)}`;
  return div;
}

// One GPU's bar, against its budget: what fits is stacked up to the budget's edge, headroom fills the rest; when the
// parts need more than the budget, the bar spans what they need and the part past the budget is hatched.
function bar(b) {
  const used = b.weights_bytes + b.kv_bytes + b.overhead_bytes;
  const scale = Math.max(b.budget_bytes, used);
  const caption = document.createElement("div");
  const budget = b.budget_bytes === b.memory_bytes ? `the ${both(b.memory_bytes)} card`
    : `its ${both(b.budget_bytes)} budget (of the ${both(b.memory_bytes)} CUDA sees on the card)`;
  caption.textContent = `GPU ${b.rank}: ${fmt(used)} of ${budget}` +
    (used > b.budget_bytes ? ` · over by ${fmt(used - b.budget_bytes)}` : "");
  const row = document.createElement("div");
  row.className = "bar";
  row.append(segment("weights", b.weights_bytes, scale, "weights " + fmt(b.weights_bytes)),
    segment("kv", b.kv_bytes, scale, "KV " + fmt(b.kv_bytes)),
    segment("overhead", b.overhead_bytes, scale, "overhead"));
  if (used <= b.budget_bytes) {
    row.append(segment("headroom", b.budget_bytes - used, scale, "headroom " + fmt(b.budget_bytes - used)));
  } else {
    row.append(segment("over", used - b.budget_bytes, scale, "over " + fmt(used - b.budget_bytes)));
  }
  return [caption, row];
}

function summary(data) {
  const engine = data.engine;
  const kv = Object.assign(document.createElement("b"), {id: "kv-total", textContent: fmt(data.kv_cache_bytes)});
  const pool = engine ? ` · ${engine.name} ${engine.release} pool holds ${engine.max_concurrency.toFixed(2)} sequences` : "";
  $("summary").replaceChildren(`${data.model} · ${data.precision} weights, ${data.kv_dtype} KV · KV cache `, kv,
    ` for ${data.batch} × ${data.context.toLocaleString()} tokens · weights ${fmt(data.weights_bytes)}${pool}`);
}

function render(data) {
  const v = data.verdict;
  $("verdict").textContent = v.fits ? "Fits" : "Does not fit";
  $("verdict").className = "verdict " + (v.fits ? "fits" : "nofit");
  summary(data);
  $("bars").replaceChildren(...data.bars.flatMap(bar));
  $("warnings").replaceChildren(...(v.message ? [v.message] : []).concat(v.warnings).map((text) =>
    Object.assign(document.createElement("li"), {textContent: text})));
  $("error").textContent = "";
}

// A bad input leaves nothing of the previous answer on screen: only the error
function fail(message) {
  $("verdict").textContent = "—";
  $("verdict").className = "verdict";
  for (const id of ["summary", "bars", "warnings"]) $(id).replaceChildren();
  $("error").textContent = message;
}

// A poster of JSON to one endpoint: each call aborts the request before it, and an answer that still arrives late is
// dropped by its ticket. makeBody() gives the body (null: nothing to send; an exception: fail with its message).
function poster(url) {
  let latest = 0;
  let inFlight = null;
  return async function post(makeBody, show, fail) {
    const ticket = ++latest;
    if (inFlight) inFlight.abort();
    let body;
    try { body = makeBody(); } catch (e) { fail(e.message); return; }
    if (body === null) return;
    inFlight = new AbortController();
    let response, data;
    try {
      response = await fetch(url, {method: "POST", headers: {"Content-Type": "application/json"},
        body: JSON.stringify(body), signal: inFlight.signal});
      data = await response.json();
    } catch (e) {
      if (ticket === latest) fail("no answer from the server (" + e.message + ")");  // not aborted: nothing newer
      return;
    }
    if (ticket !== latest) return;  // a newer request is on its way
    if (!response.ok) fail(data.error); else show(data);
  };
}

const postEstimate = poster("/api/estimate");
const update = () => postEstimate(request, render, fail);

// Benchmark results dropped on the page: each run replayed on the configuration above, measured against predicted.
// The files last dropped are compared again when the configuration is changed (a fit takes seconds: on "change",
// not on every key).
const MAX_RESULT_BYTES = 1048576;  // the server's body limit (planner.serve.app.MAX_BODY_BYTES)
const METRICS = {ttft_ms: "TTFT (ms)", tpot_ms: "TPOT (ms)", output_tok_s: "output tokens/s"};
const number = (x) => x === null ? "—" : x.toLocaleString("en", {maximumFractionDigits: x < 100 ? 2 : 1});
const percent = (x) => x === null ? "—" : (x >= 0 ? "+" : "") + (100 * x).toFixed(1) + "%";
let dropped = [];

function tableRow(tag, texts) {
  const row = document.createElement("tr");
  row.append(...texts.map((text) => Object.assign(document.createElement(tag), {textContent: text})));
  return row;
}

function runTable(run) {
  const table = document.createElement("table");
  const rate = run.request_rate === "inf" ? "all at once" : `${run.request_rate} req/s`;
  const concurrency = run.max_concurrency === null ? "" : ` · concurrency ${run.max_concurrency}`;
  table.append(Object.assign(document.createElement("caption"), {textContent: `${run.result} (${run.tool}) · ` +
    `${rate}${concurrency} · ${number(run.mean_input_tokens)} → ${number(run.mean_output_tokens)} tokens · ` +
    `${run.replayed_prompts} of ${run.completed} prompts replayed`}));
  table.append(tableRow("th", ["metric", "statistic", "measured", "predicted", "error"]));
  for (const c of run.comparisons) {
    table.append(tableRow("td", [METRICS[c.metric], c.statistic, number(c.measured), number(c.predicted),
      percent(c.error)]));
  }
  return table;
}

function factorsBlock(data) {
  const c = data.calibration;
  if (c === null) return [Object.assign(document.createElement("p"), {className: "note", textContent: data.calibration_note})];
  const factors = Object.entries(c.factors).map(([name, value]) => `${name} × ${value.toFixed(2)}`).join(" · ");
  const e = c.errors;
  const held = e.held_out === null ? "" : `, ${e.held_out.toFixed(3)} held out`;
  const yaml = document.createElement("details");
  yaml.append(Object.assign(document.createElement("summary"), {textContent: "calibration.yaml (for --calibration)"}),
    Object.assign(document.createElement("pre"), {textContent: data.calibration_yaml}));
  return [Object.assign(document.createElement("p"), {id: "factor-line", textContent:
    `Calibration factors (${c.fitted_on.generation} × ${c.fitted_on.engine}, informed: ${c.informed.join(", ")}): ` +
    `${factors}; mean |log(predicted / measured)| ${e.before.toFixed(3)} before, ${e.after.toFixed(3)} after${held}`}),
    yaml];
}

function clearComparison(status, error) {
  $("compare-status").textContent = status;
  $("comparison").replaceChildren();
  $("factors").replaceChildren();
  $("compare-error").textContent = error;
}

function showComparison(data) {
  clearComparison(`${data.runs.length} run${data.runs.length === 1 ? "" : "s"} replayed`, "");
  $("comparison").replaceChildren(...data.runs.map(runTable));
  $("factors").replaceChildren(...factorsBlock(data));
}

function comparisonRequest() {
  if (!dropped.length) return null;
  const body = request();
  delete body.context;
  delete body.sequences;
  body.results = dropped;
  clearComparison(`Replaying ${dropped.map((f) => f.name).join(", ")}…`, "");
  return body;
}

const postComparison = poster("/api/compare-results");
const compare = () => postComparison(comparisonRequest, showComparison, (message) => clearComparison("", message));

async function takeResults(files) {
  const size = [...files].reduce((total, file) => total + file.size, 0);
  if (size > MAX_RESULT_BYTES) {
    dropped = [];
    clearComparison("", `results: ${(size / 2 ** 20).toFixed(1)} MiB in all, above the web calculator's 1 MiB; ` +
      "planner calibrate on the command line takes larger files");
    return;
  }
  dropped = await Promise.all([...files].map(async (file) => ({name: file.name, text: await file.text()})));
  compare();
}

$("results").addEventListener("change", () => takeResults($("results").files));
$("drop").addEventListener("dragover", (e) => { e.preventDefault(); $("drop").classList.add("dragging"); });
$("drop").addEventListener("dragleave", () => $("drop").classList.remove("dragging"));
$("drop").addEventListener("drop", (e) => {
  e.preventDefault();
  $("drop").classList.remove("dragging");
  takeResults(e.dataTransfer.files);
});

let timer;
$("inputs").addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(update, 150); });
$("inputs").addEventListener("change", compare);
fillCatalog().then(update);
