//! Scenario 17: the Pod rule checked by the API server itself (the chart's
//! `admissionPolicy.pods.inProcess`, docs/design.md "The wall checked in the API server"), with
//! no webhook in the chain: what it decides while the policy-server is down, or absent as here.
//!
//! - **Parity**: every pod fixture of the policy (`e2e-tests/fixtures/*.json` whose request is
//!   on `pods`) is run against the ValidatingAdmissionPolicy and the bindings the chart renders
//!   (`charts/tests/in-process-objects.yaml`, which `charts/check.sh` holds to the chart), on
//!   the real API server, and its verdict compared with the fixture's. A fixture whose verdict
//!   differs must be listed in [`DIFFERENCES`] with the reason, and a listed one must differ:
//!   nothing differs silently, and the list cannot go stale.
//! - **The stale param cache**: a pod created right after its wall may be refused, since the
//!   API server looks the wall up in its informer only (1.36). Measured over
//!   `NSB_S17_ROUNDS` rounds (default 50): how many pods are refused right after their wall,
//!   and how long until a retry is admitted. Every pod created before its wall must be refused.
//! - **What it costs**: 300 dry-run Pod CREATEs each in a walled namespace (through the gate)
//!   and an unguarded one (no binding), interleaved, as s16 measures the webhook's.
//! - **The anchor**: once every binding but the chart's anchor is deleted, a new binding still
//!   finds its walls (the API server's NetworkPolicy informer was not stopped).
//!
//! Each fixture's bindings are confined to its own namespace by one more requirement
//! (`kubernetes.io/metadata.name In [...]`), and its namespace names are made unique to the run
//! (the chart's excluded names alike: `in_process::confined`), so that the fixtures run side by side and no other
//! scenario's pod is ever gated. The anchor binding is never deleted (kubernetes#130887).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use namespace_baseline_cluster_tests::admission::dry_run_create;
use namespace_baseline_cluster_tests::in_process::{
    ChartObjects, NO_PARAMS, confined, delete_bindings,
};
use namespace_baseline_cluster_tests::{Cluster, percentile, repo_root};
use serde_json::{Value, json};

use crate::common::{figure, start};

const NAME_LABEL: &str = "kubernetes.io/metadata.name";
/// How long a new binding may take to be used (the API server refreshes its policies every
/// second) and a retried pod to be admitted.
const TAKES_EFFECT: Duration = Duration::from_secs(10);
const DEFAULT_ROUNDS: usize = 50;
/// Pod CREATEs per class measured, and before them not measured (as s16 does).
const LATENCY_CREATES: usize = 300;
const LATENCY_WARM_UP: usize = 20;

/// The pod fixtures whose in-process verdict differs from the policy's, and why.
const DIFFERENCES: &[(&str, &str)] = &[
    (
        "pods-exempt-break-glass.json",
        "an exempt identity's pod: the API server resolves the binding's param before anything else, and matchResources cannot name users, so the break-glass user waits for the wall like anyone",
    ),
    (
        "pods-reconciler-namespace-other-pod-waits.json",
        "the reconciler's namespace is left out of the bindings by name (its own pod must never wait, and a binding cannot tell it by its ServiceAccount); the policy refuses the other pods there",
    ),
];

/// Fixtures of `pods` that have no Pod CREATE verdict to compare, and why.
const NOT_RUN: &[(&str, &str)] = &[
    (
        "pods-settings-need-context-aware.json",
        "a settings fixture (the policy refuses podsWaitForWall without contextAware): the chart's list has no such setting",
    ),
    (
        "odd-connect-pod-exec.json",
        "a CONNECT of pods/exec: neither gate's rules name it (metadata.yml; the policy's matchConstraints, asserted below: CREATE of pods only)",
    ),
];

/// One fixture of the policy (the fields this scenario reads).
struct Fixture {
    file: String,
    value: Value,
}

impl Fixture {
    fn settings(&self, key: &str) -> bool {
        self.value["settings"][key].as_bool() == Some(true)
    }

