// agentd's page: chat with a persona and see what each reply was given.
// Plain JavaScript against the daemon's own API; no build step, nothing fetched from elsewhere.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { key: sessionStorage.getItem("agentd.key") || "", personas: [], busy: false, user: "" };

// -- the API --------------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, body) {
    const error = (body && body.error) || {};
    super(error.message || `HTTP ${status}`);
    this.status = status;
    this.code = error.code;
  }
}

function headers(extra) {
  const h = Object.assign({ "Content-Type": "application/json" }, extra || {});
  if (state.key) h.Authorization = `Bearer ${state.key}`;
  return h;
}

async function api(method, path, body) {
  for (;;) {
    const response = await fetch(path, {
      method, headers: headers(), body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (response.status === 401) {
      await askKey();
      continue;
    }
    const data = await response.json().catch(() => ({}));
    if (!response.ok) throw new ApiError(response.status, data);
    return data;
  }
}

function askKey() {
  const dialog = $("key-dialog");
  $("key-button").hidden = false;
  return new Promise((resolve) => {
    $("key-input").value = "";
    dialog.addEventListener("close", () => {
      state.key = $("key-input").value.trim();
      sessionStorage.setItem("agentd.key", state.key);
      resolve();
    }, { once: true });
    if (!dialog.open) dialog.showModal();
    $("key-input").focus();
  });
}

// Server-sent events over fetch (EventSource cannot POST): yields {event, data}.
async function* sse(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const frame = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = "message";
      const data = [];
      for (const line of frame.split("\n")) {
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let val = colon < 0 ? "" : line.slice(colon + 1);
        if (val.startsWith(" ")) val = val.slice(1);
        if (field === "event") event = val;
        else if (field === "data") data.push(val);
      }
      if (data.length) yield { event, data: JSON.parse(data.join("\n")) };
    }
  }
}

// -- rendering ------------------------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else node.setAttribute(k, v);
  }
  for (const child of children) node.append(child);
  return node;
}

function memoryItem(m, near) {
  return el("li", { class: near ? "near-miss" : "memory", "data-id": String(m.id) },
    el("span", { class: "score", title: `score ${m.score} (relevance ${m.relevance}, time-decayed)` },
      m.relevance.toFixed(2)), " ",
    el("span", { class: "text" }, m.text), " ",
    el("span", { class: "meta" }, `${m.category} · ${m.scope}`));
}

function fill(list, items, empty) {
  list.replaceChildren(...(items.length ? items : [el("li", { class: "empty" }, empty)]));
}

const SECTIONS = [
  ["system", "system_tokens", "system prompt"], ["project", "project_tokens", "project"],
  ["memory", "memory_tokens", "memories"], ["user_history", "user_history_tokens", "past exchanges"],
  ["history", "history_tokens", "history"], ["current", "current_tokens", "message"],
  ["tools", "tools_tokens", "tools"], ["reserve", "output_reserve", "output reserve"],
  ["free", "free_tokens", "free"],
];

function renderBudget(node, b) {
  const bar = node.querySelector(".bar");
  const legend = node.querySelector(".legend");
  const window = b.window || 1;
  bar.replaceChildren(...SECTIONS.map(([name, key, label]) => {
    const part = el("span", { class: `s-${name}`, title: `${label}: ${b[key] || 0} tokens` });
    part.style.width = `${(100 * (b[key] || 0)) / window}%`; // CSSOM, which the page's CSP allows
    return part;
  }));
  const used = (b.total_tokens || 0) + (b.output_reserve || 0);
  bar.setAttribute("aria-label", `${used} of ${window} tokens used`);
  legend.replaceChildren(
    el("span", { class: "total" }, `${used.toLocaleString()} of ${window.toLocaleString()} tokens (${b.model || ""})`),
    ...SECTIONS.filter(([, key]) => b[key]).map(([name, key, label]) =>
      el("span", {}, el("i", { class: `s-${name}` }), `${label} ${b[key].toLocaleString()}`)));
}

// -- chat -----------------------------------------------------------------------------------------

function status(text, error) {
  $("status").textContent = text || "";
  $("status").classList.toggle("error", !!error);
}

