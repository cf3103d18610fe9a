// The playground page: reads the editors, asks the wasm module (the policy's own code) and
// shows its answers. Every answer is JSON with an `errors` list naming the editor each
// problem belongs to; nothing here decides anything.

import init, { evaluate, inspectCluster, renderWall, toYaml, version } from "./pkg/namespace_baseline_playground.js";

const $ = (id) => document.getElementById(id);

const FIELDS = {
  settings: "settings",
  baselines: "baselines",
  hostError: "host-error",
  objects: "objects",
  request: "request",
  baseline: "wall-baseline",
  namespace: "wall-namespace",
};

const TITLES = {
  allowed: "Allowed",
  denied: "Denied",
  settingsInvalid: "Settings invalid",
  inputError: "Cannot evaluate",
};

let examples = [];

function showStatus(text, isError = false) {
  const status = $("status");
  status.textContent = text;
  status.classList.toggle("failed", isError);
  status.hidden = !text;
}

function call(fn, ...args) {
  try {
    return JSON.parse(fn(...args));
  } catch (error) {
    // The module answers with JSON even for bad input; reaching this is a bug, shown as one.
    return { outcome: "inputError", errors: [{ field: "request", message: `internal error: ${error}` }] };
  }
}

function showErrors(fields, errors) {
  for (const field of fields) {
    const id = FIELDS[field];
    const messages = errors.filter((e) => e.field === field).map((e) => e.message);
    $(`${id}-error`).textContent = messages.join("\n");
    $(id).classList.toggle("invalid", messages.length > 0);
    $(id).setAttribute("aria-invalid", messages.length > 0 ? "true" : "false");
  }
}

function fillList(list, items) {
  list.replaceChildren(...items.map((text) => {
    const item = document.createElement("li");
    item.textContent = text;
    return item;
  }));
}

function runEvaluation() {
  const answer = call(evaluate, $("settings").value, $("baselines").value, $("host-error").value, $("objects").value, $("request").value);
  showErrors(["settings", "baselines", "hostError", "request"], answer.errors ?? []);
  const verdict = $("verdict");
  verdict.dataset.outcome = answer.outcome;
  verdict.dataset.hostCalls = String((answer.baselineReads ?? 0) + (answer.namespaceReads ?? 0) + (answer.networkPolicyReads ?? 0));
  $("verdict-title").textContent = TITLES[answer.outcome] ?? answer.outcome;
  $("summary").textContent = answer.summary?.text ?? "";
  let message = answer.message ?? "";
  const warnings = answer.outcome === "allowed" ? (answer.warnings ?? []) : [];
  if (answer.outcome === "allowed") {
    message = warnings.length === 0 ? "The policy accepts this request."
      : `The policy accepts this request, with ${warnings.length === 1 ? "a warning" : `${warnings.length} warnings`} (kubectl prints each):`;
  }
  if (answer.outcome === "denied") message = `HTTP 403: ${message}`;
  if (answer.outcome === "settingsInvalid") {
    message = `The policy-server would refuse to load the policy with these settings: ${message}`;
  }
  if (answer.outcome === "inputError") message = "Fix the fields marked in red.";
  $("verdict-message").textContent = message;
  fillList($("verdict-warnings"), warnings);
  const notes = [...(answer.notes ?? [])];
  if (answer.outcome === "allowed" || answer.outcome === "denied") {
    const times = (count) => `${count} time${count === 1 ? "" : "s"}`;
    const reads = answer.baselineReads ?? 0;
    notes.push(reads === 0
      ? "The policy did not read the live NamespaceBaselines."
      : `The policy read the live NamespaceBaselines ${times(reads)}.`);
    const namespaceReads = answer.namespaceReads ?? 0;
    if (namespaceReads > 0) notes.push(`The policy read the request's Namespace ${times(namespaceReads)} (the holes check, or whether a new pod's namespace is guarded).`);
    const policyReads = answer.networkPolicyReads ?? 0;
    if (policyReads > 0) notes.push(`The policy looked up ${policyReads === 1 ? "a NetworkPolicy" : `${policyReads} NetworkPolicies`} of the namespace's wall (podsWaitForWall).`);
  }
  fillList($("verdict-notes"), notes);
  return answer;
}