    fn list(&self, key: &str) -> Vec<Value> {
        self.value[key].as_array().cloned().unwrap_or_default()
    }

    fn request_namespace(&self) -> &str {
        self.value["request"]["namespace"].as_str().unwrap_or("")
    }

    fn expected_allowed(&self) -> Option<bool> {
        self.value["expect"]["allowed"].as_bool()
    }

    /// The chart entries (baseline, namespaceLabel, allowDNS) a user wanting this fixture's gate
    /// in the API server lists: with the Pod rule on (`podsWaitForWall` and `contextAware`),
    /// every `Enforce` baseline that selects by `namespaceLabel`.
    fn entries(&self) -> Vec<(String, String, bool)> {
        if !(self.settings("contextAware") && self.settings("podsWaitForWall")) {
            return Vec::new();
        }
        self.list("baselines")
            .iter()
            .filter(|baseline| baseline["spec"]["mode"].as_str().unwrap_or("Enforce") == "Enforce")
            .filter_map(|baseline| {
                Some((
                    baseline["metadata"]["name"].as_str()?.to_owned(),
                    baseline["spec"]["namespaceLabel"].as_str()?.to_owned(),
                    baseline["spec"]["allowDNS"].as_bool().unwrap_or(true),
                ))
            })
            .collect()
    }
}

fn pod_fixtures() -> Result<Vec<Fixture>> {
    let dir = repo_root().join("e2e-tests/fixtures");
    let mut fixtures = Vec::new();
    for entry in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.extension().and_then(|extension| extension.to_str()) != Some("json") {
            continue;
        }
        let value: Value = serde_json::from_str(&std::fs::read_to_string(&path)?)
            .with_context(|| format!("parsing {}", path.display()))?;
        let on_pods = value["request"]["resource"]["resource"].as_str() == Some("pods")
            || value["request"]["kind"]["kind"].as_str() == Some("Pod");
        let named_pods = path
            .file_name()
            .and_then(|name| name.to_str())
            .is_some_and(|name| name.starts_with("pods-"));
        if on_pods || named_pods {
            fixtures.push(Fixture {
                file: file_name(&path),
                value,
            });
        }
    }
    fixtures.sort_by(|a, b| a.file.cmp(&b.file));
    Ok(fixtures)
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// A Pod CREATE, dry run, of `pod` (a fixture's object) in `namespace`: `Ok(Ok(()))` admitted,
/// `Ok(Err((code, message)))` refused.
async fn create_pod(
    client: &Client,
    namespace: &str,
    pod: &Value,
) -> Result<std::result::Result<(), (u16, String)>> {
    let mut pod = pod.clone();
    pod["metadata"]["namespace"] = json!(namespace);
    if let Some(object) = pod.as_object_mut() {
        object.remove("status");
    }
    // A fixture's pod names no token volume; the ServiceAccount admission would add one.
    pod["spec"]["automountServiceAccountToken"] = json!(false);
    let pod: Pod = serde_json::from_value(pod).context("a fixture's pod")?;
    dry_run_create(client, namespace, &pod).await
}

