"use strict";
const $ = (id) => document.getElementById(id);
const COLUMNS = ["rank", "gpu", "gpus_per_replica", "tp", "pp", "replicas", "precision", "kv_dtype", "provider",
  "market", "usd_per_hour"];

async function post(url, body) {
  const response = await fetch(url, {method: "POST", headers: {"Content-Type": "application/json"},
    body: JSON.stringify(body)});
  if (!response.ok) {
    const data = await response.json().catch(() => ({error: response.statusText}));
    throw new Error(data.error);
  }
  return response;
}

function table(rows) {
  const t = $("plans");
  t.replaceChildren();
  if (!rows.length) return;
  const columns = COLUMNS.filter((c) => c in rows[0]);
  const head = t.insertRow();
  for (const c of columns) head.append(Object.assign(document.createElement("th"), {textContent: c}));
  for (const r of rows) {
    const tr = t.insertRow();
    for (const c of columns) tr.insertCell().textContent = r[c] ?? "";
  }
}

$("upload").addEventListener("change", async (event) => {
  const file = event.target.files[0];
  if (file) $("scenario").value = await file.text();
});

$("solve").addEventListener("click", async () => {
  $("error").textContent = ""; $("status").textContent = "solving…";
  try {
    const data = await (await post("/api/solve", {scenario: $("scenario").value})).json();
    $("status").textContent = `${data.status ?? ""} ${data.usd_per_hour !== undefined ? "$" + data.usd_per_hour + "/h" : ""}`;
    table(data.plans ?? []);
    $("raw").textContent = JSON.stringify(data, null, 2);
  } catch (e) { $("status").textContent = ""; $("error").textContent = e.message; }
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
