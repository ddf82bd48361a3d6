// One call: the conversation in two lanes (agent left, customer right, mono centered) in time
// order, each word with its timing and probability on hover, each utterance with its endpoint
// reason; and the QA summary (talk time, overlap, compliance with evidence) once qa.calls has it.
// While the call is live the page follows it through the event stream.

import {
  audioTime,
  channelLabel,
  clockTime,
  complianceBadge,
  duration,
  el,
  pollHealth,
  statusBadge,
} from "./common.js";

const LOW_PROBABILITY = 0.5;
const REFRESH_DEBOUNCE_MS = 500;

const callId = decodeURIComponent(location.pathname.slice("/calls/".length));
const transcript = document.getElementById("transcript");
const transcriptEmpty = document.getElementById("transcript-empty");
const qaPanel = document.getElementById("qa");
const notice = document.getElementById("call-notice");

document.title = `Call ${callId} · Streamscribe monitor`;
document.getElementById("call-id").textContent = callId;
document.getElementById("crumb").textContent = callId;

function wordSpan(word) {
  const title = `${word.start_ms}–${word.end_ms} ms · p ${word.probability.toFixed(2)}`;
  return el(
    "span",
    {
      class: word.probability < LOW_PROBABILITY ? "w low" : "w",
      title,
      dataset: { startMs: word.start_ms, endMs: word.end_ms, probability: word.probability },
    },
    word.word,
  );
}

/** The utterance's text exactly as the final has it, each word a span with its timing. */
function utteranceText(utterance) {
  const text = el("p", { class: "text" });
  const parts = [];
  let cursor = 0;
  for (const word of utterance.words) {
    const at = utterance.text.indexOf(word.word, cursor);
    if (at < 0) {
      // Words that do not spell the text (should not happen): show the text, timings as a list.
      text.textContent = utterance.text;
      text.title = utterance.words.map((w) => `${w.word} ${w.start_ms}–${w.end_ms} ms`).join(", ");
      return text;
    }
    if (at > cursor) parts.push(utterance.text.slice(cursor, at));
    parts.push(wordSpan(word));
    cursor = at + word.word.length;
  }
  parts.push(utterance.text.slice(cursor));
  text.append(...parts.filter((part) => part !== ""));
  return text;
}

function utteranceItem(utterance) {
  const meta = [];
  if (utterance.endpoint_reason) meta.push(`endpoint: ${utterance.endpoint_reason}`);
  // A negative latency means the producer's clock runs ahead (or audio was sent faster than
  // real time): it says nothing about this utterance, so it is not shown.
  if (utterance.latency_ms !== null && utterance.latency_ms >= 0) {
    meta.push(`latency ${utterance.latency_ms} ms`);
  }
  return el(
    "li",
    {
      class: `utt lane-${utterance.lane}`,
      id: `u-${utterance.utterance_id}`,
      dataset: {
        utteranceId: utterance.utterance_id,
        channel: utterance.channel,
        endpoint: utterance.endpoint_reason || "",
      },
    },
    el(
      "div",
      { class: "bubble" },
      el(
        "p",
        { class: "speaker" },
        el("b", {}, channelLabel(utterance.channel)),
        el("span", {}, `${audioTime(utterance.start_ms)} – ${audioTime(utterance.end_ms)}`),
      ),
      utteranceText(utterance),
      meta.length ? el("p", { class: "meta" }, meta.join(" · ")) : null,
    ),
  );
}

function openItem(open) {
  return el(
    "li",
    { class: `utt open lane-${open.lane}`, dataset: { channel: open.channel, open: "true" } },
    el(
      "div",
      { class: "bubble" },
      el(
        "p",
        { class: "speaker" },
        el("b", {}, channelLabel(open.channel)),
        el("span", {}, `${audioTime(open.start_ms)} – …`),
      ),
      el(
        "p",
        { class: "text" },
        el("span", { class: "committed" }, open.committed_text),
        open.tentative_text ? " " : null,
        open.tentative_text ? el("span", { class: "tentative" }, open.tentative_text) : null,
      ),
      el("p", { class: "meta" }, `speaking… (revision ${open.revision})`),
    ),
  );
}