async fn create_namespace(cluster: &Cluster, name: &str, labels: &Value) -> Result<()> {
    let mut labels = labels.clone();
    if let Some(labels) = labels.as_object_mut() {
        labels.remove(NAME_LABEL);
    }
    cluster
        .apply(&json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": labels}}))
        .await
        .with_context(|| format!("creating namespace {name}"))?;
    cluster.default_service_account(name).await
}

/// Waits until the binding of namespace `namespace` (no wall there) refuses a pod with the API
/// server's not-found text: the API server uses the bindings created before it too.
async fn wait_binding_used(cluster: &Cluster, namespace: &str) -> Result<Duration> {
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sentinel"},
        "spec": {"containers": [{"name": "c", "image": "registry.invalid/never-pulled"}]}});
    let started = Instant::now();
    loop {
        if let Err((_, message)) = create_pod(&cluster.admin, namespace, &pod).await?
            && message.contains(NO_PARAMS)
        {
            return Ok(started.elapsed());
        }
        if started.elapsed() > TAKES_EFFECT {
            bail!("the binding of {namespace} was not used within {TAKES_EFFECT:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A managed NetworkPolicy of `baseline`'s wall, as the reconciler writes it.
fn wall_part(baseline: &str, part: &str, namespace: &str) -> Value {
    let spec = if part == "default-deny" {
        json!({"podSelector": {}, "policyTypes": ["Ingress", "Egress"]})
    } else {
        json!({"podSelector": {}, "policyTypes": ["Egress"], "egress": [{
            "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}],
            "to": [{"namespaceSelector": {"matchLabels": {NAME_LABEL: "kube-system"}},
                    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}]}]})
    };
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": format!("nsb-{baseline}-{part}"), "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "namespace-baseline",
                       "hedronite.io/baseline": baseline}},
        "spec": spec})
}

fn verdict_text(verdict: &std::result::Result<(), (u16, String)>) -> String {
    match verdict {
        Ok(()) => "admitted".to_owned(),
        Err((code, message)) => format!("refused ({code}: {message})"),
    }
}

