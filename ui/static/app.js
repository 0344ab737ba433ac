// The pictrieve page. Every text from the server (captions, questions, LLM output) is set with
// textContent, never innerHTML, so nothing it contains can run as markup.
"use strict";
const $ = (id) => document.getElementById(id);
let busyCount = 0;

function showError(message) { const box = $("error"); box.textContent = message; box.hidden = !message; }
function busy(on, label) {
  busyCount += on ? 1 : -1;
  $("busy").hidden = busyCount <= 0;
  if (on && label) $("busy").textContent = label;
}

async function api(path, options = {}, label = "working…") {
  showError("");
  busy(true, label);
  // Slow requests (a language model thinking) show how long they have been running.
  const started = Date.now();
  const ticker = setInterval(() => { $("busy").textContent = `${label} ${Math.round((Date.now() - started) / 1000)} s`; }, 1000);
  try {
    const response = await fetch(path, options);
    let body;
    try { body = await response.json(); } catch (e) { body = { error: `the server answered ${response.status}` }; }
    if (!response.ok || body.error) throw new Error(body.error || `the server answered ${response.status}`);
    return body;
  } catch (err) {
    showError(err.message || String(err));
    throw err;
  } finally { clearInterval(ticker); busy(false); }
}
const postJSON = (path, data, label) => api(path, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(data) }, label);

function card(hit, onClick) {
  const div = document.createElement("div");
  div.className = "card";
  div.dataset.id = hit.id;
  const img = document.createElement("img");
  img.src = `/api/image/${encodeURIComponent(hit.id)}`;
  img.alt = hit.captions && hit.captions[0] ? hit.captions[0] : hit.id;
  img.loading = "lazy";
  const cap = document.createElement("div");
  cap.className = "cap";
  cap.textContent = (hit.captions && hit.captions[0]) || (hit.path || "").split("/").pop() || hit.id;
  const score = document.createElement("div");
  score.className = "score";
  score.textContent = `#${hit.rank} · score ${Number(hit.score).toFixed(3)}` + (hit.keyword_match ? " · words" : "");
  const copies = (hit.copies || []).length;
  if (copies) score.textContent += ` · +${copies} near-identical ${copies === 1 ? "copy" : "copies"}`;
  div.append(img, cap, score);
  const meta = hit.metadata || {};
  // The photo's own clock time; a photo without an EXIF time shows its file's, marked as such.
  const taken = (meta.taken_at || "").slice(0, 16).replace("T", " ");
  const when = taken && meta.taken_at_source === "file" ? `${taken} (file date)` : taken;
  const about = [when, meta.place || "", meta.camera || ""].filter(Boolean);
  if (about.length) {
    const line = document.createElement("div");
    line.className = "about";
    line.textContent = about.join(" · ");
    div.append(line);
  }
  div.addEventListener("click", () => onClick(hit));
  return div;
}
// A search's answer: its notice ("no photo matches well; the closest are:") above the photos, else none.
// An empty answer's notice says why (which filter left nothing, and what the gallery has).
function renderSearch(body) {
  $("search-notice").textContent = body.notice || "";
  $("search-notice").hidden = !body.notice;
  renderGrid("search-grid", body.hits, openViewer, body.notice ? "" : "No images found.");
}
function renderGrid(gridId, hits, onClick = openViewer, emptyText = "No images found.") {
  const grid = $(gridId);
  grid.replaceChildren(...hits.map((h) => card(h, onClick)));
  if (!hits.length && emptyText) { const p = document.createElement("p"); p.textContent = emptyText; grid.append(p); }
}

// --- viewer ("larger view" + "more like this") ---
let viewed = null;
function openViewer(hit) {
  viewed = hit;
  $("viewer-img").src = `/api/image/${encodeURIComponent(hit.id)}`;
  $("viewer-caption").textContent = (hit.captions || []).join(" · ");
  const text = (hit.metadata || {}).photo_text || "";  // read in the photo at index time (--ocr)
  $("viewer-text").textContent = text ? `Text in the photo: ${text.split("\n").join(" / ")}` : "";
  $("viewer-text").hidden = !text;
  $("viewer-meta").textContent = hit.score === undefined ? hit.path : `${hit.path} — score ${Number(hit.score).toFixed(3)}`;
  $("viewer").showModal();
}
$("viewer-close").onclick = () => $("viewer").close();
$("viewer-like").onclick = async () => {
  $("viewer").close();
  selectTab("search");
  renderSearch(await postJSON("/api/search", { like: viewed.id, ...searchOptions() }, "finding similar photos…"));
};

