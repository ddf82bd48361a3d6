// Shared helpers of the monitor's pages: DOM building (text only, never HTML strings),
// time formatting, and the health strip.

/** An element with attributes and children; strings become text nodes (never parsed as HTML). */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const pad = (n, width = 2) => String(n).padStart(width, "0");

/** Audio time (ms from the call's first sample) as m:ss.t, or h:mm:ss past an hour. */
export function audioTime(ms) {
  const total = Math.max(0, Math.round(ms));
  const hours = Math.floor(total / 3600000);
  const minutes = Math.floor(total / 60000) % 60;
  const seconds = Math.floor(total / 1000) % 60;
  if (hours) return `${hours}:${pad(minutes)}:${pad(seconds)}`;
  return `${minutes}:${pad(seconds)}.${Math.floor((total % 1000) / 100)}`;
}

/** A duration as h:mm:ss or m:ss. */
export function duration(ms) {
  const total = Math.max(0, Math.floor(ms / 1000));
  const hours = Math.floor(total / 3600);
  const minutes = Math.floor(total / 60) % 60;
  const seconds = total % 60;
  return hours ? `${hours}:${pad(minutes)}:${pad(seconds)}` : `${minutes}:${pad(seconds)}`;
}

/** Epoch ms as a local date and time. */
export function clockTime(epochMs) {
  if (epochMs === null || epochMs === undefined) return "—";
  const d = new Date(epochMs);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

export function channelLabel(channel) {
  return channel.charAt(0).toUpperCase() + channel.slice(1);
}

/** The compliance badge of a call row or QA summary: pass, fail, pending or none. */
export function complianceBadge(passed, hasSummary) {
  if (!hasSummary) return el("span", { class: "badge none" }, "No QA yet");
  if (passed === true) return el("span", { class: "badge pass" }, "Passed");
  if (passed === false) return el("span", { class: "badge fail" }, "Failed");
  return el("span", { class: "badge pending" }, "Pending");
}

export function statusBadge(status) {
  return status === "live"
    ? el("span", { class: "badge live" }, "Live")
    : el("span", { class: "badge ended" }, "Ended");
}

// -- health strip ------------------------------------------------------------------------

// The workers' asr_latency_objective_seconds (health.latency_objective_ms) when they export it.
const DEFAULT_LATENCY_OBJECTIVE_MS = 400;
const LAG_WARNING_RECORDS = 1000;

function setMetric(name, text, state) {
  const dd = document.querySelector(`#health [data-metric="${name}"] dd`);
  if (!dd) return;
  dd.textContent = text;
  dd.className = state || "";
}

function latency(value, configured, objectiveMs) {
  if (!configured) return ["unknown", "unknown"];
  if (value === null || value === undefined) return ["no data", "unknown"];
  const objective = objectiveMs ?? DEFAULT_LATENCY_OBJECTIVE_MS;
  return [`${Math.round(value)} ms`, value > objective ? "warn" : ""];
}

/** Fill the health strip from a ``HealthSnapshot``; unknown values say so. */
export function renderHealth(health) {
  if (!health) return;
  const configured = health.metrics_configured;
  if (!configured) setMetric("workers", "unknown", "unknown");
  else {
    setMetric("workers", `${health.workers_up} of ${health.workers_configured} up`,
      health.workers_up < health.workers_configured ? "warn" : "");
  }
  const lag = health.consumer_lag_records;
  if (lag === null || lag === undefined) setMetric("lag", "unknown", "unknown");
  else setMetric("lag", `${lag.toLocaleString("en")} records`, lag > LAG_WARNING_RECORDS ? "warn" : "");
  const objective = health.latency_objective_ms;
  setMetric("p95_partial", ...latency(health.p95_partial_ms, configured, objective));
  setMetric("p95_final", ...latency(health.p95_final_ms, configured, objective));
  const dlq = health.dlq_per_minute;
  if (dlq === null || dlq === undefined) setMetric("dlq", "unknown", "unknown");
  else setMetric("dlq", `${dlq.toFixed(1)}/min`, dlq > 0 ? "warn" : "");
  const note = document.querySelector("#health .health-note");
  if (note) {
    const window = `last ${Math.round(health.window_ms / 1000)} s`;
    const parts = [configured ? `from the workers' metrics, ${window}` : "no worker metrics configured"];
    if (health.dlq_source === "events") parts.push(`dead letters from events, ${window}`);
    if (health.errors && health.errors.length) parts.push(`unreachable: ${health.errors.join("; ")}`);
    note.textContent = parts.join(" · ");
  }
}

/** Keep the health strip current on a page without its own stream (polls /api/health). */
export function pollHealth(intervalMs = 5000) {
  const refresh = async () => {
    try {
      const response = await fetch("/api/health", { cache: "no-store" });
      if (response.ok) renderHealth((await response.json()).health);
    } catch (error) {
      // The next poll tries again; the strip keeps its last values meanwhile.
    }
  };
  refresh();
  return setInterval(refresh, intervalMs);
}