#[tokio::test]
async fn s17_in_process_gate_parity_with_the_policy_fixtures() {
    let (cluster, names, _mark) = start("s17").await;
    let chart = ChartObjects::read().expect("the chart's rendering");
    // What the policy's matchConstraints send it: Pod CREATE only (the CONNECT fixture).
    let rules = &chart.policy["spec"]["matchConstraints"]["resourceRules"];
    assert_eq!(
        *rules,
        json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]),
        "the in-process policy's rules changed: review NOT_RUN"
    );
    chart
        .apply_policy_and_anchor(&cluster)
        .await
        .expect("the policy");

    let fixtures = pod_fixtures().expect("the pod fixtures");
    assert!(
        fixtures.len() >= 15,
        "only {} pod fixtures found",
        fixtures.len()
    );
    for (file, _) in DIFFERENCES.iter().chain(NOT_RUN) {
        assert!(
            fixtures.iter().any(|fixture| fixture.file == *file),
            "{file} is listed in s17 but is no pod fixture (renamed or removed?)"
        );
    }
    let mut created_bindings = Vec::new();
    let mut runs = Vec::new();
    for (index, fixture) in fixtures.iter().enumerate() {
        if let Some((_, why)) = NOT_RUN.iter().find(|(file, _)| *file == fixture.file) {
            figure("s17", format!("not run: {}: {why}", fixture.file));
            continue;
        }
        let expected = fixture
            .expected_allowed()
            .unwrap_or_else(|| panic!("{}: no expect.allowed and not in NOT_RUN", fixture.file));
        let prefix = format!("{}-{index}", names.name);
        let rename = |namespace: &str| format!("{prefix}-{namespace}");
        let namespace = rename(fixture.request_namespace());
        let mut labels_of = BTreeMap::new();
        for object in fixture.list("namespaces") {
            let name = object["metadata"]["name"].as_str().unwrap_or("").to_owned();
            labels_of.insert(name, object["metadata"]["labels"].clone());
        }
        labels_of
            .entry(fixture.request_namespace().to_owned())
            .or_insert(json!({}));
        for (name, labels) in &labels_of {
            create_namespace(&cluster, &rename(name), labels)
                .await
                .unwrap_or_else(|error| panic!("{}: {error:#}", fixture.file));
        }
        // The pod's ServiceAccount, which the API server's ServiceAccount admission looks up.
        if let Some(account) = fixture.value["request"]["object"]["spec"]["serviceAccountName"]
            .as_str()
            .filter(|account| *account != "default")
        {
            cluster
                .apply(&json!({"apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": account, "namespace": namespace}}))
                .await
                .unwrap_or_else(|error| panic!("{}: its ServiceAccount: {error:#}", fixture.file));
        }
        for mut policy in fixture.list("networkPolicies") {
            let original = policy["metadata"]["namespace"]
                .as_str()
                .unwrap_or("")
                .to_owned();
            policy["metadata"] = json!({"name": policy["metadata"]["name"],
                "namespace": rename(&original), "labels": policy["metadata"]["labels"]});
            cluster
                .apply(&policy)
                .await
                .unwrap_or_else(|error| panic!("{}: a NetworkPolicy: {error:#}", fixture.file));
        }
        let mut entries = Vec::new();
        for (baseline, label, allow_dns) in fixture.entries() {
            let parts: &[&str] = if allow_dns {
                &["default-deny", "allow-dns"]
            } else {
                &["default-deny"]
            };
            for part in parts {
                let binding = chart
                    .binding(&baseline, part, &label)
                    .unwrap_or_else(|error| panic!("{}: {error:#}", fixture.file));
                let binding = confined(&binding, &prefix, &namespace, &rename);
                created_bindings.push(
                    binding["metadata"]["name"]
                        .as_str()
                        .unwrap_or("")
                        .to_owned(),
                );
                cluster
                    .apply(&binding)
                    .await
                    .unwrap_or_else(|error| panic!("{}: a binding: {error:#}", fixture.file));
                entries.push(format!("{baseline} {part}"));
            }
        }
        runs.push((fixture, namespace, expected, entries));
    }

    // A sentinel binding, created last, in a namespace without a wall: once the API server
    // refuses its pod, it uses every binding created before it (one refresh lists them all).
    let sentinel = names.namespace("sentinel");
    create_namespace(&cluster, &sentinel, &json!({"baseline": "guarded"}))
        .await
        .expect("the sentinel namespace");
    let template = chart
        .binding("guarded", "default-deny", "baseline=guarded")
        .expect("the chart's binding");
    let binding = confined(
        &template,
        &format!("{}-sentinel", names.name),
        &sentinel,
        &|name| format!("{}-{name}", names.name),
    );
    created_bindings.push(
        binding["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_owned(),
    );
    cluster.apply(&binding).await.expect("the sentinel binding");
    let took = wait_binding_used(&cluster, &sentinel)
        .await
        .expect("the bindings used");
    figure(
        "s17",
        format!("bindings used {} ms after their creation", took.as_millis()),
    );

    let mut mismatches = Vec::new();
    let mut listed_but_equal = Vec::new();
    for (fixture, namespace, expected, entries) in &runs {
        let verdict = create_pod(
            &cluster.admin,
            namespace,
            &fixture.value["request"]["object"],
        )
        .await
        .unwrap_or_else(|error| panic!("{}: {error:#}", fixture.file));
        let same = verdict.is_ok() == *expected;
        let listed = DIFFERENCES.iter().find(|(file, _)| *file == fixture.file);
        let policy = if *expected { "admitted" } else { "refused" };
        let line = format!(
            "{}: policy {policy}, in-process {} [bindings: {}]",
            fixture.file,
            verdict_text(&verdict),
            if entries.is_empty() {
                "none".to_owned()
            } else {
                entries.join(", ")
            }
        );
        match (same, listed) {
            (true, None) => figure("s17", format!("same verdict: {line}")),
            (false, Some((_, why))) => {
                figure("s17", format!("DIFFERS (listed): {line}; why: {why}"))
            }
            (false, None) => mismatches.push(line),
            (true, Some(_)) => listed_but_equal.push(line),
        }
    }
    figure(
        "s17",
        format!(
            "{} pod fixtures: {} run, {} not run; {} differ as listed",
            fixtures.len(),
            runs.len(),
            fixtures.len() - runs.len(),
            DIFFERENCES.len()
        ),
    );
    delete_bindings(&cluster.admin, &created_bindings).await;
    assert!(
        mismatches.is_empty(),
        "verdicts that differ from the policy's and are not in DIFFERENCES:\n{}",
        mismatches.join("\n")
    );
    assert!(
        listed_but_equal.is_empty(),
        "fixtures in DIFFERENCES whose verdicts are the same (remove them from the list):\n{}",
        listed_but_equal.join("\n")
    );
}