// --- tabs ---
function selectTab(name) {
  document.querySelectorAll("#tabs button").forEach((b) => b.classList.toggle("active", b.dataset.tab === name));
  document.querySelectorAll(".tab").forEach((s) => { s.hidden = s.id !== `tab-${name}`; });
  location.hash = name;
  if (name === "duplicates") loadDuplicates().catch(() => {});  // the error is shown by api()
}
document.querySelectorAll("#tabs button").forEach((b) => b.addEventListener("click", () => selectTab(b.dataset.tab)));

// --- duplicates: groups of near-identical photos, read-only ---
async function loadDuplicates() {
  const body = await api("/api/duplicates", {}, "finding near-identical photos…");
  const shown = body.groups.length < body.total_groups ? ` (the first ${body.groups.length} shown)` : "";
  let summary = `${body.total_groups} groups of near-identical photos (${body.copies} copies) among ${body.compared} photos${shown}.`;
  if (body.unhashed) summary += ` ${body.unhashed} photos were indexed before perceptual hashes were stored and were not compared: run ${body.index_command} again to add them.`;
  $("duplicates-summary").textContent = summary;
  $("duplicates-summary").hidden = false;
  $("duplicates-groups").replaceChildren(...body.groups.map((group, n) => {
    const box = document.createElement("div");
    box.className = "dup-group";
    const title = document.createElement("h3");
    title.textContent = `Group ${n + 1}: ${group.ids.length} photos (similarity at least ${Number(group.min_cosine).toFixed(2)})`;
    const grid = document.createElement("div");
    grid.className = "grid";
    grid.append(...group.ids.map((id, k) => {
      const hit = { id, path: group.paths[k], rank: k + 1, score: undefined, captions: [], metadata: {} };
      const div = document.createElement("div");
      div.className = "card";
      div.dataset.id = id;
      div.title = hit.path;
      const img = document.createElement("img");
      img.src = `/api/image/${encodeURIComponent(id)}`;
      img.alt = hit.path.split("/").pop();
      img.loading = "lazy";
      const cap = document.createElement("div");
      cap.className = "cap";
      cap.textContent = hit.path.split("/").pop() || id;
      const role = document.createElement("div");
      role.className = "score";
      role.textContent = k === 0 ? "the one to keep (most pixels)" : "near-identical copy";
      div.append(img, cap, role);
      div.addEventListener("click", () => openViewer(hit));
      return div;
    }));
    box.append(title, grid);
    return box;
  }));
}

// --- search ---
// The filters (after, before, near, radius_km, place, camera, folder) and the hybrid switch; filters alone browse.
const FILTERS = { after: "f-after", before: "f-before", near: "f-near", radius_km: "f-radius", place: "f-place",
  camera: "f-camera", folder: "f-folder" };
function searchOptions() {
  const options = { hybrid: $("hybrid").checked, collapse_duplicates: $("collapse").checked };
  for (const [name, id] of Object.entries(FILTERS)) { const v = $(id).value.trim(); if (v) options[name] = v; }
  if ($("f-exif").checked) options.exif_dates_only = true;  // with the dates: EXIF capture times only
  return options;
}
$("search-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  renderSearch(await postJSON("/api/search", { query: $("query").value, ...searchOptions() }, "searching…"));
});
async function searchFile(file) {
  const form = new FormData();
  form.append("image", file);
  for (const [name, value] of Object.entries(searchOptions())) form.append(name, String(value));
  renderSearch(await api("/api/search", { method: "POST", body: form }, "searching by picture…"));
}
const drop = $("drop");
$("upload").addEventListener("change", () => { if ($("upload").files[0]) searchFile($("upload").files[0]).catch(() => {}); });
drop.addEventListener("dragover", (ev) => { ev.preventDefault(); drop.classList.add("over"); });
drop.addEventListener("dragleave", () => drop.classList.remove("over"));
drop.addEventListener("drop", (ev) => {
  ev.preventDefault(); drop.classList.remove("over");
  if (ev.dataTransfer.files[0]) searchFile(ev.dataTransfer.files[0]).catch(() => {});
});

