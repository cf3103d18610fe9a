// The playground page in headless Chromium (Debian's `chromium`), checked against the e2e
// runner: every example (one per e2e fixture) must show the verdict, message and warnings the
// e2e runner got from the built policy.wasm for the same fixture. Also: input errors are
// shown next to their field, the wall renders, the holes and the DNS check of pasted cluster
// objects render, and no console error or page error appears.
//
//   node playground.test.mjs --dist playground/dist --report e2e-report.json \
//     --fixtures e2e-tests/fixtures [--screenshot out.png] [--chromium /usr/bin/chromium]
//
// `make playground-tests` builds the page, runs `e2e-runner --report json` and then this.
// Exits 1 on any failure, including a missing Chromium: this test never skips.

import { readFileSync, readdirSync, existsSync, statSync } from "node:fs";
import { createServer } from "node:http";
import { extname, join, resolve, normalize, sep, basename } from "node:path";
import { parseArgs } from "node:util";

const { values: args } = parseArgs({
  options: {
    dist: { type: "string" },
    report: { type: "string" },
    fixtures: { type: "string" },
    screenshot: { type: "string" },
    chromium: { type: "string", default: process.env.CHROMIUM ?? "/usr/bin/chromium" },
  },
});

function die(message) {
  console.error(`playground-tests: ${message}`);
  process.exit(1);
}

for (const name of ["dist", "report", "fixtures"]) {
  if (!args[name]) die(`--${name} is required`);
}
if (!existsSync(args.chromium)) {
  die(`Chromium not found at ${args.chromium}: install Debian's chromium (apt-get install -y chromium chromium-driver) or pass --chromium / CHROMIUM`);
}
const dist = resolve(args.dist);
if (!existsSync(join(dist, "index.html"))) die(`${dist}/index.html not found: run make playground`);

// Loaded after the checks above so that a missing `npm ci` is reported as such.
let chromium;
try {
  ({ chromium } = await import("playwright-core"));
} catch (error) {
  die(`playwright-core is not installed (cd playground/tests && npm ci): ${error.message}`);
}

const report = JSON.parse(readFileSync(args.report, "utf8"));
const runnerResults = new Map(report.fixtures.map((fixture) => [fixture.name, fixture]));
const fixtureFiles = readdirSync(args.fixtures).filter((f) => f.endsWith(".json")).map((f) => basename(f, ".json")).sort();
const fixtures = new Map(fixtureFiles.map((name) => [name, JSON.parse(readFileSync(join(args.fixtures, `${name}.json`), "utf8"))]));
const examples = JSON.parse(readFileSync(join(dist, "examples.json"), "utf8"));

const failures = [];
const fail = (message) => failures.push(message);

// The examples index is generated at build time: it must be the fixtures as they are now.
const exampleNames = examples.map((e) => e.name).sort();
if (JSON.stringify(exampleNames) !== JSON.stringify(fixtureFiles)) {
  fail(`examples.json is stale: ${exampleNames.length} examples, ${fixtureFiles.length} fixtures (run make playground)`);
}
for (const example of examples) {
  const fixture = fixtures.get(example.name);
  if (fixture && JSON.stringify(fixture.request ?? {}) !== JSON.stringify(example.request)) {
    fail(`examples.json is stale: ${example.name} differs from its fixture (run make playground)`);
  }
}
if (report.fixtures.length !== fixtureFiles.length) {
  fail(`the e2e report has ${report.fixtures.length} fixtures, the directory ${fixtureFiles.length}`);
}

// A static file server for the built page, with the MIME types browsers insist on.
const TYPES = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".mjs": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".json": "application/json",
  ".wasm": "application/wasm",
  ".png": "image/png",
};
const server = createServer((request, response) => {
  const path = decodeURIComponent(new URL(request.url, "http://localhost").pathname);
  let file = normalize(join(dist, path));
  if (file !== dist && !file.startsWith(dist + sep)) {
    response.writeHead(403).end();
    return;
  }
  if (existsSync(file) && statSync(file).isDirectory()) file = join(file, "index.html");
  if (!existsSync(file)) {
    response.writeHead(404).end("not found");
    return;
  }
  response.writeHead(200, { "content-type": TYPES[extname(file)] ?? "application/octet-stream" });
  response.end(readFileSync(file));
});
await new Promise((ready) => server.listen(0, "127.0.0.1", ready));
const base = `http://127.0.0.1:${server.address().port}/`;

