"use strict";
const $ = (id) => document.getElementById(id);
const GB = 1e9;
const fmt = (bytes) => (bytes / GB).toFixed(2) + " GB";

async function getJSON(url) {
  const response = await fetch(url);
  return response.json();
}

async function fillCatalog() {
  const [models, gpus, precisions] = await Promise.all(
    ["models", "gpus", "precisions"].map((kind) => getJSON("/api/catalog/" + kind)));
  for (const m of models) $("models").append(new Option(`${m.hf_id} · ${m.params_b}B`, m.name));
  for (const g of gpus) $("gpu").append(new Option(`${g.name} · ${g.memory_gib} GiB`, g.name));
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

function segment(kind, bytes, total, label) {
  const div = document.createElement("div");
  div.className = kind;
  div.style.width = Math.max(0, (100 * bytes) / total) + "%";
  div.textContent = label;
  div.title = `${kind}: ${fmt(bytes)}`;
  return div;
}

function render(data) {
  const v = data.verdict;
  $("verdict").textContent = v.fits ? "Fits" : "Does not fit";
  $("verdict").className = "verdict " + (v.fits ? "fits" : "nofit");
  const kv = data.kv_cache_bytes;
  const engine = data.engine;
  $("summary").innerHTML = `${data.model} · ${data.precision} weights, ${data.kv_dtype} KV · ` +
    `KV cache <b id="kv-total">${fmt(kv)}</b> for ${data.batch} × ${data.context.toLocaleString()} tokens · ` +
    `weights ${fmt(data.weights_bytes)}` +
    (engine ? ` · ${engine.name} ${engine.release} pool holds ${engine.max_concurrency.toFixed(2)} sequences` : "");
  const bars = $("bars");
  bars.replaceChildren();
  for (const b of data.bars) {
    const total = Math.max(b.memory_bytes, b.memory_bytes - b.headroom_bytes);
    const caption = document.createElement("div");
    caption.textContent = `GPU ${b.rank}: ${fmt(b.memory_bytes - b.headroom_bytes)} of ${fmt(b.memory_bytes)}`;
    const bar = document.createElement("div");
    bar.className = "bar";
    bar.append(segment("weights", b.weights_bytes, total, "weights " + fmt(b.weights_bytes)),
      segment("kv", b.kv_bytes, total, "KV " + fmt(b.kv_bytes)),
      segment("overhead", b.overhead_bytes, total, "overhead"),
      b.headroom_bytes >= 0 ? segment("headroom", b.headroom_bytes, total, "headroom " + fmt(b.headroom_bytes))
        : segment("over", 0, total, ""));
    bars.append(caption, bar);
  }
  const warnings = $("warnings");
  warnings.replaceChildren(...(v.message ? [v.message] : []).concat(v.warnings).map((text) => {
    const li = document.createElement("li");
    li.textContent = text;
    return li;
  }));
}

let pending = 0;
async function update() {
  const ticket = ++pending;
  let body;
  try { body = request(); } catch (e) { $("error").textContent = e.message; return; }
  const response = await fetch("/api/estimate", {
    method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)});
  const data = await response.json();
  if (ticket !== pending) return;  // a newer request is on its way
  if (!response.ok) {
    $("error").textContent = data.error;
    $("verdict").textContent = "—";
    $("verdict").className = "verdict";
    return;
  }
  $("error").textContent = "";
  render(data);
}

let timer;
$("inputs").addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(update, 150); });
fillCatalog().then(update);