// --- chat (PlugIR); the thread id is kept in localStorage so a reload resumes the session ---
function renderChat(view) {
  localStorage.setItem("pictrieve-chat", view.thread);
  $("chat-session").hidden = false;
  $("chat-dialogue").replaceChildren(...view.dialogue.map((t) => {
    const li = document.createElement("li");
    li.textContent = `${t.question} — ${t.answer}`;
    return li;
  }));
  const options = view.options && view.options.length ? ` (${view.options.join(" / ")})` : "";
  const waiting = !view.done && !view.question;  // a round another page of this chat is still working on
  $("chat-question").textContent = view.done ? "" : waiting ? "This chat is still working on its next question; reload in a moment."
    : `Round ${view.round + 1}: ${view.question}${options}`;
  $("chat-answer").hidden = view.done || waiting;
  $("chat-outcome").textContent = view.done
    ? (view.found ? `Found: ${(view.found.captions || [])[0] || view.found.path}` : "Chat ended.") : "";
  renderGrid("chat-grid", view.shown || [], async (hit) => {
    if (view.done || waiting) return openViewer(hit);
    await chatStep(await postJSON("/api/chat/reply", { thread: view.thread, found: hit.id }, "sending…"), "noting your pick…");
  });
}
// Each chat round is a job on the server (see runJob below); its result is the chat's new view.
async function chatStep(started, label) {
  const view = await runJob(started, "chat-steps", label, () => {});
  if (view.result) renderChat(view.result);
}
$("chat-start").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const started = await postJSON("/api/chat/start", { description: $("chat-description").value }, "starting…");
  await chatStep(started, "thinking of a question… (a language model can take a while)");
});
$("chat-answer").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const thread = localStorage.getItem("pictrieve-chat");
  const started = await postJSON("/api/chat/reply", { thread, answer: $("chat-reply").value }, "sending…");
  $("chat-reply").value = "";
  await chatStep(started, "searching and asking the next question…");
});
$("chat-new").onclick = () => { localStorage.removeItem("pictrieve-chat"); $("chat-session").hidden = true; };

// --- steer (QC2) ---
$("steer-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const body = await postJSON("/api/steer", { query: $("steer-query").value, relevance: $("steer-relevance").value, quality: $("steer-quality").value }, "completing the query…");
  $("steer-completions").replaceChildren(...body.completions.map((c) => { const li = document.createElement("li"); li.textContent = c; return li; }));
  renderGrid("steer-grid", body.hits);
});

// --- long work (Chat, Ask, Visualize): a job the server runs in the background, polled for its steps.
// When the page goes away its running jobs are cancelled (they stop between steps), so nobody's server
// time goes to a page that is gone; a job nobody polls stops by itself too.
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const runningJobs = new Set();
window.addEventListener("pagehide", () => {
  runningJobs.forEach((id) => navigator.sendBeacon(`/api/jobs/${encodeURIComponent(id)}/cancel`));
});
function renderSteps(listId, view) {
  $(listId).replaceChildren(...view.steps.map((text, i) => {
    const li = document.createElement("li");
    li.textContent = text;
    if (!view.done && i === view.steps.length - 1) li.className = "current";
    return li;
  }));
}
async function runJob(started, listId, label, onUpdate) {
  let view = started;
  busy(true, label);
  runningJobs.add(started.id);
  try {
    for (;;) {
      renderSteps(listId, view);
      onUpdate(view);
      if (view.done) break;
      $("busy").textContent = `${label} ${Math.round(view.elapsed)} s`;
      await sleep(600);
      const response = await fetch(`/api/jobs/${encodeURIComponent(view.id)}`);
      const body = await response.json().catch(() => ({ error: `the server answered ${response.status}` }));
      if (!response.ok) throw new Error(body.error || `the server answered ${response.status}`);
      view = body;
    }
    if (view.error) showError(view.error);
    return view;
  } catch (err) { showError(err.message || String(err)); throw err; } finally { runningJobs.delete(started.id); busy(false); }
}