function fact(name, value) {
  return el("div", {}, el("dt", {}, name), el("dd", {}, value));
}

function renderFacts(detail) {
  const call = detail.call;
  const facts = [
    fact("Tenant", call.tenant),
    fact("Started", clockTime(call.started_ms)),
    fact(call.status === "live" ? "Audio so far" : "Duration", duration(call.audio_ms)),
    fact("Utterances", String(call.utterances)),
    fact("Channels", call.channels.map((c) => channelLabel(c.channel)).join(", ") || "—"),
  ];
  if (detail.dropped_utterances) {
    facts.push(fact("Oldest utterances not shown", String(detail.dropped_utterances)));
  }
  document.getElementById("facts").replaceChildren(...facts);
  document.getElementById("call-status").replaceChildren(statusBadge(call.status));
  document
    .getElementById("call-compliance")
    .replaceChildren(detail.qa ? complianceBadge(detail.qa.compliance_passed, true) : "");
}

function renderTranscript(detail) {
  const items = detail.utterances.map(utteranceItem);
  if (detail.call.status === "live") items.push(...detail.open_utterances.map(openItem));
  transcript.replaceChildren(...items);
  transcriptEmpty.hidden = items.length > 0;
}

function evidenceItem(evidence) {
  return el(
    "li",
    {},
    `“${evidence.matched_text}” — ${channelLabel(evidence.channel)} at `,
    `${audioTime(evidence.start_ms)}–${audioTime(evidence.end_ms)}`,
    ` (score ${evidence.score.toFixed(2)}) `,
    el("a", { href: `#u-${evidence.utterance_id}` }, "show"),
  );
}

function ruleBlock(rule) {
  return el(
    "div",
    { class: "rule", dataset: { ruleId: rule.rule_id, outcome: rule.outcome } },
    el(
      "div",
      { class: "rule-head" },
      el("code", {}, rule.rule_id),
      el("span", { class: `badge ${rule.outcome}` }, rule.outcome === "pass" ? "Pass" : rule.outcome === "fail" ? "Fail" : "Pending"),
    ),
    rule.description ? el("p", { class: "description" }, rule.description) : null,
    el("p", { class: "detail" }, rule.detail),
    rule.evidence.length ? el("ul", { class: "evidence", "aria-label": "Evidence" }, rule.evidence.map(evidenceItem)) : null,
  );
}

function talkTable(qa) {
  const head = el(
    "tr",
    {},
    el("th", { scope: "col" }, "Channel"),
    el("th", { scope: "col", class: "num" }, "Talk time"),
    el("th", { scope: "col", class: "num" }, "Words"),
    el("th", { scope: "col", class: "num" }, "Words/min"),
  );
  const rows = qa.channels.map((channel) =>
    el(
      "tr",
      { dataset: { channel: channel.channel } },
      el("th", { scope: "row" }, channelLabel(channel.channel)),
      el("td", { class: "num" }, duration(channel.talk_ms)),
      el("td", { class: "num" }, String(channel.words)),
      el(
        "td",
        { class: "num" },
        channel.words_per_minute == null ? "—" : String(Math.round(channel.words_per_minute)),
      ),
    ),
  );
  return el("table", {}, el("caption", { class: "visually-hidden" }, "Talk time per channel"), el("thead", {}, head), el("tbody", {}, rows));
}

function callFacts(qa) {
  const ratio = qa.silence_ratio === null ? "—" : `${Math.round(qa.silence_ratio * 100)} %`;
  const monologue = qa.longest_monologue
    ? `${channelLabel(qa.longest_monologue.speaker)}, ${duration(qa.longest_monologue.duration_ms)}`
    : "—";
  const rows = [
    ["Duration", duration(qa.duration_ms)],
    ["Overlap (talk-over)", `${(qa.overlap_ms / 1000).toFixed(1)} s in ${qa.overlaps.length} stretch${qa.overlaps.length === 1 ? "" : "es"}`],
    ["Silence", ratio],
    ["Longest gap", `${(qa.longest_gap_ms / 1000).toFixed(1)} s`],
    ["Longest monologue", monologue],
  ];
  return el(
    "table",
    { class: "qa-facts" },
    el("caption", { class: "visually-hidden" }, "Call statistics"),
    el("tbody", {}, rows.map(([name, value]) => el("tr", { dataset: { fact: name } }, el("th", { scope: "row" }, name), el("td", { class: "num" }, value)))),
  );
}