function item(className, badge, text, data) {
  const entry = document.createElement("li");
  if (className) entry.className = className;
  for (const [key, value] of Object.entries(data ?? {})) entry.dataset[key] = String(value);
  if (badge) {
    const mark = document.createElement("span");
    mark.className = "width";
    mark.textContent = badge;
    entry.append(mark);
  }
  entry.append(text);
  return entry;
}

function runCluster() {
  const answer = call(inspectCluster, $("baselines").value, $("objects").value);
  const holes = answer.holes ?? [];
  $("holes-list").replaceChildren(...(holes.length
    ? holes.map((hole) => item("", hole.width,
      `${hole.text} in namespace ${hole.namespace} (walled by NamespaceBaseline ${hole.baseline})`,
      { breach: hole.breach, width: hole.width }))
    : [item("none", "", "None in a walled namespace.")]));
  const checks = answer.dns ?? [];
  $("dns-list").replaceChildren(...(checks.length
    ? checks.map((check) => item("", check.reachable ? "DNSReachable" : "not reachable",
      `NamespaceBaseline ${check.baseline}, Service ${check.service}: ${check.reason}: ${check.message}`,
      { reachable: check.reachable, reason: check.reason }))
    : [item("none", "", "Not checked.")]));
  fillList($("cluster-notes"), answer.notes ?? []);
  return answer;
}

function runWall() {
  let picked = $("wall-baseline").value;
  let answer = call(renderWall, $("baselines").value, picked, $("wall-namespace").value);
  if (picked && !(answer.baselines ?? []).includes(picked)) {
    // The picked baseline is gone from the editor: show the first one instead.
    picked = "";
    answer = call(renderWall, $("baselines").value, picked, $("wall-namespace").value);
  }
  const select = $("wall-baseline");
  const names = answer.baselines ?? [];
  const current = answer.baseline ?? names[0] ?? "";
  select.replaceChildren(...names.map((name) => new Option(name, name, false, name === current)));
  select.disabled = names.length === 0;
  const notes = [...(answer.notes ?? [])];
  if (names.length === 0 && !(answer.errors ?? []).some((e) => e.field === "baselines")) {
    // Nothing is wrong with an empty list (the settings may guard alone): say so plainly.
    notes.unshift("No NamespaceBaseline in the list: add one to the NamespaceBaselines editor to see the wall it installs.");
    showErrors(["baseline", "namespace"], (answer.errors ?? []).filter((e) => e.field !== "baseline"));
  } else {
    showErrors(["baseline", "namespace"], answer.errors ?? []);
  }
  // A baseline the reconciler cannot act on is still one the policy reads (it guards
  // nothing), so its problem is the wall's, shown here; unreadable text is shown next to
  // the baselines editor by the evaluation.
  const baselineProblems = (answer.errors ?? []).filter((e) => e.field === "baselines").map((e) => e.message);
  if (baselineProblems.length) $("wall-baseline-error").textContent = baselineProblems.join("\n");
  $("wall-yaml").textContent = answer.yaml ?? "";
  $("wall-yaml").hidden = !answer.yaml;
  fillList($("wall-notes"), notes);
  return answer;
}

function runAll() {
  const evaluation = runEvaluation();
  runWall();
  const cluster = runCluster();
  // Both read the objects editor: show each problem once.
  const problems = [...(evaluation.errors ?? []), ...(cluster.errors ?? [])].filter((e) => e.field === "objects");
  const unique = problems.filter((e, index) => problems.findIndex((other) => other.message === e.message) === index);
  showErrors(["objects"], unique);
}

function yamlOf(value) {
  if (value === undefined || value === null || (Array.isArray(value) && value.length === 0)) return "";
  const answer = call(toYaml, JSON.stringify(value));
  return answer.text ?? JSON.stringify(value, null, 2);
}

