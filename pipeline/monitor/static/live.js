// Live calls: one card per call in progress, fed by the server-sent event stream.
// A card shows each channel's newest partial (committed text, then tentative text in italics)
// or its last final; an ended call is marked "Ended" and leaves after the server's linger time.

import { channelLabel, complianceBadge, duration, el, renderHealth, statusBadge } from "./common.js";

const cards = document.getElementById("calls");
const empty = document.getElementById("empty");
const summary = document.getElementById("live-summary");
const rows = new Map(); // call id -> latest row
let skewMs = 0; // browser clock minus server clock
let lingerMs = 60000;
let connected = false;
let lastEnded = null; // the call that ended most recently, announced in the summary

const serverNow = () => Date.now() - skewMs;

function elapsedText(row) {
  if (row.status === "ended") return duration(row.audio_ms);
  return duration(serverNow() - row.started_ms);
}

function channelItem(view) {
  const text = el("p", { class: "live-text" });
  if (!view.committed_text && !view.tentative_text) {
    text.append(el("span", { class: "placeholder" }, view.ended ? "(no speech)" : "listening…"));
  } else {
    text.append(el("span", { class: "committed" }, view.committed_text));
    if (view.tentative_text) {
      text.append(" ", el("span", { class: "tentative" }, view.tentative_text));
    }
  }
  return el(
    "li",
    {
      class: `channel lane-${view.lane}`,
      dataset: { channel: view.channel, final: String(view.final) },
    },
    el(
      "span",
      { class: "channel-label" },
      channelLabel(view.channel),
      view.ended ? el("span", { class: "ended-mark" }, " · session ended") : null,
    ),
    text,
  );
}

function cardContent(row) {
  const link = el("a", { href: `/calls/${encodeURIComponent(row.call_id)}` }, row.call_id);
  const head = el(
    "header",
    { class: "card-head" },
    el("h2", {}, link),
    el(
      "span",
      {},
      row.qa_revision !== null ? complianceBadge(row.compliance_passed, true) : null,
      " ",
      statusBadge(row.status),
    ),
  );
  const meta = el(
    "p",
    { class: "card-meta" },
    "Tenant ",
    el("b", {}, row.tenant),
    " · ",
    row.status === "ended" ? "Duration " : "Elapsed ",
    el("b", { class: "elapsed" }, elapsedText(row)),
    " · Utterances ",
    el("b", {}, String(row.utterances)),
  );
  const channels = el(
    "ul",
    { class: "channels", "aria-label": "Channels" },
    row.channels.map(channelItem),
  );
  return el("article", { "aria-label": `Call ${row.call_id}` }, head, meta, channels);
}

/** True when ``a`` goes before ``b``: newest first, then by call id (as the server orders). */
function before(a, b) {
  return a.started_ms !== b.started_ms ? a.started_ms > b.started_ms : a.call_id < b.call_id;
}

function placeCard(card, row) {
  // A card keeps its place when it updates.
  for (const other of cards.children) {
    const otherRow = rows.get(other.dataset.callId);
    if (other !== card && otherRow && before(row, otherRow)) {
      if (card.nextSibling !== other) cards.insertBefore(card, other);
      return;
    }
  }
  if (card.parentNode !== cards) cards.append(card);
}

function cardOf(callId) {
  for (const card of cards.children) if (card.dataset.callId === callId) return card;
  return null;
}

function lingerOver(row) {
  return row.status === "ended" && row.ended_ms !== null && serverNow() - row.ended_ms > lingerMs;
}

function upsert(row) {
  const previous = rows.get(row.call_id);
  let card = cardOf(row.call_id);
  if (!card && lingerOver(row)) return; // e.g. a QA summary of a call ended long ago
  rows.set(row.call_id, row);
  if (!card) {
    card = el("li", { class: "card", dataset: { callId: row.call_id } });
    placeCard(card, row);
  }
  card.dataset.status = row.status;
  card.replaceChildren(cardContent(row));
  if (previous && previous.status === "live" && row.status === "ended") lastEnded = row.call_id;
  refreshSummary();
}

function remove(callId) {
  rows.delete(callId);
  const card = cardOf(callId);
  if (card) card.remove();
  refreshSummary();
}

function refreshSummary() {
  empty.hidden = rows.size > 0;
  if (!connected) return;
  const live = [...rows.values()].filter((row) => row.status === "live").length;
  const text = `${live} in progress` + (lastEnded ? ` · call ${lastEnded} ended` : "");
  if (summary.textContent !== text) summary.textContent = text;
}

function tick() {
  for (const [callId, row] of rows) {
    if (lingerOver(row)) {
      remove(callId);
      continue;
    }
    const card = cardOf(callId);
    const elapsed = card && card.querySelector(".elapsed");
    if (elapsed) elapsed.textContent = elapsedText(row);
  }
}

function connect() {
  const source = new EventSource("/api/stream");
  source.addEventListener("snapshot", (event) => {
    const snapshot = JSON.parse(event.data);
    skewMs = Date.now() - snapshot.now_ms;
    lingerMs = snapshot.ended_linger_ms;
    connected = true;
    rows.clear();
    cards.replaceChildren();
    for (const row of snapshot.calls) upsert(row);
    refreshSummary();
    renderHealth(snapshot.health);
  });
  source.addEventListener("call", (event) => upsert(JSON.parse(event.data)));
  source.addEventListener("evicted", (event) => remove(JSON.parse(event.data).call_id));
  source.addEventListener("health", (event) => renderHealth(JSON.parse(event.data)));
  source.addEventListener("error", () => {
    connected = false;
    summary.textContent = "Reconnecting…";
  });
}

connect();
setInterval(tick, 1000);
