// agentd's page: a chat in one channel with its personas, and what each reply was given.
// Plain JavaScript against the daemon's own API; no build step, nothing fetched from elsewhere.
//
// Layout of this file: the API (fetch, server-sent events), rendering helpers, the conversation
// (one channel: its stored messages, paged back, and its live feed), the side panels (a registry:
// each panel is an object with mount/show, see registerPanel), and the wiring of the header.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { key: sessionStorage.getItem("agentd.key") || "", personas: [], user: "" };
//: A message id above every stored one: ?before= this reads the newest page.
const NEWEST = "9223372036854775807";
//: Messages read per page (the first page, and each older one).
const PAGE = 50;

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
  if (m.withheld) { // another user's own memory, on the channel's feed: only that it was there, and its score
    return el("li", { class: near ? "near-miss withheld" : "memory withheld" },
      el("span", { class: "score" }, (m.relevance || 0).toFixed(2)), " ",
      el("span", { class: "meta" }, "a memory of the user who asked (withheld)"));
  }
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

// -- the conversation ----------------------------------------------------------------------------

function status(text, error) {
  $("status").textContent = text || "";
  $("status").classList.toggle("error", !!error);
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// One channel as one persona and user: the exchanges shown (by user message id), the replies
// streaming (by user message id and persona), and the feed followed. A new Conversation is made
// whenever the channel, persona or user changes, so nothing of the one before is left on screen;
// the old one's pending work sees it is no longer `current` and drops what it would have shown.
class Conversation {
  constructor(channel, persona, user) {
    Object.assign(this, { channel, persona, user });
    this.exchanges = new Map(); // user message id -> exchange element
    this.streams = new Map(); // `${user message id}/${persona}` -> reply block being written
    this.own = new Set(); // user message ids this page sent (their turn streams here, not from the feed)
    this.pending = []; // own messages sent, whose ids are not known yet: [{text, item}]
    this.firstId = null; // the oldest message shown
    this.lastId = 0; // the newest message seen (the feed resumes after it)
    this.busy = false;
    this.aborter = new AbortController();
  }

  get live() { return conversation === this; }

  path(suffix) { return `/v1/channels/${encodeURIComponent(this.channel)}/${suffix}`; }

  // The newest page, then the feed from there on.
  async open() {
    $("log").replaceChildren();
    $("older").hidden = true;
    status("");
    if (!this.channel || !this.user) return;
    const page = await api("GET", this.path(`messages?before=${NEWEST}&limit=${PAGE}&context=true`));
    if (!this.live) return;
    this.show(page.messages, false);
    this.lastId = Math.max(this.lastId, page.last_id);
    $("older").hidden = !page.more_before;
    const last = $("log").lastElementChild;
    if (last) last.scrollIntoView({ block: "end" });
    this.follow();
  }

  // The page before the oldest shown, added above it in one step.
  async older() {
    if (this.firstId === null) return;
    const page = await api("GET", this.path(`messages?before=${this.firstId}&limit=${PAGE}&context=true`));
    if (!this.live) return;
    this.show(page.messages, true);
    $("older").hidden = !page.more_before;
  }

  // Render stored messages (oldest first) into one fragment, added at the top or the bottom.
  show(messages, above) {
    const fragment = document.createDocumentFragment();
    for (const m of messages) {
      const item = this.place(m);
      if (item && !item.isConnected && item.parentNode !== fragment) fragment.append(item);
      if (this.firstId === null || m.id < this.firstId) this.firstId = m.id;
      this.lastId = Math.max(this.lastId, m.id);
    }
    if (above) $("log").prepend(fragment);
    else $("log").append(fragment);
  }

  // A stored message into its exchange (made if new); returns the exchange element.
  place(m) {
    if (m.role === "user") {
      let item = this.exchanges.get(m.id);
      if (!item) {
        const mine = this.pending.findIndex((p) => p.text === m.content && m.author === this.user);
        item = mine >= 0 ? this.pending.splice(mine, 1)[0].item : exchangeItem();
        if (mine >= 0) this.own.add(m.id);
        this.exchanges.set(m.id, item);
      }
      item.dataset.id = String(m.id);
      fillUser(item, m.author, m.content, m.created_at);
      return item;
    }
    const asked = m.reply_to === null ? -m.id : m.reply_to;
    let item = this.exchanges.get(asked);
    if (!item) { // its user message is older than the page (or there is none): an exchange of its own
      item = exchangeItem();
      item.querySelector(".msg.user").hidden = true;
      this.exchanges.set(asked, item);
    }
    const block = this.reply(asked, m.persona || "", item);
    block.dataset.id = String(m.id);
    if (!this.own.has(asked)) {
      block.querySelector(".reply .text").textContent = m.content;
      block.querySelector(".reply").classList.remove("streaming");
      if (m.status === "failed") block.querySelector(".reply").classList.add("failed");
      item.classList.add("complete");
    }
    if (m.context) showContext(block, m.context);
    return item;
  }

  // The reply block of `persona` to user message `asked` (made, and kept while it streams).
  reply(asked, persona, item) {
    const key = `${asked}/${persona}`;
    let block = this.streams.get(key);
    if (!block) {
      block = replyBlock(persona);
      item.querySelector(".replies").append(block);
      this.streams.set(key, block);
    }
    return block;
  }

  // Follow the channel's feed from the newest message seen; reconnect (after it) when it drops.
  async follow() {
    while (this.live) {
      try {
        const response = await fetch(this.path(`events?after=${this.lastId}`),
          { headers: headers(), signal: this.aborter.signal });
        if (response.status === 401) { await askKey(); continue; }
        if (!response.ok) throw new ApiError(response.status, await response.json().catch(() => ({})));
        for await (const { event, data } of sse(response)) {
          if (!this.live) return;
          this.onFeed(event, data);
        }
      } catch (error) {
        if (!this.live || error.name === "AbortError") return;
        status(`Lost the channel's feed (${error.message}); reconnecting…`, true);
      }
      await sleep(1000);
    }
  }

  // One event of the feed: a stored message, or a live event of someone else's turn.
  onFeed(event, data) {
    hearPanels(event, data);
    if (event === "message") {
      if (data.id <= this.lastId && this.exchanges.has(data.id)) return;
      const atEnd = window.innerHeight + window.scrollY >= document.body.scrollHeight - 80;
      this.show([data], false);
      if (atEnd) $("log").lastElementChild.scrollIntoView({ block: "end" });
      if ($("status").classList.contains("error") && $("status").textContent.startsWith("Lost")) status("");
      return;
    }
    const asked = data.user_message_id;
    if (asked === undefined || this.own.has(asked)) return; // this page's own turns stream from /v1/chat
    const item = this.exchanges.get(asked);
    if (!item) return;
    const block = this.reply(asked, data.persona || "", item);
    applyTurnEvent(block, event, data, this.user);
    if (event === "done" || event === "error") item.classList.add("complete");
  }

  // Send a message as this page's user and stream the reply (POST /v1/chat).
  async send(text) {
    const item = exchangeItem();
    fillUser(item, this.user, text, null);
    $("log").append(item);
    item.scrollIntoView({ block: "end" });
    const pending = { text, item };
    this.pending.push(pending);
    const block = replyBlock(this.persona);
    block.querySelector(".why").open = true; // what this turn was given, shown as it arrives
    item.querySelector(".replies").append(block);
    const response = await this.post(text);
    const id = Number(response.headers.get("X-Agentd-Message-Id"));
    const known = this.exchanges.get(id);
    if (known && known !== item) known.remove(); // the feed showed it before this post returned
    this.pending = this.pending.filter((p) => p !== pending);
    this.exchanges.set(id, item);
    this.own.add(id);
    item.dataset.id = String(id);
    const key = `${id}/${this.persona}`;
    const other = this.streams.get(key);
    if (other && other !== block) other.remove();
    this.streams.set(key, block);
    for await (const { event, data } of sse(response)) {
      applyTurnEvent(block, event, data, this.user);
      hearPanels(event, data);
    }
    item.classList.add("complete");
  }

  async post(text) {
    for (;;) {
      const response = await fetch("/v1/chat", {
        // dm-<user> is the user's own channel (as on the OpenAI endpoint); any other is shared
        // unless its first message, or the config, said otherwise.
        method: "POST", headers: headers(), body: JSON.stringify({
          persona: this.persona, channel: this.channel, user: this.user, message: text,
          ...(this.channel === `dm-${this.user}` ? { visibility: "direct" } : {}),
        }),
      });
      if (response.status === 429) {
        // Admission control: nothing was stored; wait as asked (at most 30 s) and post again.
        const wait = Math.min(30, Number(response.headers.get("Retry-After")) || 1);
        await sleep(wait * 1000);
        continue;
      }
      if (response.status === 401) { await askKey(); continue; }
      if (!response.ok) throw new ApiError(response.status, await response.json().catch(() => ({})));
      return response;
    }
  }

  close() { this.aborter.abort(); }
}

let conversation = null;

function exchangeItem() {
  return $("exchange-template").content.firstElementChild.cloneNode(true);
}

function fillUser(item, author, text, when) {
  const user = item.querySelector(".msg.user");
  user.hidden = false;
  user.querySelector(".speaker").textContent = `${author}:`;
  user.querySelector(".text").textContent = text;
  const time = user.querySelector("time");
  if (when) {
    time.dateTime = when;
    time.textContent = new Date(when).toLocaleString();
  }
}

// A reply, labelled with the persona that wrote it (several may answer in one channel).
function replyBlock(persona) {
  const block = $("reply-template").content.firstElementChild.cloneNode(true);
  block.dataset.persona = persona;
  block.querySelector(".reply .speaker").textContent = `${persona}:`;
  block.querySelector(".reply").classList.add("streaming");
  return block;
}

// A reply's stored context record (GET …/messages?context=true): what it was given.
function showContext(block, context) {
  const recalled = [...(context.memories || []), ...(context.episodes || [])];
  const status = (context.retrieval || {}).status;
  fill(block.querySelector(".recalled"), recalled.map((m) => memoryItem(m, false)),
    !status || status === "ok" ? "none above the threshold" : `retrieval ${status}`);
  if (context.budget && context.budget.window) renderBudget(block.querySelector(".budget"), context.budget);
}

// One event of a turn (from /v1/chat, or another's turn from the feed) into its reply block.
function applyTurnEvent(block, event, data, user) {
  const reply = block.querySelector(".reply");
  const out = reply.querySelector(".text");
  const persona = block.dataset.persona;
  if (event === "memory_context") {
    // Earlier conversations recalled by meaning (category "episode") follow the memories.
    const recalled = [...data.memories, ...(data.episodes || [])];
    fill(block.querySelector(".recalled"), recalled.map((m) => memoryItem(m, false)),
      data.status === "ok" ? "none above the threshold" : `retrieval ${data.status}`);
    const near = data.near_misses || [];
    block.querySelector(".near-title").hidden = block.querySelector(".near").hidden = !near.length;
    fill(block.querySelector(".near"), near.map((m) => memoryItem(m, true)), "");
  } else if (event === "history_context") {
    const past = data.snippets.map((s) => el("li", { class: "exchange-snippet" },
      el("span", { class: "meta" }, `#${s.message_id} `), `${user}: ${s.user}`,
      s.assistant ? el("br") : "", s.assistant ? `${persona}: ${s.assistant}` : ""));
    block.querySelector(".past-title").hidden = block.querySelector(".past").hidden = !past.length;
    fill(block.querySelector(".past"), past, "");
  } else if (event === "token_delta") {
    out.textContent += data.text;
  } else if (event === "tool_call") {
    status(`${persona} is using ${data.name}…`);
  } else if (event === "done") {
    out.textContent = data.text;
    block.dataset.id = String(data.message_id);
    reply.classList.remove("streaming");
    renderBudget(block.querySelector(".budget"), data.budget);
    if (data.tool_calls !== undefined || $("status").textContent.endsWith("…")) status("");
  } else if (event === "error") {
    reply.classList.add("failed");
    reply.classList.remove("streaming");
    out.textContent += (out.textContent ? "\n" : "") + `(${data.code}) ${data.message}`;
  }
}

// -- panels ---------------------------------------------------------------------------------------
// Each side panel is an object {id, mount(section), show(where)}: mount once with its <section>
// (made in #panels when the page has none with that id), show whenever the persona, channel or
// user changes and after each of this page's turns (`where` = {persona, channel, user}); an
// optional onEvent(event, data) hears every event of the channel's feed and of this page's own
// turns (a tool call waiting for approval, say). A schedules or approvals list is one more
// registerPanel call.

const panels = [];

function registerPanel(panel) {
  let section = $(panel.id);
  if (!section) {
    section = el("section", { id: panel.id, class: "panel" });
    $("panels").append(section);
  }
  panel.mount(section);
  panels.push(panel);
}

function where() {
  return { persona: $("persona").value, channel: $("channel").value.trim(), user: $("user").value.trim() };
}

function hearPanels(event, data) {
  for (const panel of panels) {
    if (panel.onEvent) run(async () => panel.onEvent(event, data));
  }
}

async function showPanels() {
  for (const panel of panels) await panel.show(where());
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


// The memories of this page's user with this persona: list, search, add, forget.
const memoriesPanel = {
  id: "memories-panel",
  mount() {
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
  },
  show() { return loadMemories($("memory-query").value.trim()); },
};

// -- schedules -------------------------------------------------------------------------------------

// The user's reminders and schedules that are still to fire (GET /v1/schedules), each with Cancel.
const schedulesPanel = {
  id: "schedules-panel",
  mount(section) {
    section.setAttribute("aria-labelledby", "schedules-title");
    section.append(el("h2", { id: "schedules-title" }, "Scheduled"), el("ul", { id: "schedule-list", class: "memory-list" }));
  },
  async show({ user }) {
    if (!user) return;
    const params = new URLSearchParams({ user, state: "scheduled" });
    const listed = (await api("GET", `/v1/schedules?${params}`)).schedules;
    fill($("schedule-list"), listed.map((s) => {
      const cancel = el("button", { type: "button", class: "quiet", "aria-label": `Cancel: ${s.text}` }, "Cancel");
      cancel.addEventListener("click", () => run(async () => {
        await api("DELETE", `/v1/schedules/${s.id}?${new URLSearchParams({ user })}`);
        status(`Cancelled “${s.text}”.`);
        await this.show(where());
      }));
      const when = s.cron ? `${s.cron} (${s.timezone || "UTC"}), next ${s.next_at}` : s.next_at;
      return el("li", { class: "stored", "data-id": String(s.id) },
        el("span", {}, el("span", { class: "text" }, s.text), " ",
          el("span", { class: "meta" }, `${s.persona} in ${s.channel}, ${when}`)),
        cancel);
    }), "nothing scheduled");
  },
  onEvent(event) {
    if (event === "done") return this.show(where());
  },
};

// -- approvals -------------------------------------------------------------------------------------

// Tool calls of this persona waiting for an owner (GET /v1/approvals): Approve or Deny, once.
const approvalsPanel = {
  id: "approvals-panel",
  mount(section) {
    section.setAttribute("aria-labelledby", "approvals-title");
    section.append(el("h2", { id: "approvals-title" }, "Waiting for approval"), el("ul", { id: "approval-list", class: "memory-list" }));
  },
  async show({ persona, user }) {
    if (!persona) return;
    const listed = (await api("GET", `/v1/approvals?${new URLSearchParams({ persona, state: "pending" })}`)).approvals;
    fill($("approval-list"), listed.map((a) => {
      const decide = (decision) => run(async () => {
        const body = { decision, user: user || undefined };
        if (decision === "deny") body.reason = `denied on the web page by ${user || "an admin"}`;
        await api("POST", `/v1/approvals/${a.id}`, body);
        status(`${decision === "approve" ? "Approved" : "Denied"} ${a.tool} for ${a.asked_by}.`);
        await this.show(where());
      });
      const approve = el("button", { type: "button", "aria-label": `Approve ${a.tool} #${a.id}` }, "Approve");
      const deny = el("button", { type: "button", class: "quiet", "aria-label": `Deny ${a.tool} #${a.id}` }, "Deny");
      approve.addEventListener("click", () => decide("approve"));
      deny.addEventListener("click", () => decide("deny"));
      return el("li", { class: "stored", "data-id": String(a.id) },
        el("span", {}, el("span", { class: "text" }, `${a.tool}(${JSON.stringify(a.arguments)})`), " ",
          el("span", { class: "meta" }, `asked by ${a.asked_by} in ${a.channel}`)),
        el("span", {}, approve, " ", deny));
    }), "nothing waiting");
  },
  onEvent(event) {
    if (event === "approval_required" || event === "done") return this.show(where());
  },
};

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
  const { user, channel, persona } = where();
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

// The channels this caller may use (GET /v1/channels), the user's own first, offered as the
// channel box's suggestions.
async function loadChannels() {
  const user = $("user").value.trim();
  const listed = (await api("GET", "/v1/channels")).channels;
  const names = [defaultChannel(user), ...listed.map((c) => c.name).filter((n) => n !== defaultChannel(user))]
    .filter((n) => n && !(n.startsWith("dm-") && n !== defaultChannel(user)));
  $("channel-list").replaceChildren(...names.map((n) => el("option", { value: n })));
}

// Start clean in the channel, persona and user now chosen: a new conversation (the old one's
// feed closed, its log and any error gone), the panels shown for it.
async function switchTo() {
  remember();
  describeChannel();
  if (conversation) conversation.close();
  const { channel, persona, user } = where();
  conversation = new Conversation(channel, persona, user);
  $("send-button").disabled = false;
  await conversation.open();
  await showPanels();
  await loadChannels();
}

function sendFromBox() {
  const text = $("message").value.trim();
  const talk = conversation;
  if (!text || !talk || talk.busy || !$("who").reportValidity()) return;
  talk.busy = true;
  $("send-button").disabled = true;
  $("message").value = "";
  status("");
  run(async () => {
    try {
      await talk.send(text);
      if (talk.live) await showPanels();
    } catch (error) {
      if (talk.live) throw error; // a conversation left behind says nothing in the one now shown
    } finally {
      talk.busy = false;
      if (talk.live) {
        $("send-button").disabled = false;
        $("message").focus();
      }
    }
  });
}

async function start() {
  $("key-button").addEventListener("click", () => run(async () => { await askKey(); await switchTo(); }));
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
  $("persona").addEventListener("change", () => run(switchTo));
  $("user").addEventListener("change", () => run(async () => {
    const user = $("user").value.trim();
    // The user's own channel follows the user; a channel chosen by hand stays.
    const channel = $("channel").value.trim();
    if (!channel || channel === defaultChannel(state.user)) $("channel").value = defaultChannel(user);
    state.user = user;
    await switchTo();
  }));
  $("channel").addEventListener("change", () => run(switchTo));
  $("send").addEventListener("submit", (e) => { e.preventDefault(); sendFromBox(); });
  $("message").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      $("send").requestSubmit();
    }
  });
  $("older").addEventListener("click", () => run(async () => {
    if (conversation) await conversation.older();
  }));
  registerPanel(memoriesPanel);
  registerPanel(approvalsPanel);
  registerPanel(schedulesPanel);
  await switchTo();
  document.body.dataset.ready = "true";
  $(state.user ? "message" : "user").focus();
}

document.addEventListener("DOMContentLoaded", () => run(start));