async function send(text) {
  const persona = $("persona").value;
  const user = $("user").value.trim();
  const channel = $("channel").value.trim();
  const item = $("exchange-template").content.firstElementChild.cloneNode(true);
  item.querySelector(".user .speaker").textContent = `${user}:`;
  item.querySelector(".user .text").textContent = text;
  const reply = item.querySelector(".reply");
  reply.querySelector(".speaker").textContent = `${persona}:`;
  reply.classList.add("streaming");
  $("log").append(item);
  item.scrollIntoView({ block: "end" });
  const out = reply.querySelector(".text");
  let response;
  for (;;) {
    response = await fetch("/v1/chat", {
      // dm-<user> is the user's own channel (as on the OpenAI endpoint); any other is shared
      // unless its first message, or the config, said otherwise.
      method: "POST", headers: headers(), body: JSON.stringify({
        persona, channel, user, message: text, ...(channel === `dm-${user}` ? { visibility: "direct" } : {}),
      }),
    });
    if (response.status === 429) {
      // Admission control: nothing was stored; wait as asked (at most 30 s) and post again.
      const wait = Math.min(30, Number(response.headers.get("Retry-After")) || 1);
      await new Promise((resolve) => setTimeout(resolve, wait * 1000));
      continue;
    }
    if (response.status !== 401) break;
    await askKey();
  }
  if (!response.ok) {
    const body = await response.json().catch(() => ({}));
    throw new ApiError(response.status, body);
  }
  for await (const { event, data } of sse(response)) {
    if (event === "memory_context") {
      // Earlier conversations recalled by meaning (category "episode") follow the memories.
      const recalled = [...data.memories, ...(data.episodes || [])];
      fill(item.querySelector(".recalled"), recalled.map((m) => memoryItem(m, false)),
        data.status === "ok" ? "none above the threshold" : `retrieval ${data.status}`);
      const near = data.near_misses || [];
      item.querySelector(".near-title").hidden = item.querySelector(".near").hidden = !near.length;
      fill(item.querySelector(".near"), near.map((m) => memoryItem(m, true)), "");
    } else if (event === "history_context") {
      const past = data.snippets.map((s) => el("li", { class: "exchange-snippet" },
        el("span", { class: "meta" }, `#${s.message_id} `), `${user}: ${s.user}`,
        s.assistant ? el("br") : "", s.assistant ? `${persona}: ${s.assistant}` : ""));
      item.querySelector(".past-title").hidden = item.querySelector(".past").hidden = !past.length;
      fill(item.querySelector(".past"), past, "");
    } else if (event === "token_delta") {
      out.textContent += data.text;
    } else if (event === "tool_call") {
      status(`${persona} is using ${data.name}…`);
    } else if (event === "done") {
      out.textContent = data.text;
      reply.dataset.messageId = String(data.message_id);
      renderBudget(item.querySelector(".budget"), data.budget);
    } else if (event === "error") {
      reply.classList.add("failed");
      out.textContent += (out.textContent ? "\n" : "") + `(${data.code}) ${data.message}`;
    }
  }
  reply.classList.remove("streaming");
  item.classList.add("complete");
}

// -- memories -------------------------------------------------------------------------------------

async function loadMemories(query) {
  const persona = $("persona").value;
  const user = $("user").value.trim();
  $("memories-user").textContent = user || "you";
  if (!persona || !user) return;
  let memories;
  if (query) {
    const found = await api("POST", "/v1/memory/search", { query, persona, userId: user });
    memories = found.results.filter((m) => m.scope === `user:${user}`);
  } else {
    const params = new URLSearchParams({ persona, scope: `user:${user}`, limit: "200" });
    memories = (await api("GET", `/v1/memories?${params}`)).memories;
  }
  fill($("memory-list"), memories.map((m) => {
    const forget = el("button", { type: "button", class: "quiet", "aria-label": `Forget: ${m.text}` }, "Forget");
    forget.addEventListener("click", () => run(async () => {
      await api("DELETE", `/v1/memories/${m.id}`);
      status(`Forgot “${m.text}”.`);
      await loadMemories($("memory-query").value.trim());
    }));
    return el("li", { class: "stored", "data-id": String(m.id) },
      el("span", {}, query && m.relevance !== undefined ? el("span", { class: "score" }, m.relevance.toFixed(2)) : "",
        query ? " " : "", el("span", { class: "text" }, m.text), " ", el("span", { class: "meta" }, m.category)),
      forget);
  }), query ? "nothing matches" : "no memories yet");
}