#[tokio::test]
async fn s17_stale_param_cache_refusals_after_the_wall() {
    let (cluster, names, _mark) = start("s17-stale").await;
    let chart = ChartObjects::read().expect("the chart's rendering");
    chart
        .apply_policy_and_anchor(&cluster)
        .await
        .expect("the policy");
    let rounds: usize = std::env::var("NSB_S17_ROUNDS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(DEFAULT_ROUNDS);
    let labels = json!({"baseline": "guarded", "e2e.hedronite.io/scenario": names.label_value});
    let namespaces: Vec<String> = (0..rounds)
        .map(|round| names.namespace(&format!("r{round}")))
        .collect();
    let mut bindings = Vec::new();
    for part in ["default-deny", "allow-dns"] {
        let mut binding = chart
            .binding("guarded", part, "baseline=guarded")
            .expect("the chart's binding");
        binding["metadata"]["name"] = json!(format!(
            "{}-{}",
            binding["metadata"]["name"].as_str().unwrap_or(""),
            names.name
        ));
        binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
            .as_array_mut()
            .expect("matchExpressions")
            .push(json!({"key": "e2e.hedronite.io/scenario", "operator": "In",
                "values": [names.label_value]}));
        bindings.push(
            binding["metadata"]["name"]
                .as_str()
                .unwrap_or("")
                .to_owned(),
        );
        cluster.apply(&binding).await.expect("a binding");
    }
    for namespace in &namespaces {
        create_namespace(&cluster, namespace, &labels)
            .await
            .expect("a namespace");
    }
    wait_binding_used(&cluster, &namespaces[0])
        .await
        .expect("the bindings used");

    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "web-"},
        "spec": {"containers": [{"name": "c", "image": "registry.invalid/never-pulled"}]}});
    let mut refused_right_after = 0;
    let mut windows_ms = Vec::new();
    // Of the refused ones only: from the refusal's answer to the retry that was admitted.
    let mut refused_for_ms = Vec::new();
    let mut messages = BTreeMap::<String, usize>::new();
    for namespace in &namespaces {
        // Before the wall: refused, every round.
        let before = create_pod(&cluster.admin, namespace, &pod)
            .await
            .expect("a pod");
        assert!(
            before.is_err(),
            "a pod was admitted in {namespace} before its wall existed"
        );
        for part in ["default-deny", "allow-dns"] {
            cluster
                .create(&wall_part("guarded", part, namespace))
                .await
                .expect("a wall part");
        }
        let walled = Instant::now();
        let mut first_refused_at = None;
        loop {
            match create_pod(&cluster.admin, namespace, &pod)
                .await
                .expect("a pod")
            {
                Ok(()) => break,
                Err((_, message)) => {
                    if first_refused_at.is_none() {
                        first_refused_at = Some(Instant::now());
                        refused_right_after += 1;
                        // Grouped by what follows the pod's name.
                        let reason = message
                            .split_once(" is forbidden: ")
                            .map_or(message.as_str(), |(_, reason)| reason)
                            .to_owned();
                        *messages.entry(reason).or_default() += 1;
                    }
                }
            }
            assert!(
                walled.elapsed() < TAKES_EFFECT,
                "a pod of {namespace} was still refused {TAKES_EFFECT:?} after its wall"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        windows_ms.push(walled.elapsed().as_secs_f64() * 1000.0);
        if let Some(refused_at) = first_refused_at {
            refused_for_ms.push(refused_at.elapsed().as_secs_f64() * 1000.0);
        }
    }
    let mut sorted = windows_ms;
    sorted.sort_by(f64::total_cmp);
    figure(
        "s17",
        format!(
            "stale param cache: {refused_right_after} of {rounds} pods created right after their wall (deny-all and DNS door created, answered) were refused; every pod before its wall was refused"
        ),
    );
    figure(
        "s17",
        format!(
            "from the wall's creation (both parts answered) to the first admitted pod (a dry-run Pod CREATE, retried every 2 ms): p50 {:.1} ms, p90 {:.1} ms, max {:.1} ms",
            percentile(&sorted, 50.0),
            percentile(&sorted, 90.0),
            sorted.last().copied().unwrap_or_default()
        ),
    );
    refused_for_ms.sort_by(f64::total_cmp);
    figure(
        "s17",
        format!(
            "the refused ones: from the refusal to the admitted retry: {}",
            refused_for_ms
                .iter()
                .map(|ms| format!("{ms:.1} ms"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    );
    for (message, count) in &messages {
        figure(
            "s17",
            format!("refused right after the wall ({count}x): {message}"),
        );
    }

    // What the gate adds to a Pod CREATE: dry-run creates interleaved between a walled
    // namespace its bindings match and an unguarded one no binding matches.
    let unguarded = names.namespace("unguarded");
    create_namespace(&cluster, &unguarded, &json!({}))
        .await
        .expect("the unguarded namespace");
    let walled = &namespaces[0];
    let mut latencies: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for round in 0..(LATENCY_WARM_UP + LATENCY_CREATES) {
        for (class, namespace) in [walled, &unguarded].into_iter().enumerate() {
            let started = Instant::now();
            let verdict = create_pod(&cluster.admin, namespace, &pod)
                .await
                .expect("a pod");
            let took = started.elapsed().as_secs_f64() * 1000.0;
            assert!(verdict.is_ok(), "{namespace}: {}", verdict_text(&verdict));
            if round >= LATENCY_WARM_UP {
                latencies[class].push(took);
            }
        }
    }
    for samples in &mut latencies {
        samples.sort_by(f64::total_cmp);
    }
    let [gated, open] = &latencies;
    figure(
        "s17",
        format!(
            "dry-run Pod CREATE, {LATENCY_CREATES} each, interleaved: walled namespace through the in-process gate p50 {:.2} ms, p99 {:.2} ms; unguarded namespace (no binding) p50 {:.2} ms, p99 {:.2} ms; added p50 {:.2} ms, p99 {:.2} ms",
            percentile(gated, 50.0),
            percentile(gated, 99.0),
            percentile(open, 50.0),
            percentile(open, 99.0),
            percentile(gated, 50.0) - percentile(open, 50.0),
            percentile(gated, 99.0) - percentile(open, 99.0),
        ),
    );
    delete_bindings(&cluster.admin, &bindings).await;

    // The anchor keeps the API server's NetworkPolicy informer: with every other binding of
    // this scenario deleted (and a refresh passed), a new binding still finds a new wall.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let namespace = names.namespace("after");
    create_namespace(&cluster, &namespace, &json!({"baseline": "guarded"}))
        .await
        .expect("a namespace");
    let binding = confined(
        &chart
            .binding("guarded", "default-deny", "baseline=guarded")
            .expect("the chart's binding"),
        &format!("{}-after", names.name),
        &namespace,
        &|name| format!("{}-{name}", names.name),
    );
    let binding_name = binding["metadata"]["name"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    cluster.apply(&binding).await.expect("a binding");
    wait_binding_used(&cluster, &namespace)
        .await
        .expect("the new binding used");
    cluster
        .create(&wall_part("guarded", "default-deny", &namespace))
        .await
        .expect("the wall");
    let walled = Instant::now();
    loop {
        if create_pod(&cluster.admin, &namespace, &pod)
            .await
            .expect("a pod")
            .is_ok()
        {
            break;
        }
        assert!(
            walled.elapsed() < TAKES_EFFECT,
            "after the other bindings were deleted, the wall of {namespace} was never found: the API server's NetworkPolicy informer stopped (kubernetes#130887)"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    delete_bindings(&cluster.admin, &[binding_name]).await;
    figure(
        "s17",
        format!(
            "with only the anchor left, a new binding found its new wall {} ms after the wall's creation",
            walled.elapsed().as_millis()
        ),
    );
}