function renderQa(detail) {
  const qa = detail.qa;
  if (!qa) {
    qaPanel.replaceChildren(
      el(
        "p",
        { class: "muted" },
        detail.call.status === "live"
          ? "The QA summary is published when the call ends."
          : "Waiting for the QA summary on qa.calls…",
      ),
    );
    return;
  }
  const verdict = el(
    "div",
    { class: "verdict", id: "qa-verdict", dataset: { passed: String(qa.compliance_passed) } },
    complianceBadge(qa.compliance_passed, true),
    el(
      "span",
      { class: "muted" },
      qa.published_ms
        ? `revision ${qa.revision}, published ${clockTime(qa.published_ms)}`
        : qa.revision
          ? `revision ${qa.revision}, not yet published`
          : "live, not yet published",
    ),
  );
  const keywords = qa.keywords.filter((keyword) => keyword.total > 0);
  qaPanel.replaceChildren(
    verdict,
    el("section", { class: "qa-section", "aria-labelledby": "qa-compliance" }, el("h3", { id: "qa-compliance" }, "Compliance"), qa.compliance.length ? qa.compliance.map(ruleBlock) : el("p", { class: "muted" }, "No rules.")),
    el("section", { class: "qa-section", "aria-labelledby": "qa-talk" }, el("h3", { id: "qa-talk" }, "Talk time"), talkTable(qa)),
    el("section", { class: "qa-section", "aria-labelledby": "qa-call" }, el("h3", { id: "qa-call" }, "Call"), callFacts(qa)),
    el(
      "section",
      { class: "qa-section", "aria-labelledby": "qa-keywords" },
      el("h3", { id: "qa-keywords" }, "Keywords"),
      keywords.length
        ? el("ul", {}, keywords.map((keyword) => el("li", {}, `${keyword.keyword}: ${keyword.total}`)))
        : el("p", { class: "muted" }, "None of the keywords was said."),
    ),
  );
}

let lastBody = null;

async function refresh() {
  let response;
  try {
    response = await fetch(`/api/calls/${encodeURIComponent(callId)}`, { cache: "no-store" });
  } catch (error) {
    return; // the stream reconnects and triggers the next refresh
  }
  if (response.status === 404) {
    notice.textContent = "The monitor does not hold this call (not seen yet, or older than its window). This page updates if it appears.";
    notice.hidden = false;
    qaPanel.replaceChildren(el("p", { class: "muted" }, "No data."));
    return;
  }
  if (!response.ok) return;
  const body = await response.text();
  if (body === lastBody) return; // nothing changed: keep the page (and any open tooltip) as is
  lastBody = body;
  const detail = JSON.parse(body);
  notice.hidden = true;
  renderFacts(detail);
  renderTranscript(detail);
  renderQa(detail);
  document.body.dataset.loaded = "true";
  if (location.hash && !document.body.dataset.scrolled) {
    const target = document.getElementById(decodeURIComponent(location.hash.slice(1)));
    if (target) target.scrollIntoView({ block: "center" });
    document.body.dataset.scrolled = "true";
  }
}

let pending = null;
function refreshSoon() {
  if (pending) return;
  pending = setTimeout(() => {
    pending = null;
    refresh();
  }, REFRESH_DEBOUNCE_MS);
}

const stream = new EventSource(`/api/stream?call=${encodeURIComponent(callId)}`);
stream.addEventListener("snapshot", refreshSoon);
stream.addEventListener("call", refreshSoon);
stream.addEventListener("evicted", () => {
  notice.textContent = "The monitor no longer holds this call (it left the recent-call window).";
  notice.hidden = false;
});

refresh();
pollHealth();