// -- wiring ---------------------------------------------------------------------------------------

async function run(work) {
  try {
    await work();
  } catch (error) {
    status(error.message, true);
  }
}

// The page opens on the user's own direct channel, dm-<user> (as the OpenAI endpoint does): there every
// memory of theirs may be recalled, those this page's panel stores included.
function defaultChannel(user) {
  return user ? `dm-${user}` : "";
}

// Says which channel the page is in and who may read it (and so which memories may be recalled).
function describeChannel() {
  const user = $("user").value.trim();
  const channel = $("channel").value.trim();
  const persona = $("persona").value;
  let text;
  if (!user) text = "Who are you? Type your name in “You” to start.";
  else if (!channel) text = "Choose a channel.";
  else if (channel === defaultChannel(user)) {
    text = `#${channel} is your direct channel: only you (${user}) and ${persona} read it, so all of your `
      + "memories may be recalled here, those stored in the panel included.";
  } else {
    text = `#${channel} is shared unless the config or its first message made it direct: others may read it, `
      + "so only global memories and those learned in it are recalled here, not the panel’s. "
      + `Your own channel is #${defaultChannel(user)}.`;
  }
  $("where").textContent = text;
}

function remember() {
  localStorage.setItem("agentd.user", $("user").value.trim());
  localStorage.setItem("agentd.persona", $("persona").value);
  localStorage.setItem("agentd.channel", $("channel").value.trim());
}

async function start() {
  $("key-button").addEventListener("click", () => run(async () => { await askKey(); await loadMemories(); }));
  const listed = await api("GET", "/v1/personas");
  const personas = listed.personas;
  state.personas = personas;
  $("persona").replaceChildren(...personas.map((p) => el("option", { value: p.name }, p.name)));
  const saved = localStorage.getItem("agentd.persona");
  if (personas.some((p) => p.name === saved)) $("persona").value = saved;
  // Who you are: what this browser last said, else the daemon's default user (the CLI's: [user] name,
  // else the login name of whoever runs the daemon), else the page asks.
  state.user = localStorage.getItem("agentd.user") || listed.default_user || "";
  $("user").value = state.user;
  $("channel").value = localStorage.getItem("agentd.channel") || defaultChannel(state.user);
  describeChannel();
  $("persona").addEventListener("change", () => run(async () => {
    remember();
    describeChannel();
    await loadMemories();
  }));
  $("user").addEventListener("change", () => run(async () => {
    const user = $("user").value.trim();
    // The user's own channel follows the user; a channel chosen by hand stays.
    const channel = $("channel").value.trim();
    if (!channel || channel === defaultChannel(state.user)) $("channel").value = defaultChannel(user);
    state.user = user;
    remember();
    describeChannel();
    await loadMemories();
  }));
  $("channel").addEventListener("change", () => { remember(); describeChannel(); });
  $("send").addEventListener("submit", (e) => {
    e.preventDefault();
    const text = $("message").value.trim();
    if (!text || state.busy || !$("who").reportValidity()) return;
    state.busy = true;
    $("send-button").disabled = true;
    $("message").value = "";
    status("");
    run(async () => {
      try {
        await send(text);
        await loadMemories($("memory-query").value.trim());
      } finally {
        state.busy = false;
        $("send-button").disabled = false;
        $("message").focus();
      }
    });
  });
  $("message").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      $("send").requestSubmit();
    }
  });
  $("memory-search").addEventListener("submit", (e) => {
    e.preventDefault();
    run(() => loadMemories($("memory-query").value.trim()));
  });
  $("memory-all").addEventListener("click", () => { $("memory-query").value = ""; run(() => loadMemories()); });
  $("memory-add").addEventListener("submit", (e) => {
    e.preventDefault();
    run(async () => {
      const text = $("memory-text").value.trim();
      const category = $("memory-category").value.trim() || "fact";
      const added = await api("POST", "/v1/memories",
        { persona: $("persona").value, text, category, userId: $("user").value.trim() });
      $("memory-text").value = "";
      status(added.created ? `Remembered “${text}”.` : "Already remembered.");
      await loadMemories();
    });
  });
  await loadMemories();
  document.body.dataset.ready = "true";
  $(state.user ? "message" : "user").focus();
}

document.addEventListener("DOMContentLoaded", () => run(start));