// --- visualize (VisRet, NEEDLE; other methods of the registry are listed for later) ---
function renderGuides(view) {
  const guides = view.images.filter((im) => im.name.startsWith("guide"));
  $("visualize-guides-title").hidden = !guides.length;
  $("visualize-guides").replaceChildren(...guides.map((im) => {
    const div = document.createElement("div");
    div.className = im.generated ? "card guide" : "card guide exemplar";
    const img = document.createElement("img");
    img.src = im.url;
    img.alt = im.label;
    const cap = document.createElement("div");
    cap.className = "cap";
    cap.textContent = im.label;
    div.append(img, cap);
    return div;
  }));
}
$("visualize-method").addEventListener("change", () => {
  const option = $("visualize-method").selectedOptions[0];
  $("visualize-note").textContent = option ? option.dataset.note || "" : "";
  $("needle-help").hidden = $("visualize-method").value !== "needle";
});

// NEEDLE: a session that pauses for the person (guides to approve or reject, results to mark), then
// shows the embedders' trust weights for the topic. Guides are fetched by session and guide id.
let needleSession = null;
const GUIDE_STATUS = { new: "to review", approved: "approved", rejected: "rejected", discarded: "rejected, replaced",
  outlier: "dropped as an outlier", used: "searched with" };
function checkToggle(className, value, text) {
  const label = document.createElement("label");
  label.className = "toggle";
  const box = document.createElement("input");
  box.type = "checkbox";
  box.className = className;
  box.value = value;
  label.addEventListener("click", (ev) => ev.stopPropagation());  // ticking is not opening the viewer
  label.append(box, ` ${text}`);
  return label;
}
function renderNeedle(s) {
  needleSession = s.session;
  $("needle-weights").hidden = false;
  $("needle-weights").textContent = `Trust weights for topic "${s.topic}": ` +
    Object.entries(s.weights).map(([name, w]) => `${name} ${Number(w).toFixed(3)}`).join(" · ") +
    (Object.keys(s.weights).length === 1 ? " (one embedder: nothing to weigh)" : "");
  $("needle-question").hidden = s.stage === "done";
  $("needle-question").textContent = s.stage === "guides"
    ? "Do these guide images show what you are looking for? Tick the ones to reject; they will be replaced."
    : "Tick the results that are NOT what you are looking for.";
  $("visualize-guides-title").hidden = !s.guides.length;
  $("visualize-guides").replaceChildren(...s.guides.map((g) => {
    const div = document.createElement("div");
    div.className = `card guide status-${g.status}` + (g.generated ? "" : " exemplar");
    div.dataset.id = g.id;
    const img = document.createElement("img");
    img.src = g.url;
    const cap = document.createElement("div");
    cap.className = "cap";
    cap.textContent = `${g.id}: ` + (g.generated ? `generated by ${g.visualizer}` : "exemplar: a found photo, not generated") +
      ` · ${GUIDE_STATUS[g.status] || g.status}` + (g.replaces ? ` (replaces ${g.replaces})` : "");
    img.alt = cap.textContent;
    div.append(img, cap);
    if (g.reviewing) div.append(checkToggle("needle-reject", g.id, "reject"));
    return div;
  }));
  $("needle-guides-send").hidden = s.stage !== "guides";
  $("needle-results-send").hidden = s.stage !== "results";
  $("visualize-results-title").hidden = s.stage === "guides";
  if (s.stage === "guides") { $("visualize-grid").replaceChildren(); return; }
  renderGrid("visualize-grid", s.hits);
  if (s.stage === "results") {
    $("visualize-grid").querySelectorAll(".card").forEach((c) => c.append(checkToggle("needle-irrelevant", c.dataset.id, "not what I want")));
  }
}
async function needleStep(started) {
  await runJob(started, "visualize-steps", "NEEDLE is working…", (view) => {
    if (view.done && view.result) renderNeedle(view.result);
  });
}
const ticked = (cls) => [...document.querySelectorAll(`#tab-visualize input.${cls}:checked`)].map((b) => b.value);
$("needle-guides-send").addEventListener("click", async () => {
  $("needle-guides-send").hidden = true;
  await needleStep(await postJSON(`/api/needle/${encodeURIComponent(needleSession)}/guides`, { rejected: ticked("needle-reject") }, "sending…"));
});
$("needle-results-send").addEventListener("click", async () => {
  $("needle-results-send").hidden = true;
  await needleStep(await postJSON(`/api/needle/${encodeURIComponent(needleSession)}/results`, { irrelevant: ticked("needle-irrelevant") }, "sending…"));
});

