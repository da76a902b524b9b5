"use strict";
// CultureKAR web page: explain (SSE over fetch), knowledge-base search, crawl jobs.
// Everything from the server is inserted with textContent; links only when http(s).
const $ = (id) => document.getElementById(id);
let imageFile = null;

function keyHeaders() {
  const key = $("api-key").value.trim();
  if (key) localStorage.setItem("kar-api-key", key);
  return key ? { Authorization: "Bearer " + key } : {};
}
$("api-key").value = localStorage.getItem("kar-api-key") || "";

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}
function link(url, text) {
  if (!/^https?:\/\//i.test(url || "")) return el("span", text || url || "");
  const a = el("a", text || url);
  a.href = url; a.target = "_blank"; a.rel = "noopener noreferrer";
  return a;
}
function showError(box, err) {
  const e = (err && err.error) || { code: "error", message: String(err) };
  box.textContent = e.code + ": " + e.message;
  box.hidden = false;
}

let busyTimer = null;
function showBusy(box, seconds) {  // the server's queue is full (503 + Retry-After): count down
  clearInterval(busyTimer);
  let left = Math.ceil(seconds);
  const render = () => { box.textContent = left > 0 ? `busy, retry in ${left} s` : "busy: retry now"; };
  render(); box.hidden = false;
  busyTimer = setInterval(() => { left -= 1; render(); if (left <= 0) clearInterval(busyTimer); }, 1000);
}

// -- tabs -------------------------------------------------------------------------------
document.querySelectorAll(".tab").forEach((tab) => tab.addEventListener("click", () => {
  document.querySelectorAll(".tab").forEach((t) => t.classList.toggle("active", t === tab));
  document.querySelectorAll(".panel").forEach((p) => { p.hidden = p.id !== "panel-" + tab.dataset.tab; });
  if (tab.dataset.tab === "kb") loadStats();
  if (tab.dataset.tab === "crawl") refreshJobs();
}));

// -- image input: drop, paste, file -------------------------------------------------------
function setImage(file) {  // an image, a clip or a sound: the server tells them apart by their bytes
  if (!file) return;
  imageFile = file;
  const url = URL.createObjectURL(file);
  const kind = file.type.startsWith("video/") ? "player" : file.type.startsWith("audio/") ? "audio-player" : "preview";
  for (const id of ["preview", "player", "audio-player"]) {
    $(id).hidden = id !== kind;
    if (id === kind) $(id).src = url; else $(id).removeAttribute("src");
  }
  $("run").disabled = false;
}
function showMedia(media) {  // a clip's sampled frames (thumbnails sent with the reply) and what was done with its audio
  const box = $("media-box"), strip = $("frames");
  strip.replaceChildren();
  box.hidden = !media;
  if (!media) return;
  let said = `${media.kind} (${media.format}), ${Number(media.duration_s || 0).toFixed(1)} s; audio: ${media.audio_mode}`;
  if (media.transcript) said += ` — transcript: ${media.transcript}`;
  $("media-summary").textContent = said;
  for (const f of media.thumbnails || []) {
    const fig = el("figure", "", "frame");
    const img = document.createElement("img");
    img.src = f.src; img.alt = `frame at ${f.t} s`;
    fig.append(img, el("figcaption", `${Number(f.t).toFixed(1)} s`));
    strip.append(fig);
  }
}
const drop = $("drop");
drop.addEventListener("dragover", (ev) => { ev.preventDefault(); drop.classList.add("over"); });
drop.addEventListener("dragleave", () => drop.classList.remove("over"));
drop.addEventListener("drop", (ev) => { ev.preventDefault(); drop.classList.remove("over"); setImage(ev.dataTransfer.files[0]); });
document.addEventListener("paste", (ev) => {
  for (const item of ev.clipboardData.items) if (item.kind === "file") setImage(item.getAsFile());
});
$("file").addEventListener("change", (ev) => setImage(ev.target.files[0]));

// -- explain ----------------------------------------------------------------------------
function resetResult() {
  for (const id of ["stages", "entities", "queries", "evidence"]) $(id).replaceChildren();
  for (const id of ["explanation", "ocr", "timings"]) $(id).textContent = "";
  $("template-match").hidden = true;
  showMedia(null);
  $("error").hidden = true;
}
function showTemplateMatch(hits) {
  // the image route's best match: the matched template's thumbnail beside the uploaded image
  const fig = $("template-match");
  const m = (hits || []).find((h) => h.image && h.image.sha256 && h.route_scores && h.route_scores.image !== undefined);
  fig.hidden = !m;
  if (!m) return;
  $("template-img").src = "/v1/images/" + m.image.sha256;
  $("template-caption").textContent = m.name + " · image distance " + m.image_distance + "/128";
}
// the winning route first, then every route's score ("caption 1.00 · ocr 0.86 · lexical 0.41")
function routeSummary(h) {
  const scores = h.route_scores || {};
  const others = Object.keys(scores).filter((r) => r !== h.route).sort((a, b) => scores[b] - scores[a]);
  return [h.route, ...others].map((r) => (r in scores ? r + " " + Number(scores[r]).toFixed(2) : r)).join(" · ");
}
function embedderLabel(e) {
  if (!e) return "";
  if (typeof e === "string") return e;
  return e.name + (e.dim ? " (" + e.dim + "-d" + (e.sparse ? ", sparse" : "") + ")" : "");
}
function renderEntities(list, hits, tau) {
  if (list.id === "entities") showTemplateMatch(hits);
  list.replaceChildren();
  if (!hits || !hits.length) { list.append(el("li", "no entity passed τ" + (tau ? " (" + tau.toFixed(2) + ")" : ""), "muted")); return; }
  for (const h of hits) {
    const li = el("li", null, "entity");
    li.append(el("strong", h.name, "name"));
    if (h.score !== null && h.score !== undefined) li.append(el("span", Number(h.score).toFixed(3), "score"));
    if (h.source_work) li.append(el("span", " — " + h.source_work));
    if (h.route) li.append(el("span", " [" + routeSummary(h) + (h.image_distance !== null && h.image_distance !== undefined ? " · distance " + h.image_distance : "") + "]", "muted route"));
    for (const s of h.sources || []) { li.append(" "); li.append(link(s.url, s.site || s.url)); }
    list.append(li);
  }
}
// "ocr 704 ms · ground 2.62 s · total 3.40 s", as the CLI prints it (stages that did not run left out)
function seconds(v) {
  if (v === null || v === undefined) return "-";
  if (v < 1) return Math.round(v * 1000) + " ms";
  if (v < 60) return v.toFixed(2) + " s";
  const m = Math.floor(v / 60); return m + " min " + String(Math.round(v - 60 * m)).padStart(2, "0") + " s";
}
function timingsLine(t) {
  const parts = Object.keys(t).filter((k) => k !== "total" && t[k]).map((k) => k + " " + seconds(t[k]));
  if ("total" in t) parts.push("total " + seconds(t.total));
  return parts.join(" · ");
}
// each evidence piece with why it is there; when there is none, why not
function renderEvidence(ev, searches, notes) {
  const box = $("evidence"); box.replaceChildren();
  const pieces = (ev && ev.pieces) || [];
  for (const p of pieces) {
    const card = el("div", null, "card evidence-piece");
    card.append(link(p.url, p.title || p.url));
    const why = [p.reason + (p.entity ? ": " + p.entity : "")];
    if (p.backend) why.push(p.backend);
    if (p.query) why.push("query \u201c" + p.query + "\u201d");
    if (p.rank) why.push("rank " + p.rank);
    if (p.score !== null && p.score !== undefined) why.push("score " + Number(p.score).toFixed(3));
    card.append(el("div", why.join(" · "), "muted why"));
    card.append(el("div", p.content || "", "snippet"));
    box.append(card);
  }
  const dropped = (ev && ev.dropped) || {};
  const counts = Object.keys(dropped).sort().map((r) => dropped[r] + " " + r);
  if (counts.length) box.append(el("div", "left out: " + counts.join(", "), "muted dropped"));
  if (!pieces.length) {
    const note = (notes || []).find((n) => n.startsWith("no web evidence"));
    const reason = note || (ev && ev.none_reason ? "no evidence: " + ev.none_reason : null);
    if (reason) box.append(el("div", reason, "muted none-reason"));
    else if (!ev && !(searches || []).length) box.append(el("div", "no evidence: no search was run", "muted none-reason"));
  }
}
const handlers = {
  extraction(d) {
    $("ocr").textContent = (d.ocr && d.ocr.text) || (d.extraction && d.extraction.ocr_text) || "(no text found)";
  },
  entities(d) { const g = d.grounding || {}; renderEntities($("entities"), g.hits, g.tau); },
  queries(d) { $("queries").replaceChildren(...(d.queries || []).map((q) => el("li", q.text + (q.origin ? "  (" + q.origin + ")" : "")))); },
  evidence(d) { renderEvidence(d.evidence, d.searches, []); },
  explanation(d) { if (d.response) $("explanation").textContent = d.response; },
  final(d) {
    const t = d.trace || {};
    showMedia(d.media);
    $("explanation").textContent = d.response || d.message || (d.error ? "failed: " + d.error.message : "");
    if (t.grounding) renderEntities($("entities"), t.grounding.hits, t.grounding.tau);
    const uncal = (d.notes || []).find((n) => n.startsWith("grounding is not calibrated"));
    if (uncal) $("entities").prepend(el("li", "warning: " + uncal, "muted warning"));
    if (t.evidence !== undefined || (d.notes || []).some((n) => n.startsWith("no web evidence"))) renderEvidence(t.evidence, t.searches, d.notes || []);
    $("timings").textContent = timingsLine(t.timings || {}) + " · tokens " + ((t.usage || {}).total_tokens || 0);
  },
  error(d) { showError($("error"), d); },
};

async function runExplain() {
  resetResult();
  $("run").disabled = true;
  const form = new FormData();
  const isImage = imageFile.type.startsWith("image/") && !/gif|webp/.test(imageFile.type);
  form.append(isImage ? "image" : "media", imageFile, imageFile.name || "pasted.png");
  form.append("condition", $("condition").value);
  if ($("language").value) form.append("language", $("language").value);
  if ($("post-text").value) form.append("post_text", $("post-text").value);
  if ($("context-note").value) form.append("context_note", $("context-note").value);
  try {
    const resp = await fetch("/v1/explain?stream=true", { method: "POST", body: form, headers: keyHeaders() });
    if (!resp.ok) {
      const retry = Number(resp.headers.get("Retry-After"));
      if (resp.status === 503 && retry > 0) { showBusy($("error"), retry); return; }
      showError($("error"), await resp.json().catch(() => ({}))); return;
    }
    const reader = resp.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true }).replace(/\r\n/g, "\n");
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, cut); buffer = buffer.slice(cut + 2);
        let event = "message"; const data = [];
        for (const line of block.split("\n")) {
          if (line.startsWith("event:")) event = line.slice(6).trim();
          else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
        }
        if (!data.length || !handlers[event]) continue;
        $("stages").append(el("li", event, "stage stage-" + event));
        handlers[event](JSON.parse(data.join("\n")));
      }
    }
  } catch (err) {
    showError($("error"), err);
  } finally {
    $("run").disabled = !imageFile;
  }
}
$("run").addEventListener("click", runExplain);