// What the page shows for each of the runner's answers.
function pageOutcome(got) {
  if (got === "allow") return "allowed";
  if (got === "reject") return "denied";
  if (got.startsWith("settings invalid")) return "settingsInvalid";
  return `(runner: ${got})`;
}
function fixtureOutcome(expect) {
  if (expect.settingsValid === false) return "settingsInvalid";
  return expect.allowed ? "allowed" : "denied";
}
const TITLES = { allowed: "Allowed", denied: "Denied", settingsInvalid: "Settings invalid", inputError: "Cannot evaluate" };

const browser = await chromium.launch({
  executablePath: args.chromium,
  headless: true,
  // Root in a container: Chromium's sandbox needs user namespaces it may not have.
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
const page = await browser.newPage({ viewport: { width: 1400, height: 1050 } });
const consoleProblems = [];
page.on("console", (message) => {
  if (message.type() === "error") consoleProblems.push(`console error: ${message.text()}`);
  else if (message.type() === "warning") consoleProblems.push(`console warning: ${message.text()}`);
});
page.on("pageerror", (error) => consoleProblems.push(`page error: ${error.message}`));
page.on("requestfailed", (request) => consoleProblems.push(`request failed: ${request.url()} ${request.failure()?.errorText}`));
page.on("response", (response) => {
  if (response.status() >= 400) consoleProblems.push(`HTTP ${response.status()} for ${response.url()}`);
});

const text = (selector) => page.$eval(selector, (element) => element.textContent);
const texts = (selector) => page.$$eval(selector, (list) => list.map((element) => element.textContent));
const attribute = (selector, name) => page.getAttribute(selector, name);

async function pick(name) {
  await page.selectOption("#example", name);
  await page.waitForFunction((wanted) => document.getElementById("verdict").dataset.example === wanted, name, { timeout: 5000 });
}

// Waits until the element's text contains `wanted` (the editors re-evaluate 250 ms after input).
async function waitForText(selector, wanted) {
  try {
    await page.waitForFunction(
      ([selector, wanted]) => document.querySelector(selector)?.textContent.includes(wanted),
      [selector, wanted],
      { timeout: 5000 },
    );
    return true;
  } catch {
    fail(`${selector} never showed ${JSON.stringify(wanted)}; it shows ${JSON.stringify(await text(selector))}`);
    return false;
  }
}

let checked = 0;
try {
  await page.goto(base);
  await page.waitForFunction(() => document.body.dataset.ready, null, { timeout: 30000 });
  if ((await page.evaluate(() => document.body.dataset.ready)) !== "true") {
    throw new Error(`the page did not start: ${await text("#status")}`);
  }
  const options = await page.$$eval("#example option", (list) => list.map((o) => o.value).filter(Boolean));
  if (JSON.stringify([...options].sort()) !== JSON.stringify(fixtureFiles)) {
    fail(`the examples list shows ${options.length} examples, expected the ${fixtureFiles.length} fixtures`);
  }

  // Every example gives the e2e runner's verdict and message.
  for (const name of fixtureFiles) {
    const runner = runnerResults.get(name);
    if (!runner) {
      fail(`${name}: not in the e2e runner's report`);
      continue;
    }
    if (runner.failures.length) fail(`${name}: the e2e runner itself failed it: ${runner.failures.join("; ")}`);
    await pick(name);
    checked += 1;
    const outcome = await attribute("#verdict", "data-outcome");
    const expected = pageOutcome(runner.got);
    if (outcome !== expected) {
      fail(`${name}: the page shows ${outcome}, the e2e runner got ${runner.got} (${runner.message ?? "no message"})`);
      continue;
    }
    if (outcome !== fixtureOutcome(fixtures.get(name).expect)) {
      fail(`${name}: the page shows ${outcome}, the fixture expects ${fixtureOutcome(fixtures.get(name).expect)}`);
    }
    const title = await text("#verdict-title");
    if (title !== TITLES[outcome]) fail(`${name}: the verdict reads ${JSON.stringify(title)}`);
    const message = await text("#verdict-message");
    const fixture = fixtures.get(name);
    if (outcome === "denied") {
      // The runner's message is the policy's; with a failing host capability the policy
      // wraps the host's error in the SDK's words, the page in none.
      const same = fixture.hostError
        ? message.includes(fixture.expect.messageContains) && runner.message.includes(fixture.expect.messageContains)
        : message === `HTTP 403: ${runner.message}`;
      if (!same) fail(`${name}: the page says ${JSON.stringify(message)}, the policy said ${JSON.stringify(runner.message)}`);
    }
    // Warnings: the policy's own; with a failing host capability the policy's carry the
    // host's words around the error, so both must hold what the fixture expects.
    const warnings = await texts("#verdict-warnings li");
    const runnerWarnings = runner.warnings ?? [];
    if (fixture.hostError) {
      const wanted = fixture.expect.warningsContain ?? [];
      const holds = (list) => list.length === wanted.length && wanted.every((w, i) => list[i].includes(w));
      if (!holds(warnings) || !holds(runnerWarnings)) {
        fail(`${name}: the page warns ${JSON.stringify(warnings)}, the policy warned ${JSON.stringify(runnerWarnings)}, the fixture expects ${JSON.stringify(wanted)}`);
      }
    } else if (JSON.stringify(warnings) !== JSON.stringify(runnerWarnings)) {
      fail(`${name}: the page warns ${JSON.stringify(warnings)}, the policy warned ${JSON.stringify(runnerWarnings)}`);
    }
    if (outcome === "settingsInvalid") {
      const shown = await text("#settings-error");
      if (shown !== runner.message) {
        fail(`${name}: next to the settings the page says ${JSON.stringify(shown)}, validate_settings said ${JSON.stringify(runner.message)}`);
      }
    } else {
      for (const field of ["settings", "baselines", "host-error", "objects", "request"]) {
        const shown = await text(`#${field}-error`);
        if (shown) fail(`${name}: an error is shown next to ${field}: ${shown}`);
      }
      const reads = Number(await attribute("#verdict", "data-host-calls"));
      if (reads !== runner.hostCalls) fail(`${name}: the page read the cluster ${reads} times, the policy made ${runner.hostCalls} host calls`);
    }
    const summary = await text("#summary");
    if (!summary) fail(`${name}: no request summary shown`);
    const wall = await text("#wall-yaml");
    const wallWhyNot = (await text("#wall-baseline-error")) + (await text("#wall-namespace-error")) + (await text("#wall-notes"));
    if (!wall && !wallWhyNot) fail(`${name}: the wall panel shows neither a wall nor why not`);
  }

  // Input errors are shown next to their field, never a blank page.
  const reference = "namespace-remove-guard-label";
  await pick(reference);
  await page.fill("#request", '{"request": ');
  if (await waitForText("#request-error", "not valid JSON")) {
    if (await attribute("#verdict", "data-outcome") !== "inputError") fail("bad JSON request: the verdict is not 'Cannot evaluate'");
    if (await attribute("#request", "aria-invalid") !== "true") fail("bad JSON request: the field is not marked invalid");
  }
  await pick(reference);
  await page.fill("#baselines", "metadata: {name: [");
  await waitForText("#baselines-error", "not valid YAML");
  await pick(reference);
  await page.fill("#settings", "guardSelectors: [");
  await waitForText("#settings-error", "not valid YAML");
  await pick(reference);
  await page.fill("#settings", "guardSelectors: [baseline!=guarded]");
  if (await waitForText("#settings-error", "'!=' is not supported")) {
    if (await attribute("#verdict", "data-outcome") !== "settingsInvalid") fail("invalid settings: the verdict is not 'Settings invalid'");
  }
  await pick(reference);
  await page.fill("#settings", "guardSelector: [baseline=guarded]");
  await waitForText("#settings-error", "unknown field `guardSelector`");

  // The wall: the reconciler's two NetworkPolicies, then its answers to changes.
  await pick("ca-owned-policy-delete");
  const wall = await text("#wall-yaml");
  const policies = wall.split("\n").filter((line) => line === "kind: NetworkPolicy").length;
  if (policies !== 2) fail(`the wall of 'guarded' has ${policies} NetworkPolicies, expected 2:\n${wall}`);
  for (const line of ["name: nsb-guarded-default-deny", "name: nsb-guarded-allow-dns", "namespace: team-a", "app.kubernetes.io/managed-by: namespace-baseline", "- Ingress", "port: 53"]) {
    if (!wall.includes(line)) fail(`the wall of 'guarded' lacks ${JSON.stringify(line)}:\n${wall}`);
  }
  await page.fill("#wall-namespace", "Team_A");
  await waitForText("#wall-namespace-error", "is not a namespace name");
  await page.fill("#wall-namespace", "team-b");
  await waitForText("#wall-yaml", "namespace: team-b");
  await page.fill("#baselines", [
    "apiVersion: hedronite.io/v1alpha1", "kind: NamespaceBaseline", "metadata: {name: guarded}", "spec: {namespaceLabel: baseline=guarded}",
    "---",
    "apiVersion: hedronite.io/v1alpha1", "kind: NamespaceBaseline", "metadata: {name: quiet}", "spec: {namespaceLabel: tier, allowDNS: false}",
  ].join("\n"));
  await page.waitForFunction(() => document.querySelectorAll("#wall-baseline option").length === 2, null, { timeout: 5000 })
    .catch(() => fail("the wall's baseline picker does not list the two baselines"));
  await page.selectOption("#wall-baseline", "quiet");
  if (await waitForText("#wall-yaml", "name: nsb-quiet-default-deny")) {
    const quiet = await text("#wall-yaml");
    if (quiet.includes("allow-dns")) fail(`allowDNS: false still renders a DNS door:\n${quiet}`);
  }
  await page.fill("#baselines", "metadata: {name: broken}\nspec: {namespaceLabel: 'a!=b'}");
  await waitForText("#wall-baseline-error", "installs no wall");

  // A holes example shows its warning, and its Namespace in the cluster objects.
  await pick("holes-warn-every-namespace");
  if ((await texts("#verdict-warnings li")).length !== 1) fail("holes-warn-every-namespace: not exactly one warning shown");
  if (!(await page.inputValue("#objects")).includes("baseline: guarded")) {
    fail("holes-warn-every-namespace: the fixture's Namespace is not in the cluster objects editor");
  }

  // The holes of pasted NetworkPolicies in the namespaces a baseline walls.
  const GUARDED = "apiVersion: hedronite.io/v1alpha1\nkind: NamespaceBaseline\nmetadata: {name: guarded}\nspec: {namespaceLabel: baseline=guarded}";
  await page.fill("#baselines", GUARDED);
  await page.fill("#objects", [
    "kind: Namespace", "apiVersion: v1", "metadata: {name: team-a, labels: {baseline: guarded}}",
    "---",
    "kind: Namespace", "apiVersion: v1", "metadata: {name: team-b}",
    "---",
    "kind: NetworkPolicy", "apiVersion: networking.k8s.io/v1", "metadata: {name: open, namespace: team-a}",
    "spec: {podSelector: {}, ingress: [{}, {from: [{podSelector: {matchLabels: {app: lb}}}], ports: [{port: 80}]}]}",
    "---",
    "kind: NetworkPolicy", "apiVersion: networking.k8s.io/v1", "metadata: {name: elsewhere, namespace: team-b}",
    "spec: {podSelector: {}, ingress: [{}]}",
  ].join("\n"));
  if (await waitForText("#holes-list", "NetworkPolicy open ingress rule 0 opens every port to the whole internet in namespace team-a")) {
    const holes = await page.$$eval("#holes-list li", (list) => list.map((li) => [li.dataset.width, li.dataset.breach]));
    if (JSON.stringify(holes) !== JSON.stringify([["World", "true"], ["Pods", "false"]])) {
      fail(`the holes list shows ${JSON.stringify(holes)}, expected a World breach and a narrow Pods hole`);
    }
    if ((await text("#holes-list")).includes("elsewhere")) fail("a policy in an unwalled namespace is listed as a hole");
  }

  // The DNS door against a pasted OpenShift-shaped DNS Service: the port is wrong, then fixed.
  const openshift = (ports) => [
    "apiVersion: hedronite.io/v1alpha1", "kind: NamespaceBaseline", "metadata: {name: openshift}", "spec:",
    "  namespaceLabel: baseline=guarded",
    "  dns: {service: openshift-dns/dns-default, namespace: openshift-dns, podLabels: {dns.operator.openshift.io/daemonset-dns: default}" + ports + "}",
  ].join("\n");
  await page.fill("#objects", [
    "kind: Service", "apiVersion: v1", "metadata: {name: dns-default, namespace: openshift-dns}",
    "---",
    "kind: EndpointSlice", "apiVersion: discovery.k8s.io/v1",
    "metadata: {name: dns-default-x1, namespace: openshift-dns, labels: {kubernetes.io/service-name: dns-default}}",
    "addressType: IPv4",
    "endpoints: [{addresses: [10.128.0.10], conditions: {ready: true}, targetRef: {kind: Pod, namespace: openshift-dns, name: dns-default-abcde}}]",
    "ports: [{name: dns, protocol: UDP, port: 5353}, {name: dns-tcp, protocol: TCP, port: 5353}]",
    "---",
    "kind: Pod", "apiVersion: v1", "metadata: {name: dns-default-abcde, namespace: openshift-dns, labels: {dns.operator.openshift.io/daemonset-dns: default}}",
  ].join("\n"));
  await page.fill("#baselines", openshift(""));
  if (await waitForText("#dns-list", "PortMismatch")) {
    if (await attribute("#dns-list li", "data-reachable") !== "false") fail("a mismatched DNS door is not shown as unreachable");
    await waitForText("#dns-list", "listen on TCP 5353, UDP 5353 but the door opens UDP 53, TCP 53");
  }
  await page.fill("#baselines", openshift(", ports: [{protocol: UDP, port: 5353}, {protocol: TCP, port: 5353}]"));
  if (await waitForText("#dns-list", "EndpointsInsideDoor")) {
    if (await attribute("#dns-list li", "data-reachable") !== "true") fail("a fixed DNS door is not shown as reachable");
  }
  await page.fill("#objects", "kind: Namespace\nmetadata: {name: [a]}");
  await waitForText("#objects-error", "cannot be read");

  // The screenshot for README.md: a denied example with a baseline, hence a wall.
  if (args.screenshot) {
    const shown = "ca-namespace-leaves-live-baseline";
    await pick(shown);
    await page.evaluate(() => { document.activeElement?.blur(); window.scrollTo(0, 0); });
    if (await attribute("#verdict", "data-outcome") !== "denied" || !(await text("#wall-yaml"))) fail(`${shown}: not denied with a wall: no screenshot`);
    else await page.screenshot({ path: args.screenshot });
  }
} catch (error) {
  fail(`the test stopped: ${error.stack ?? error}`);
} finally {
  const version = browser.version();
  await browser.close();
  server.close();
  for (const problem of consoleProblems) fail(problem);
  if (failures.length) {
    console.error(`playground-tests: ${failures.length} failure(s) (Chromium ${version}, ${checked} examples checked):`);
    for (const failure of failures) console.error(`- ${failure}`);
    process.exitCode = 1;
  } else {
    console.log(`playground-tests: ${checked} examples checked in headless Chromium ${version}: every verdict, message and warning is the e2e runner's; input errors, the wall, the holes, the DNS check and the console checked`);
  }
}