function describeExpectation(expect) {
  if (!expect) return "";
  let text;
  if (expect.settingsValid === false) text = "settings invalid";
  else text = expect.allowed ? "allowed" : "denied";
  if (expect.messageContains) text += ` (message contains “${expect.messageContains}”)`;
  const warnings = expect.warningsContain ?? [];
  if (warnings.length) text += `, with ${warnings.length === 1 ? "a warning" : `${warnings.length} warnings`} (${warnings.map((w) => `“${w}”`).join(", ")})`;
  return `The e2e fixture expects: ${text}.`;
}

function namespaceOf(request) {
  if (!request || typeof request !== "object") return "";
  if (request.kind?.kind === "Namespace") return request.name || request.object?.metadata?.name || "";
  return request.namespace || request.oldObject?.metadata?.namespace || request.object?.metadata?.namespace || "";
}

function loadExample(name) {
  const example = examples.find((e) => e.name === name);
  if (!example) return;
  $("example").value = name;
  $("settings").value = yamlOf(example.settings ?? {});
  $("baselines").value = yamlOf(example.baselines);
  $("host-error").value = example.hostError ?? "";
  $("objects").value = yamlOf([...(example.namespaces ?? []), ...(example.networkPolicies ?? [])]);
  $("request").value = JSON.stringify(example.request ?? {}, null, 2);
  $("example-description").textContent = example.description ?? "";
  $("example-expect").textContent = describeExpectation(example.expect);
  const namespace = namespaceOf(example.request);
  if (namespace) $("wall-namespace").value = namespace;
  $("wall-baseline").value = "";
  if (location.hash !== `#${name}`) history.replaceState(null, "", `#${name}`);
  runAll();
  $("verdict").dataset.example = name;
}

function fillExamples() {
  const select = $("example");
  const groups = new Map();
  for (const example of examples) {
    const family = example.name.startsWith("not-exempt") ? "not-exempt"
      : example.name.startsWith("policy-") ? example.name.split("-").slice(0, 2).join("-")
      : example.name.split("-")[0];
    if (!groups.has(family)) {
      const group = document.createElement("optgroup");
      group.label = family;
      groups.set(family, group);
    }
    groups.get(family).append(new Option(example.name, example.name));
  }
  select.replaceChildren(new Option(`Pick one of ${examples.length} examples…`, ""), ...groups.values());
  select.disabled = false;
}

function debounce(fn, ms) {
  let timer;
  return () => {
    clearTimeout(timer);
    timer = setTimeout(fn, ms);
  };
}

async function loadExamples() {
  try {
    const response = await fetch("examples.json");
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    examples = await response.json();
    fillExamples();
  } catch (error) {
    const select = $("example");
    select.replaceChildren(new Option("no examples", ""));
    $("example-description").textContent = `The examples could not be loaded (${error.message}); the editors still work.`;
  }
}

async function main() {
  try {
    await init();
  } catch (error) {
    showStatus(`The policy module could not be loaded: ${error.message}. Build the page with make playground and serve its directory.`, true);
    document.body.dataset.ready = "failed";
    return;
  }
  $("version").textContent = version();
  await loadExamples();
  const later = debounce(runAll, 250);
  for (const id of ["settings", "baselines", "host-error", "objects", "request"]) $(id).addEventListener("input", later);
  $("wall-namespace").addEventListener("input", debounce(runWall, 250));
  $("wall-baseline").addEventListener("change", runWall);
  $("example").addEventListener("change", (event) => loadExample(event.target.value));
  window.addEventListener("hashchange", () => loadExample(decodeURIComponent(location.hash.slice(1))));
  const fromHash = decodeURIComponent(location.hash.slice(1));
  if (fromHash && examples.some((e) => e.name === fromHash)) loadExample(fromHash);
  else if (examples.length) loadExample(examples.find((e) => e.name === "namespace-remove-guard-label")?.name ?? examples[0].name);
  else runAll();
  showStatus("");
  document.body.dataset.ready = "true";
}

main();