// -- knowledge base -------------------------------------------------------------------------
async function loadStats() {
  const r = await fetch("/v1/kb/stats");
  if (r.ok) { const s = await r.json(); $("kb-stats").textContent = (s.entities ?? s.count ?? "?") + " entities · " + embedderLabel(s.embedder); }
}
$("kb-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const q = new URLSearchParams({ q: $("kb-q").value, top_k: "10" });
  if ($("kb-lang").value) q.set("lang", $("kb-lang").value);
  const r = await fetch("/v1/entities?" + q);
  const data = await r.json();
  if (!r.ok) { $("kb-results").replaceChildren(el("li", data.error.message, "error")); return; }
  renderEntities($("kb-results"), data.hits, data.tau);
  for (const n of data.notes || []) $("kb-results").prepend(el("li", "warning: " + n, "muted warning"));
});

// -- crawl jobs ------------------------------------------------------------------------------
async function refreshJobs() {
  const r = await fetch("/v1/crawl-jobs");
  if (!r.ok) return;
  const rows = (await r.json()).map((j) => {
    const tr = el("tr");
    const cancel = el("button", "cancel");
    cancel.disabled = !["queued", "running"].includes(j.status);
    cancel.addEventListener("click", async () => {
      const c = await fetch("/v1/crawl-jobs/" + encodeURIComponent(j.id) + "/cancel", { method: "POST", headers: keyHeaders() });
      if (!c.ok) showError($("crawl-error"), await c.json()); else refreshJobs();
    });
    const cell = el("td"); cell.append(cancel);
    tr.append(el("td", j.id), el("td", j.spider), el("td", j.status + (j.error ? " — " + j.error : "")), el("td", JSON.stringify(j.counters)), cell);
    return tr;
  });
  $("crawl-table").tBodies[0].replaceChildren(...rows);
}
$("crawl-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  $("crawl-error").hidden = true;
  const body = { spider: $("crawl-spider").value, limit: Number($("crawl-limit").value) || null,
                 start_urls: $("crawl-urls").value.split(/\s+/).filter(Boolean) };
  const r = await fetch("/v1/crawl-jobs", { method: "POST", body: JSON.stringify(body),
                        headers: { "Content-Type": "application/json", ...keyHeaders() } });
  if (!r.ok) showError($("crawl-error"), await r.json()); else refreshJobs();
});
setInterval(() => { if (!$("panel-crawl").hidden) refreshJobs(); }, 2000);