$("visualize-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  $("visualize-grid").replaceChildren();
  $("visualize-results-title").hidden = true;
  ["needle-guides-send", "needle-results-send", "needle-question", "needle-weights"].forEach((id) => { $(id).hidden = true; });
  if ($("visualize-method").value === "needle") {
    $("visualize-guides").replaceChildren();
    await needleStep(await postJSON("/api/visualize", { query: $("visualize-query").value, method: "needle", guides: $("visualize-guides-count").value }, "starting…"));
    return;
  }
  const started = await postJSON("/api/visualize", { query: $("visualize-query").value, method: $("visualize-method").value, guides: $("visualize-guides-count").value }, "starting…");
  await runJob(started, "visualize-steps", "making guide images and searching…", (view) => {
    renderGuides(view);
    if (view.done && view.result) {
      $("visualize-results-title").hidden = false;
      renderGrid("visualize-grid", view.result.hits);
    }
  });
});

// --- ask (Vision Search Assistant) ---
let askPhotoId = null;
function choosePhoto(hit) {
  askPhotoId = hit ? hit.id : null;
  $("ask-chosen").hidden = !hit;
  $("ask-chosen-text").textContent = hit ? `gallery photo: ${(hit.captions || [])[0] || (hit.path || "").split("/").pop()}` : "";
  $("ask-drop").hidden = !!hit;
}
$("ask-clear").onclick = () => choosePhoto(null);
const askDrop = $("ask-drop");
askDrop.addEventListener("dragover", (ev) => { ev.preventDefault(); askDrop.classList.add("over"); });
askDrop.addEventListener("dragleave", () => askDrop.classList.remove("over"));
askDrop.addEventListener("drop", (ev) => {
  ev.preventDefault(); askDrop.classList.remove("over");
  if (ev.dataTransfer.files[0]) { $("ask-photo").files = ev.dataTransfer.files; choosePhoto(null); }
});
$("ask-photo").addEventListener("change", () => choosePhoto(null));
$("viewer-ask").onclick = () => { $("viewer").close(); choosePhoto(viewed); selectTab("ask"); $("ask-question").focus(); };

