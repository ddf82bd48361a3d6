// Recent calls: search by call id, tenant, time range and words said, newest first, in pages.
// The search lives in the page's address (shareable, back/forward work); times in the form are
// local and go to the API as epoch ms.

import { clockTime, complianceBadge, duration, el, pollHealth, statusBadge } from "./common.js";

const form = document.getElementById("search");
const rowsBody = document.getElementById("rows");
const summary = document.getElementById("result-summary");
const pageInfo = document.getElementById("page-info");
const prev = document.getElementById("prev");
const next = document.getElementById("next");
const FIELDS = ["call", "tenant", "from", "to", "q", "page_size"];
const DEFAULT_PAGE_SIZE = "25";

function paramsFromLocation() {
  const params = new URLSearchParams(location.search);
  for (const name of FIELDS) {
    const input = form.elements.namedItem(name);
    if (input && params.has(name)) input.value = params.get(name);
  }
  return Math.max(1, Number(params.get("page")) || 1);
}

function searchParams(page) {
  const params = new URLSearchParams();
  for (const name of FIELDS) {
    const value = form.elements.namedItem(name).value.trim();
    if (value && !(name === "page_size" && value === DEFAULT_PAGE_SIZE)) params.set(name, value);
  }
  if (page > 1) params.set("page", String(page));
  return params;
}

function apiParams(params) {
  const api = new URLSearchParams(params);
  for (const name of ["from", "to"]) {
    if (api.has(name)) {
      const epochMs = new Date(api.get(name)).getTime();
      if (Number.isNaN(epochMs)) api.delete(name);
      else api.set(name, String(epochMs));
    }
  }
  return api;
}

function row(call) {
  const audio = call.status === "live" ? "in progress" : duration(call.audio_ms);
  return el(
    "tr",
    { dataset: { callId: call.call_id } },
    el("td", {}, el("a", { href: `/calls/${encodeURIComponent(call.call_id)}` }, call.call_id)),
    el("td", {}, call.tenant),
    el("td", {}, clockTime(call.started_ms)),
    el("td", { class: "num" }, audio),
    el("td", {}, statusBadge(call.status)),
    el("td", { class: "num" }, String(call.utterances)),
    el("td", {}, complianceBadge(call.compliance_passed, call.qa_revision !== null)),
    el("td", { class: "preview" }, call.preview || "—"),
  );
}

let currentPage = 1;

async function load(page, push) {
  const params = searchParams(page);
  const address = params.toString() ? `?${params}` : location.pathname;
  if (push) history.pushState(null, "", address);
  summary.textContent = "Searching…";
  let result;
  try {
    const response = await fetch(`/api/calls?${apiParams(params)}`, { cache: "no-store" });
    result = await response.json();
    if (!response.ok) {
      summary.textContent = result.error || `Search failed (${response.status}).`;
      return;
    }
  } catch (error) {
    summary.textContent = "The monitor does not answer; try again.";
    return;
  }
  currentPage = result.page;
  rowsBody.replaceChildren(...result.calls.map(row));
  if (!result.calls.length) {
    rowsBody.append(el("tr", {}, el("td", { colspan: 8, class: "muted" }, "No call matches.")));
  }
  const first = result.total ? (result.page - 1) * result.page_size + 1 : 0;
  const last = (result.page - 1) * result.page_size + result.calls.length;
  summary.textContent = `${result.total} call${result.total === 1 ? "" : "s"} found` +
    (result.total ? `, showing ${first}–${last}` : "");
  pageInfo.textContent = `Page ${result.page} of ${result.pages}`;
  prev.disabled = result.page <= 1;
  next.disabled = result.page >= result.pages;
  document.body.dataset.loaded = "true";
}

form.addEventListener("submit", (event) => {
  event.preventDefault();
  load(1, true);
});
form.addEventListener("reset", () => setTimeout(() => load(1, true), 0));
prev.addEventListener("click", () => load(currentPage - 1, true));
next.addEventListener("click", () => load(currentPage + 1, true));
window.addEventListener("popstate", () => load(paramsFromLocation(), false));

load(paramsFromLocation(), false);
pollHealth();
