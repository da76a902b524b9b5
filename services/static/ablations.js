"use strict";
// CultureKAR web page, Ablations tab: pick a benchmark under DATA_DIR/datasets, choose conditions,
// start a job (POST /v1/ablations), poll its progress, download predictions per condition.
// Self-contained (its own helpers inside this closure). Server data goes in with textContent only.
(() => {
  const byId = (id) => document.getElementById(id);
  const FINISHED = ["succeeded", "failed", "cancelled", "interrupted"];
  let timer = null;

  function make(tag, text, cls) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (cls) node.className = cls;
    return node;
  }
  function headers(json) {
    const key = byId("api-key").value.trim();
    const h = json ? { "Content-Type": "application/json" } : {};
    if (key) { localStorage.setItem("kar-api-key", key); h.Authorization = "Bearer " + key; }
    return h;
  }
  function showError(err) {
    // the API's error lines (for invalid_dataset: one line per bad item) shown verbatim, as text
    const e = (err && err.error) || { code: "error", message: String(err) };
    const box = byId("abl-error");
    box.textContent = e.code + ": " + e.message;
    box.hidden = false;
  }
  function download(jobId, kind, condition, label) {
    const a = make("a", label);
    a.href = "/v1/ablations/" + encodeURIComponent(jobId) + "/" + kind + "/" + encodeURIComponent(condition);
    a.setAttribute("download", "");
    a.className = "abl-" + kind;
    return a;
  }

  async function loadDatasets() {
    const select = byId("abl-dataset");
    const r = await fetch("/v1/ablations/datasets");
    const list = r.ok ? await r.json() : [];
    const keep = select.value;
    const options = list.map((d) => {
      const opt = make("option", d.name + (d.kind === "folder" ? "/ (folder)" : "") + " · " + Math.max(1, Math.round(d.size_bytes / 1024)) + " KiB");
      opt.value = d.name;
      return opt;
    });
    if (!options.length) {
      const none = make("option", "no .json/.jsonl benchmark under DATA_DIR/datasets");
      none.value = ""; none.disabled = true;
      options.push(none);
    }
    select.replaceChildren(...options);
    if (list.some((d) => d.name === keep)) select.value = keep;
    else { const first = list.find((d) => d.kind === "file"); if (first) select.value = first.name; }
    byId("abl-start").disabled = !list.length;
  }

  function perCondition(job) {
    const cell = make("td", null, "counts");
    const per = (job.summary && job.summary.per_condition) || null;
    for (const c of job.conditions) {
      const n = per && per[c];
      const line = n ? c + ": " + (n.ran + n.skipped - n.failed) + " done · " + n.failed + " failed" + (n.skipped ? " (" + n.skipped + " resumed)" : "")
                     : c + (FINISHED.includes(job.status) ? ": no counts (" + job.status + ")" : ": running…");
      cell.append(make("div", line, "cond cond-" + c));
    }
    return cell;
  }

  function row(job) {
    const tr = make("tr");
    tr.dataset.job = job.id;
    const status = make("td", job.status + (job.error ? " — " + job.error : ""), "status status-" + job.status);
    const prog = make("td");
    const bar = make("progress");
    bar.max = job.total || 1; bar.value = job.done;
    prog.append(bar, make("span", " " + job.done + "/" + job.total, "done"));
    const links = make("td");
    if (FINISHED.includes(job.status)) {
      for (const c of job.conditions) links.append(download(job.id, "predictions", c, c));
      const traces = make("details");
      traces.append(make("summary", "traces"));
      for (const c of job.conditions) traces.append(download(job.id, "traces", c, c + ".jsonl"));
      links.append(traces);
    }
    const actions = make("td");
    if (["queued", "running"].includes(job.status)) {
      const cancel = make("button", "cancel");
      cancel.addEventListener("click", async () => {
        const c = await fetch("/v1/ablations/" + encodeURIComponent(job.id) + "/cancel", { method: "POST", headers: headers(false) });
        if (!c.ok) showError(await c.json().catch(() => ({}))); else refreshJobs();
      });
      actions.append(cancel);
    }
    tr.append(make("td", job.id), make("td", job.dataset), status, prog, perCondition(job), links, actions);
    return tr;
  }

  async function refreshJobs() {
    const r = await fetch("/v1/ablations");
    if (!r.ok) return;
    const jobs = await r.json();
    byId("abl-table").tBodies[0].replaceChildren(...jobs.map(row));
    const busy = jobs.some((j) => !FINISHED.includes(j.status));
    schedule(busy ? 1000 : 5000);
  }
  function schedule(ms) {
    clearTimeout(timer);
    timer = setTimeout(() => { if (!byId("panel-ablations").hidden) refreshJobs(); else schedule(ms); }, ms);
  }

  byId("tab-ablations").addEventListener("click", () => { loadDatasets(); refreshJobs(); });
  byId("abl-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    byId("abl-error").hidden = true;
    const conditions = [...byId("abl-conditions").querySelectorAll("input:checked")].map((i) => i.value);
    if (!conditions.length) { showError({ error: { code: "no_conditions", message: "choose at least one condition" } }); return; }
    const body = { dataset: byId("abl-dataset").value, conditions, concurrency: Number(byId("abl-concurrency").value) || 4 };
    if (byId("abl-limit").value) body.limit = Number(byId("abl-limit").value);
    if (byId("abl-allow-no-evidence").checked) body.allow_no_evidence = true;
    byId("abl-start").disabled = true;
    try {
      const r = await fetch("/v1/ablations", { method: "POST", body: JSON.stringify(body), headers: headers(true) });
      if (!r.ok) showError(await r.json().catch(() => ({ error: { code: "http_" + r.status, message: r.statusText } })));
      await refreshJobs();
    } catch (err) {
      showError(err);
    } finally {
      byId("abl-start").disabled = !byId("abl-dataset").value;
    }
  });
})();