function citedText(container, text, numbers) {
  // The answer as text, with [n] turned into links to source n (only numbers that exist).
  const parts = [];
  let last = 0;
  for (const m of text.matchAll(/\[(\d+)\]/g)) {
    parts.push(document.createTextNode(text.slice(last, m.index)));
    if (numbers.has(Number(m[1]))) {
      const a = document.createElement("a");
      a.href = `#ask-source-${m[1]}`;
      a.className = "cite";
      a.textContent = m[0];
      a.addEventListener("click", (e) => { e.preventDefault(); $(`ask-source-${m[1]}`).scrollIntoView({ block: "nearest" }); $(`ask-source-${m[1]}`).classList.add("flash"); });
      parts.push(a);
    } else parts.push(document.createTextNode(m[0]));
    last = m.index + m[0].length;
  }
  parts.push(document.createTextNode(text.slice(last)));
  container.replaceChildren(...parts);
}
const webLink = (href) => { try { return ["http:", "https:"].includes(new URL(href).protocol); } catch (e) { return false; } };
function renderAsk(view) {
  const photo = view.images.find((im) => im.name === "photo");
  if (photo && $("ask-img").dataset.src !== photo.url) { $("ask-img").src = photo.url; $("ask-img").dataset.src = photo.url; }
  $("ask-result").hidden = !photo;
  const result = view.result;
  if (!result) { $("ask-boxes").replaceChildren(); $("ask-answer").textContent = ""; $("ask-sources").replaceChildren(); $("ask-regions").replaceChildren(); return; }
  citedText($("ask-answer"), result.answer, new Set(result.sources.map((s) => s.number)));
  $("ask-sources").replaceChildren(...result.sources.map((s) => {
    const li = document.createElement("li");
    li.id = `ask-source-${s.number}`;
    li.value = s.number;
    if (s.href && webLink(s.href)) {
      const a = document.createElement("a");
      a.href = s.href; a.target = "_blank"; a.rel = "noopener noreferrer";
      a.textContent = s.title;
      li.append(a);
    } else {
      const title = document.createElement("span");
      title.textContent = s.title;
      li.append(title);
    }
    const url = document.createElement("span");
    url.className = "url";
    url.textContent = ` ${s.url}`;
    li.append(url);
    if (s.cited === false) { li.classList.add("uncited"); li.append(document.createTextNode(" (read, not cited)")); }
    return li;
  }));
  if (!result.sources.length) { const li = document.createElement("li"); li.textContent = "none (nothing was searched or found)"; $("ask-sources").append(li); }
  $("ask-boxes").replaceChildren(...result.regions.map((r) => {
    const box = document.createElement("div");
    box.className = "region";
    const [x0, y0, x1, y1] = r.box.map((v) => Math.min(1, Math.max(0, Number(v))));
    Object.assign(box.style, { left: `${x0 * 100}%`, top: `${y0 * 100}%`, width: `${(x1 - x0) * 100}%`, height: `${(y1 - y0) * 100}%` });
    const tag = document.createElement("span");
    tag.textContent = `${r.number} ${r.label}`;
    box.append(tag);
    return box;
  }));
  $("ask-regions").replaceChildren(...result.regions.map((r) => {
    const li = document.createElement("li");
    li.textContent = `${r.label} (${r.score.toFixed(2)}): ${r.description}`;
    return li;
  }));
}
$("ask-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const form = new FormData();
  form.append("question", $("ask-question").value);
  if (askPhotoId) form.append("photo", askPhotoId);
  else if ($("ask-photo").files[0]) form.append("image", $("ask-photo").files[0]);
  $("ask-result").hidden = true;
  const started = await api("/api/ask", { method: "POST", body: form }, "starting…");
  await runJob(started, "ask-steps", "looking, searching and answering…", renderAsk);
});

