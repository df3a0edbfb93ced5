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

// Each change aborts the request before it; an answer that still arrives late is dropped by its ticket
let latest = 0;
let inFlight = null;
async function update() {
  const ticket = ++latest;
  if (inFlight) inFlight.abort();
  let body;
  try { body = request(); } catch (e) { fail(e.message); return; }
  inFlight = new AbortController();
  let response, data;
  try {
    response = await fetch("/api/estimate", {method: "POST", headers: {"Content-Type": "application/json"},
      body: JSON.stringify(body), signal: inFlight.signal});
    data = await response.json();
  } catch (e) {
    if (ticket === latest) fail("no answer from the server (" + e.message + ")");  // not aborted: nothing newer
    return;
  }
  if (ticket !== latest) return;  // a newer request is on its way
  if (!response.ok) fail(data.error); else render(data);
}

let timer;
$("inputs").addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(update, 150); });
fillCatalog().then(update);
