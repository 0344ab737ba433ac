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
  try {
    const response = await fetch(path, options);
    let body;
    try { body = await response.json(); } catch (e) { body = { error: `the server answered ${response.status}` }; }
    if (!response.ok || body.error) throw new Error(body.error || `the server answered ${response.status}`);
    return body;
  } catch (err) {
    showError(err.message || String(err));
    throw err;
  } finally { busy(false); }
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
  score.textContent = `#${hit.rank} · score ${Number(hit.score).toFixed(3)}`;
  div.append(img, cap, score);
  div.addEventListener("click", () => onClick(hit));
  return div;
}
function renderGrid(gridId, hits, onClick = openViewer) {
  const grid = $(gridId);
  grid.replaceChildren(...hits.map((h) => card(h, onClick)));
  if (!hits.length) { const p = document.createElement("p"); p.textContent = "No images found."; grid.append(p); }
}

// --- viewer ("larger view" + "more like this") ---
let viewed = null;
function openViewer(hit) {
  viewed = hit;
  $("viewer-img").src = `/api/image/${encodeURIComponent(hit.id)}`;
  $("viewer-caption").textContent = (hit.captions || []).join(" · ");
  $("viewer-meta").textContent = `${hit.path} — score ${Number(hit.score).toFixed(3)}`;
  $("viewer").showModal();
}
$("viewer-close").onclick = () => $("viewer").close();
$("viewer-like").onclick = async () => {
  $("viewer").close();
  selectTab("search");
  const body = await postJSON("/api/search", { like: viewed.id }, "finding similar photos…");
  renderGrid("search-grid", body.hits);
};

// --- tabs ---
function selectTab(name) {
  document.querySelectorAll("#tabs button").forEach((b) => b.classList.toggle("active", b.dataset.tab === name));
  document.querySelectorAll(".tab").forEach((s) => { s.hidden = s.id !== `tab-${name}`; });
  location.hash = name;
}
document.querySelectorAll("#tabs button").forEach((b) => b.addEventListener("click", () => selectTab(b.dataset.tab)));

// --- search ---
$("search-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const body = await postJSON("/api/search", { query: $("query").value }, "searching…");
  renderGrid("search-grid", body.hits);
});
async function searchFile(file) {
  const form = new FormData();
  form.append("image", file);
  const body = await api("/api/search", { method: "POST", body: form }, "searching by picture…");
  renderGrid("search-grid", body.hits);
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
  $("chat-question").textContent = view.done ? "" : `Round ${view.round + 1}: ${view.question}`;
  $("chat-answer").hidden = view.done;
  $("chat-outcome").textContent = view.done
    ? (view.found ? `Found: ${(view.found.captions || [])[0] || view.found.path}` : "Chat ended.") : "";
  renderGrid("chat-grid", view.shown || [], async (hit) => {
    if (view.done) return openViewer(hit);
    renderChat(await postJSON("/api/chat/reply", { thread: view.thread, found: hit.id }, "noting your pick…"));
  });
}
$("chat-start").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  renderChat(await postJSON("/api/chat/start", { description: $("chat-description").value }, "thinking of a question… (the language model can take a while)"));
});
$("chat-answer").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const thread = localStorage.getItem("pictrieve-chat");
  const view = await postJSON("/api/chat/reply", { thread, answer: $("chat-reply").value }, "searching and asking the next question…");
  $("chat-reply").value = "";
  renderChat(view);
});
$("chat-new").onclick = () => { localStorage.removeItem("pictrieve-chat"); $("chat-session").hidden = true; };

// --- steer (QC2) ---
$("steer-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const body = await postJSON("/api/steer", { query: $("steer-query").value, relevance: $("steer-relevance").value, quality: $("steer-quality").value }, "completing the query…");
  $("steer-completions").replaceChildren(...body.completions.map((c) => { const li = document.createElement("li"); li.textContent = c; return li; }));
  renderGrid("steer-grid", body.hits);
});

// --- start: status, the tabs of the registered methods, a chat to resume ---
(async () => {
  const st = await api("/api/status", {}, "loading…");
  $("status").textContent = `${st.count} images · embedders: ${st.embedders.join(", ")}`;
  document.querySelectorAll("#tabs button[data-method]").forEach((b) => { b.hidden = !st.methods.includes(b.dataset.method); });
  const wanted = location.hash.slice(1);
  if (wanted && document.querySelector(`#tabs button[data-tab="${wanted}"]:not([hidden])`)) selectTab(wanted);
  const thread = localStorage.getItem("pictrieve-chat");
  if (thread && st.methods.includes("plugir")) {
    try { renderChat(await api(`/api/chat/${encodeURIComponent(thread)}`)); } catch (e) { localStorage.removeItem("pictrieve-chat"); showError(""); }
  }
})();
window.addEventListener("hashchange", () => {
  const wanted = location.hash.slice(1);
  if (document.querySelector(`#tabs button[data-tab="${wanted}"]:not([hidden])`)) selectTab(wanted);
});