// --- generic tabs: any other registered method (a plugin, say), built from its description ---
// A text box per text input, a box per setting (empty: its default); a run is a job like the others,
// ending with the method's hits and its other plain output values (shown as text, never markup).
function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  Object.assign(node, props);
  node.append(...children);
  return node;
}
function settingControl(name, s) {
  const id = `${name}-set-${s.name}`;
  const choices = s.choices || (/\bbool\b/.test(s.type) ? [true, false] : null);
  let control;
  if (choices) {
    control = el("select", { id });
    control.append(el("option", { value: "", textContent: `default (${JSON.stringify(s.default)})` }),
      ...choices.map((c) => el("option", { value: String(c), textContent: String(c) })));
  } else {
    control = el("input", { id, type: "text", placeholder: JSON.stringify(s.default) });
  }
  control.dataset.setting = s.name;
  return el("label", { title: s.description || "", className: "setting" }, `${s.name} (${s.type}) `, control);
}
function genericTab(m) {
  const name = `m-${m.name}`;
  const button = el("button", { textContent: m.name, title: m.description });
  button.dataset.tab = name;
  button.dataset.method = m.name;
  button.addEventListener("click", () => selectTab(name));
  $("tabs").append(button);
  const texts = [m.text_input, ...m.input.filter((f) => f.type === "str" && f.name !== m.text_input).map((f) => f.name)];
  const inputs = texts.map((field, i) => el("input", {
    id: `${name}-in-${field}`, type: "text", name: field,
    placeholder: String((m.example_input || {})[field] || field) + (i ? " (optional)" : ""),
  }));
  const settings = el("details", { id: `${name}-settings` }, el("summary", { textContent: "Settings" }),
    ...m.settings.map((s) => settingControl(name, s)));
  const form = el("form", { id: `${name}-form` }, ...inputs, el("button", { type: "submit", textContent: "Run" }));
  const steps = el("ol", { id: `${name}-steps`, className: "steps" });
  const question = el("form", { id: `${name}-question`, className: "question", hidden: true });
  const output = el("ul", { id: `${name}-output`, className: "output" });
  const grid = el("div", { id: `${name}-grid`, className: "grid" });
  const needs = m.needs.length ? ` Needs: ${m.needs.map((n) => n.name).join(", ")}.` : "";
  const section = el("section", { id: `tab-${name}`, className: "tab", hidden: true },
    el("p", { className: "help", textContent: `${m.description}${needs}` }), form, settings, steps, question, output, grid);
  document.body.insertBefore(section, $("viewer"));
  // Each step of a session is a job ending with the generic view: the question the method asks (as it declares it),
  // or what it found.
  const show = (view) => {
    if (!view.done || !view.result) return;
    const result = view.result;
    output.replaceChildren(...Object.entries(result.output).map(([key, value]) =>
      el("li", { textContent: `${key}: ${typeof value === "string" ? value : JSON.stringify(value)}` })));
    renderQuestion(question, name, result, async (reply) => {
      const sent = await postJSON(`/api/methods/${encodeURIComponent(m.name)}/reply`, { session: result.session, reply }, "sending…");
      await runJob(sent, steps.id, `${m.name} is working…`, show);
    });
    if (!result.question) renderGrid(grid.id, result.hits);
    else grid.replaceChildren();
  };
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const input = Object.fromEntries(inputs.map((box) => [box.name, box.value]));
    const chosen = Object.fromEntries([...settings.querySelectorAll("[data-setting]")]
      .filter((c) => c.value !== "").map((c) => [c.dataset.setting, c.value]));
    output.replaceChildren();
    grid.replaceChildren();
    question.hidden = true;
    const started = await postJSON(`/api/methods/${encodeURIComponent(m.name)}/run`, { input, settings: chosen }, "starting…");
    await runJob(started, steps.id, `${m.name} is working…`, show);
  });
}
// A method's question, built from what it declares: its text, the items shown with it (photos as cards; a reply
// field that picks ids ticks them), and a control per reply field (a choice, yes/no, a line of text).
function renderQuestion(box, name, result, send) {
  const q = result.question;
  box.hidden = !q;
  if (!q) { box.replaceChildren(); return; }
  const picks = q.reply.filter((f) => f.picks);
  const items = el("div", { className: "grid" }, ...q.shown.map((item) => {
    const shown = item.score !== undefined ? card(item, openViewer)
      : el("div", { className: "card" }, el("div", { className: "cap", textContent: Object.entries(item).map(([k, v]) => `${k}: ${v}`).join(" · ") }));
    shown.dataset.id = item.id;
    picks.forEach((f) => shown.append(checkToggle(`${name}-pick-${f.name}`, item.id, f.description || f.name)));
    return shown;
  }));
  const controls = q.reply.filter((f) => !f.picks).map((f, i) => {
    const id = `${name}-reply-${f.name}`;
    let control;
    let suggestions = "";
    if (f.choices) {
      control = el("select", { id });
      control.append(...f.choices.map((c) => el("option", { value: String(c), textContent: String(c) })));
    } else if (f.type === "bool") {
      control = el("input", { id, type: "checkbox" });
    } else {
      control = el("input", { id, type: "text", maxLength: 2000 });
      if (i === 0 && q.options.length) {
        suggestions = el("datalist", { id: `${id}-options` }, ...q.options.map((o) => el("option", { value: o })));
        control.setAttribute("list", suggestions.id);
      }
    }
    control.dataset.field = f.name;
    control.dataset.type = f.type;
    return el("label", { title: f.description || "" }, `${f.description || f.name} `, control, suggestions);
  });
  box.replaceChildren(el("p", { className: "asked", textContent: q.question }), items, ...controls,
    el("button", { type: "submit", textContent: "Send" }));
  box.onsubmit = async (ev) => {
    ev.preventDefault();
    const reply = {};
    box.querySelectorAll("[data-field]").forEach((c) => {
      if (c.type === "checkbox") reply[c.dataset.field] = c.checked;
      else if (c.value !== "" || !q.reply.find((f) => f.name === c.dataset.field && !f.required)) reply[c.dataset.field] = c.value;
    });
    picks.forEach((f) => { reply[f.name] = [...box.querySelectorAll(`input.${name}-pick-${f.name}:checked`)].map((c) => c.value); });
    await send(reply);
  };
}

// --- status: image count, embedders (the default marked); refreshed so a running index shows progress ---
let firstCount = null;
async function refreshStatus() {
  const st = await (await fetch("/api/status")).json();
  if (firstCount === null) firstCount = st.count;
  const grown = st.count - firstCount;
  $("status").textContent = `${st.count} images · embedders: ${st.embedders.join(", ")}` + (grown > 0 ? ` · +${grown} since this page opened (indexing)` : "");
  $("index-status").textContent = `Gallery: ${st.count} images in ${st.location}`;
  $("gallery-embedders").textContent = `Embedders: ${st.embedders.map((e) => (e === st.default_embedder ? `${e} (default)` : e)).join(", ")}; this page searches with ${st.embedder}.`;
  $("index-command").textContent = st.index_command;
  return st;
}

// --- start: status, the tabs of the registered methods, a chat to resume ---
(async () => {
  busy(true, "loading…");
  let st;
  try { st = await refreshStatus(); } catch (e) { showError("the server did not answer; is `pictrieve ui` still running?"); return; } finally { busy(false); }
  setInterval(() => { if (!document.hidden) refreshStatus().catch(() => {}); }, 15000);
  $("viewer-ask").hidden = !st.methods.includes("vsa");
  $("visualize-method").replaceChildren(...st.visualize.methods.map((m) => {
    const option = document.createElement("option");
    option.value = m.name;
    option.textContent = m.ready ? m.name : `${m.name} (in its own tab)`;
    option.disabled = !m.ready;
    option.title = m.description;
    option.dataset.note = m.note;
    return option;
  }));
  $("visualize-note").textContent = st.visualize.methods.filter((m) => !m.ready).map((m) => `${m.name}: ${m.note}`).join(" ");
  $("visualize-setup").hidden = false;
  $("visualize-setup").textContent = st.visualize.visualizer
    ? `Guide images from ${st.visualize.visualizer}${st.visualize.about ? ` (${st.visualize.about})` : ""}.`
    : "No visualizer is configured: restart with `pictrieve ui --gallery … --visualizer exemplar:DIR` (DIR: a folder of photos with captions.jsonl).";
  $("ask-setup").hidden = false;
  $("ask-setup").textContent = st.ask.search ? `Searches ${st.ask.search}.` : "No search is configured (start with --search local:DIR or --search ddgs); answers come from the photo alone.";
  (st.generic || []).forEach(genericTab);
  document.querySelectorAll("#tabs button[data-method]").forEach((b) => { b.hidden = !st.methods.includes(b.dataset.method); });
  const wanted = location.hash.slice(1);
  if (wanted && document.querySelector(`#tabs button[data-tab="${wanted}"]:not([hidden])`)) selectTab(wanted);
  const thread = localStorage.getItem("pictrieve-chat");
  if (thread && st.methods.includes("plugir")) {
    let view = null;
    try { view = await api(`/api/chat/${encodeURIComponent(thread)}`); } catch (e) { localStorage.removeItem("pictrieve-chat"); showError(""); }
    if (view && view.unfinished && !view.working) {  // its last round stopped when a page went away: run it on
      await chatStep(await postJSON("/api/chat/reply", { thread, continue: true }, "sending…"), "finishing the round…");
    } else if (view) renderChat(view);
  }
})();
window.addEventListener("hashchange", () => {
  const wanted = location.hash.slice(1);
  if (document.querySelector(`#tabs button[data-tab="${wanted}"]:not([hidden])`)) selectTab(wanted);
});
