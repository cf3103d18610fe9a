//! n9: the policy-server outage of issue 36, on the real node. Why: the Pod rule's
//! `namespaceSelector` is what keeps the cluster's own pods from waiting on a dead
//! policy-server, and only a live API server, kube-controller-manager and kubelet show what a
//! user meets when every replica is gone while the webhook configurations stay (failurePolicy
//! Fail): which pods still start, which are refused and with what message, and how soon the
//! refused ones come back once it returns.
//!
//! The chain is installed as users install it: Kubewarden from its charts on the node, both
//! ClusterAdmissionPolicies of deploy/admission-policy.yaml applied with the module pulled from
//! the node's registry (`podsWaitForWall` on), active in the `default` PolicyServer, whose
//! webhook configurations the controller made; the reconciler runs and a baseline guards one
//! namespace. Then the outage as it happens in a cluster: the PolicyServer scaled to 0 (its
//! Deployment follows, every policy-server pod goes) and, timed from the instant the last pod
//! is gone:
//! 1. a kube-system Deployment's pod is created and Running; a kube-system DaemonSet's pod is
//!    deleted, re-created by its controller and Running;
//! 2. a Deployment in a namespace labelled `hedronite.io/pod-gate=exempt` runs; a pod in an
//!    unguarded, unlabelled namespace is refused with the shipped selector (the default's
//!    price, docs/design.md), and runs when the Pod rule is scoped to the baselines' label
//!    (`admissionPolicy.pods.scope`: the second test);
//! 3. a pod in a guarded namespace whose wall exists is refused too;
//! 4. a new namespace cannot be created at all (Namespace CREATE fails closed); a namespace
//!    that a baseline created during the outage newly guards gets no wall (the reconciler's
//!    NetworkPolicy write is refused), and its Deployment's pods are refused;
//! 5. the PolicyServer scaled back to 1, behind the same webhook configurations: every
//!    refused Deployment reaches its replica (time from ready to Running, and how many of its
//!    controller's attempts were refused), the new wall exists.
//!
//! Each refusal's message and each step's time are FIGURE lines. The three tests run the same
//! outage: `n9_..._outage` with the chain exactly as deploy/ ships it, `n9_scoped_...` with
//! the Pod rule's namespaceSelector also requiring the label the baselines select by, and
//! `n9_in_process_...` with the chart's `admissionPolicy.pods.inProcess` listing the guarded
//! namespace's baseline (docs/design.md, "The wall checked in the API server"): the API server
//! gates that namespace's pods itself, so its pod is admitted during the outage once its wall
//! exists, while the baseline created during the outage, not listed, is still the webhook's.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Event, Namespace, Pod, ServiceAccount};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use namespace_baseline_cluster_tests::admission::{ChainOptions, dry_run_pod_create};
use namespace_baseline_cluster_tests::in_process::{ChartObjects, delete_bindings};
use namespace_baseline_cluster_tests::kubewarden_stack::ControllerChain;
use namespace_baseline_cluster_tests::{
    AuditEvent, AuditMark, Cluster, SCENARIO_LABEL, Scenario, TEST_MANAGER, reconciler_username,
    wait_until,
};
use namespace_baseline_core::identity::POD_GATE_LABEL;
use serde_json::{Value, json};

use crate::common::{self, figure};
use crate::pods::{Node, no_labels};
use crate::wait_namespace_gone;

/// Generous: a pod on this node runs within seconds; a controller's backoff after the outage
/// may add a minute.
const RUNNING: Duration = Duration::from_secs(120);
const BACK_AFTER_OUTAGE: Duration = Duration::from_secs(300);
/// How the API server begins a refusal when it cannot reach the webhook.
const UNREACHABLE: &str = "failed calling webhook";
/// How many times each refused ReplicaSet is refused before the policy-server comes back:
/// kube-controller-manager's backoff doubles from 5 ms, so 11 refusals take some 10 s and
/// leave the next retry some 10 s away.
const REFUSALS_BEFORE_RETURN: u32 = 11;
/// The identity kube-controller-manager's ReplicaSet controller creates pods as.
const REPLICASET_CONTROLLER: &str = "system:serviceaccount:kube-system:replicaset-controller";

/// The namespaces and objects of the scenario.
struct Bed<'a> {
    cluster: &'a Cluster,
    names: &'a Scenario,
    node: &'a Node,
    /// Labelled `hedronite.io/pod-gate=exempt`: its pods never reach the policy-server.
    exempt: String,
    /// No label: no baseline guards it.
    open: String,
    /// Guarded by the scenario's baseline, its wall in place before the outage.
    walled: String,
    /// Carries the label of `late_baseline`, which is created during the outage.
    late: String,
    late_baseline: String,
    /// In kube-system.
    system_deployment: String,
    daemon_set: String,
    /// The label key the Pod rule's namespaceSelector also requires (`None`: as shipped).
    pod_scope: Option<&'static str>,
    /// The scenario's baseline is listed in the chart's `admissionPolicy.pods.inProcess`.
    in_process: bool,
}

#[tokio::test]
async fn n9_the_cluster_outlives_a_policy_server_outage() {
    outlives_an_outage("n9", None, false).await;
}

#[tokio::test]
async fn n9_scoped_unguarded_pods_never_wait_on_the_policy_server() {
    outlives_an_outage("n9s", Some(SCENARIO_LABEL), false).await;
}

#[tokio::test]
async fn n9_in_process_walled_pods_start_during_the_outage() {
    outlives_an_outage("n9p", None, true).await;
}

async fn outlives_an_outage(scenario: &str, pod_scope: Option<&'static str>, in_process: bool) {
    let (cluster, names, _) = common::start(scenario).await;
    let node = Node::from_env();
    let bed = Bed {
        cluster: &cluster,
        names: &names,
        node: &node,
        exempt: names.namespace("exempt"),
        open: names.namespace("open"),
        walled: names.namespace("walled"),
        late: names.namespace("late"),
        late_baseline: format!("{}-late", names.name),
        system_deployment: format!("{}-system", names.name),
        daemon_set: format!("{}-daemon", names.name),
        pod_scope,
        in_process,
    };
    // The label that takes a namespace out of the gate may be set only by an exempt identity,
    // and the shipped settings exempt nobody (the test's admin is in system:masters, which is
    // no exemption): the platform team labels such a namespace before the policy is in the
    // chain, or as a break-glass identity of exemptUsers. Checked below, with the chain in.
    names
        .create_namespaces(
            std::slice::from_ref(&bed.exempt),
            &BTreeMap::from([(POD_GATE_LABEL.to_owned(), "exempt".to_owned())]),
        )
        .await
        .expect("creating the exempt namespace");
    names
        .create_namespaces(std::slice::from_ref(&bed.open), &no_labels())
        .await
        .expect("creating the open namespace");
    names
        .create_namespaces(std::slice::from_ref(&bed.walled), &names.walled_labels())
        .await
        .expect("creating the walled namespace");
    names
        .create_namespaces(std::slice::from_ref(&bed.late), &names.other_labels())
        .await
        .expect("creating the late-guarded namespace");
    for namespace in [&bed.exempt, &bed.open, &bed.walled, &bed.late] {
        wait_default_service_account(&cluster.admin, namespace).await;
    }
    let _reconciler = cluster
        .start_reconciler(scenario, common::SINGLE)
        .await
        .expect("starting the reconciler");
    common::create_baseline(&cluster, &names.name, common::spec(&names)).await;
    common::wait_wall(
        &cluster,
        &names.name,
        std::slice::from_ref(&bed.walled),
        true,
        Duration::from_secs(10),
    )
    .await;
    cluster
        .apply(&daemon_set(&bed))
        .await
        .expect("creating the kube-system DaemonSet");
    let (daemon_pod, took) = wait_pod_running(
        &cluster.admin,
        "kube-system",
        &bed.daemon_set,
        None,
        Instant::now(),
    )
    .await;
    eprintln!("n9: the DaemonSet's pod {daemon_pod} Running after {took:.1?}");

    // The chart's objects for an inProcess entry naming the scenario's baseline, before the
    // webhook's policies leave its namespaces out.
    let mut in_process_bindings = Vec::new();
    let mut pod_in_process = None;
    if in_process {
        let chart = ChartObjects::read().expect("the chart's in-process objects");
        chart
            .apply_policy_and_anchor(&cluster)
            .await
            .expect("the in-process policy");
        for part in ["default-deny", "allow-dns"] {
            let binding = chart
                .binding_for(&names.name, part, &names.selector())
                .expect("a binding");
            in_process_bindings.push(
                binding["metadata"]["name"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned(),
            );
            cluster.apply(&binding).await.expect("applying a binding");
        }
        // ChainOptions is Copy, with 'static labels: the run's label value, leaked once.
        let value: &'static str = Box::leak(names.label_value.clone().into_boxed_str());
        pod_in_process = Some((SCENARIO_LABEL, value));
    }
    let outcome = cluster
        .with_controller_chain(
            ChainOptions {
                pod_scope,
                pod_in_process,
                ..ChainOptions::default()
            },
            async |chain| {
                before_the_outage(&bed, chain).await;
                outage(&bed, chain, &daemon_pod).await;
            },
        )
        .await;
    for (kind, deleted) in [
        (
            "Deployment",
            Api::<Deployment>::namespaced(cluster.admin.clone(), "kube-system")
                .delete(&bed.system_deployment, &DeleteParams::background())
                .await
                .map(|_| ()),
        ),
        (
            "DaemonSet",
            Api::<DaemonSet>::namespaced(cluster.admin.clone(), "kube-system")
                .delete(&bed.daemon_set, &DeleteParams::background())
                .await
                .map(|_| ()),
        ),
    ] {
        if let Err(error) = deleted {
            eprintln!("!! deleting the kube-system {kind}: {error}");
        }
    }
    delete_bindings(&cluster.admin, &in_process_bindings).await;
    let namespaces = [bed.exempt, bed.open, bed.walled, bed.late];
    names.delete_namespaces(&namespaces).await;
    outcome.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    for namespace in &namespaces {
        wait_namespace_gone(&cluster, namespace, Duration::from_secs(180)).await;
    }
}

/// With the policy-server up: the Pod rule's selector as the design says (kube-system and the
/// exempt namespace never sent, the others sent), and the label that opts out refused to a
/// non-exempt identity.
async fn before_the_outage(bed: &Bed<'_>, chain: &ControllerChain) {
    let admin = &bed.cluster.admin;
    for (namespace, judged) in [
        ("kube-system", false),
        (bed.exempt.as_str(), false),
        (bed.open.as_str(), bed.pod_scope.is_none()),
        (bed.walled.as_str(), !bed.in_process),
    ] {
        let took = chain
            .wait_pods_judged(admin, namespace, judged, Duration::from_secs(30))
            .await
            .unwrap_or_else(|error| panic!("{error:#}"));
        eprintln!(
            "n9: Pod CREATEs in {namespace} {} the policy-server (seen in {took:.1?})",
            if judged { "reach" } else { "never reach" }
        );
    }
    let labelled: Namespace = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": bed.names.namespace("opting-out"),
                     "labels": {POD_GATE_LABEL: "exempt"}},
    }))
    .expect("a Namespace");
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    match Api::<Namespace>::all(admin.clone())
        .create(&dry_run, &labelled)
        .await
    {
        Err(kube::Error::Api(status)) if status.message.contains(POD_GATE_LABEL) => figure(
            "n9",
            format!(
                "before the outage, the test's admin creating a namespace labelled {POD_GATE_LABEL}: {} {}",
                status.code, status.message
            ),
        ),
        other => panic!(
            "a namespace labelled {POD_GATE_LABEL} by a non-exempt identity must be refused: {other:?}"
        ),
    }
}

/// The outage and the recovery (module comment, steps 1 to 5).
async fn outage(bed: &Bed<'_>, chain: &ControllerChain, daemon_pod: &str) {
    let admin = &bed.cluster.admin;
    let configurations_before = webhook_configurations(admin, chain).await;
    let mark = bed.cluster.audit.mark();
    chain
        .set_replicas(0)
        .await
        .expect("scaling the PolicyServer to 0");
    let gone = chain
        .wait_policy_server(0, Duration::from_secs(60))
        .await
        .expect("the policy-server's pods gone");
    let down = Instant::now();
    let at = |what: &str| {
        figure(
            "n9",
            format!("t+{:.1} s: {what}", down.elapsed().as_secs_f64()),
        )
    };
    at(&format!(
        "the PolicyServer scaled to 0: its last pod gone {:.1} s after the scale; the webhook configurations stay",
        gone.as_secs_f64()
    ));
    let statuses = chain.statuses().await.expect("the policies' status");
    figure(
        "n9",
        format!("during the outage, what a user reads: policyStatus {statuses:?}"),
    );

    // 1. The cluster's own pods.
    bed.cluster
        .apply(&system_deployment(bed))
        .await
        .expect("creating the kube-system Deployment");
    let (pod, took) = wait_pod_running(
        admin,
        "kube-system",
        &bed.system_deployment,
        None,
        Instant::now(),
    )
    .await;
    at(&format!(
        "step 1: kube-system Deployment created, its pod {pod} Running {:.1} s later",
        took.as_secs_f64()
    ));
    let deleted = Instant::now();
    Api::<Pod>::namespaced(admin.clone(), "kube-system")
        .delete(daemon_pod, &DeleteParams::default())
        .await
        .expect("deleting the DaemonSet's pod");
    let (pod, took) = wait_pod_running(
        admin,
        "kube-system",
        &bed.daemon_set,
        Some(daemon_pod),
        deleted,
    )
    .await;
    at(&format!(
        "step 1: kube-system DaemonSet's pod deleted, re-created as {pod} and Running {:.1} s after the delete",
        took.as_secs_f64()
    ));

    // 2. The opted-out namespace runs; an unguarded one is refused as shipped, runs scoped.
    let (pod, took) = app_running(bed, &bed.exempt).await;
    at(&format!(
        "step 2: Deployment in {POD_GATE_LABEL}=exempt namespace: its pod {pod} Running {:.1} s after the create",
        took.as_secs_f64()
    ));
    if let Some(key) = bed.pod_scope {
        let (pod, took) = app_running(bed, &bed.open).await;
        at(&format!(
            "step 2: Deployment in the unguarded namespace (no {key} label: outside the Pod rule's scope): its pod {pod} Running {:.1} s after the create",
            took.as_secs_f64()
        ));
    } else {
        let refused = refused_pod_create(admin, chain, &bed.open).await;
        at(&format!(
            "step 2: pod in the unguarded, unlabelled namespace refused (the shipped selector's price): {refused}"
        ));
    }

    // 3. A guarded namespace whose wall exists: it reaches the dead server too, unless the
    // API server gates it (inProcess): then its pod runs.
    if bed.in_process {
        let (pod, took) = app_running(bed, &bed.walled).await;
        at(&format!(
            "step 3: Deployment in the guarded namespace whose wall exists, gated by the API server (inProcess): its pod {pod} Running {:.1} s after the create",
            took.as_secs_f64()
        ));
    } else {
        let refused = refused_pod_create(admin, chain, &bed.walled).await;
        at(&format!(
            "step 3: pod in the guarded namespace whose wall exists refused: {refused}"
        ));
    }

    // 4. No new namespace at all; a newly guarded one gets no wall and no pod.
    let new_namespace: Namespace = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": bed.names.namespace("new"), "labels": bed.names.walled_labels()},
    }))
    .expect("a Namespace");
    match Api::<Namespace>::all(admin.clone())
        .create(&PostParams::default(), &new_namespace)
        .await
    {
        Err(kube::Error::Api(status)) if status.message.contains(UNREACHABLE) => at(&format!(
            "step 4: a new guarded Namespace's CREATE refused (the namespace-baseline policy, fail closed): {} {}",
            status.code, status.message
        )),
        other => panic!("a Namespace CREATE during the outage must fail closed: {other:?}"),
    }
    let late_label = bed.names.other_labels();
    let (key, value) = late_label.iter().next().expect("one label");
    common::create_baseline(
        bed.cluster,
        &bed.late_baseline,
        json!({"namespaceLabel": format!("{key}={value}")}),
    )
    .await;
    let refused_wall = wait_refused_wall_write(bed, mark).await;
    at(&format!(
        "step 4: baseline {} created, now guarding {}: the reconciler's wall write refused ({refused_wall}), no wall",
        bed.late_baseline, bed.late
    ));
    let wall_missing = common::check_wall(
        bed.cluster,
        &bed.late_baseline,
        std::slice::from_ref(&bed.late),
        true,
    )
    .await;
    assert!(
        wall_missing.is_err(),
        "{}'s wall exists during the outage: the NetworkPolicy writes were not refused",
        bed.late
    );

    // The refused namespaces' Deployments, last, so that their controllers' backoff grows
    // over the end of the outage only (a longer outage: a longer first retry after it).
    let mut refused_apps: Vec<&String> = if bed.pod_scope.is_some() {
        vec![&bed.walled, &bed.late]
    } else {
        vec![&bed.open, &bed.walled, &bed.late]
    };
    if bed.in_process {
        refused_apps.retain(|namespace| **namespace != bed.walled);
    }
    for &namespace in &refused_apps {
        bed.cluster
            .apply(&app(bed, namespace))
            .await
            .unwrap_or_else(|error| panic!("creating the Deployment of {namespace}: {error:#}"));
    }
    for &namespace in &refused_apps {
        let message = wait_failed_create(admin, namespace).await;
        assert!(
            message.contains(UNREACHABLE)
                && message.contains(&chain.policy_for("", "pods").webhook_name()),
            "{namespace}: FailedCreate not the unreachable pod webhook's: {message}"
        );
        at(&format!(
            "step {}: ReplicaSet of {namespace} FailedCreate: {message}",
            if *namespace == bed.late {
                4
            } else if *namespace == bed.walled {
                3
            } else {
                2
            }
        ));
    }
    // An outage of some seconds, not a blink: each ReplicaSet's backoff grows with every
    // refusal (kube-controller-manager's 5 ms doubling), so the first retry after the
    // policy-server is back comes as late as the outage was long.
    wait_refused_creates(bed, mark, &refused_apps).await;
    at(&format!(
        "each of their ReplicaSets refused {REFUSALS_BEFORE_RETURN} times (its next retry {:.0} s or more away)",
        0.005 * f64::from(1u32 << REFUSALS_BEFORE_RETURN)
    ));
    let late_status = bed
        .cluster
        .baselines()
        .get(&bed.late_baseline)
        .await
        .expect("reading the late baseline")
        .status
        .map(|status| {
            status
                .conditions
                .iter()
                .map(|c| format!("{}={} {}: {}", c.type_, c.status, c.reason, c.message))
                .collect::<Vec<_>>()
                .join("; ")
        });
    figure(
        "n9",
        format!(
            "during the outage, {}'s conditions: {}",
            bed.late_baseline,
            late_status.unwrap_or_default()
        ),
    );

    // 5. Back: the same configurations, the PolicyServer scaled back.
    chain
        .set_replicas(1)
        .await
        .expect("scaling the PolicyServer back to 1");
    let ready_in = chain
        .wait_policy_server(1, Duration::from_secs(120))
        .await
        .expect("the policy-server back");
    let ready = Instant::now();
    let ready_at = Timestamp::now();
    at(&format!(
        "step 5: the PolicyServer scaled back to 1, its pod ready {:.2} s later: the outage lasted {:.1} s",
        ready_in.as_secs_f64(),
        down.elapsed().as_secs_f64()
    ));
    assert_eq!(
        webhook_configurations(admin, chain).await,
        configurations_before,
        "the webhook configurations changed over the outage"
    );
    let pods_back = futures::future::join_all(refused_apps.iter().map(|namespace| async move {
        let (pod, took) =
            wait_pod_running_for(admin, namespace, "app", None, ready, BACK_AFTER_OUTAGE).await;
        (*namespace, pod, took)
    }));
    let wall_back = async {
        common::wait_wall(
            bed.cluster,
            &bed.late_baseline,
            std::slice::from_ref(&bed.late),
            true,
            BACK_AFTER_OUTAGE,
        )
        .await;
        ready.elapsed()
    };
    let (pods_back, wall_back) = futures::join!(pods_back, wall_back);
    figure(
        "n9",
        format!(
            "step 5: the wall of {} in place {:.1} s after the policy-server was ready",
            bed.late,
            wall_back.as_secs_f64()
        ),
    );
    let requests = bed
        .cluster
        .audit
        .all_requests_since(mark)
        .expect("the node's audit log");
    for (namespace, pod, took) in pods_back {
        let creates = ControllerPodCreates::of(&requests, namespace, ready_at);
        figure(
            "n9",
            format!(
                "step 5: {namespace}'s pod {pod} Running {:.1} s after the policy-server was ready; its ReplicaSet's Pod CREATEs: {} refused during the outage, {} refused after it, {} admitted ({:.1} s after ready)",
                took.as_secs_f64(),
                creates.refused_during,
                creates.refused_after,
                creates.admitted,
                creates.first_admitted_after.unwrap_or(f64::NAN)
            ),
        );
        assert_eq!(
            creates.admitted, 1,
            "{namespace}: one pod admitted, no more"
        );
        assert!(creates.refused_during >= 1, "{namespace}: {creates:?}");
        if namespace != &bed.late {
            // Its wall exists or none is owed: the first retry after the outage is admitted.
            assert_eq!(
                creates.refused_after, 0,
                "{namespace}: refused after the policy-server was back"
            );
        }
    }
    // Nothing lost: every Deployment has its replica, the old wall is intact too.
    for namespace in [&bed.exempt, &bed.open, &bed.walled, &bed.late] {
        wait_deployment_ready(admin, namespace).await;
    }
    common::check_wall(
        bed.cluster,
        &bed.names.name,
        std::slice::from_ref(&bed.walled),
        true,
    )
    .await
    .expect("the wall of the guarded namespace, after the outage");
}

/// Creates the `app` Deployment in `namespace` and waits for its pod to run: the pod's name
/// and how long after the create.
async fn app_running(bed: &Bed<'_>, namespace: &str) -> (String, Duration) {
    bed.cluster
        .apply(&app(bed, namespace))
        .await
        .unwrap_or_else(|error| panic!("creating the Deployment of {namespace}: {error:#}"));
    wait_pod_running(&bed.cluster.admin, namespace, "app", None, Instant::now()).await
}

/// A dry-run Pod CREATE in `namespace`, which must be refused because the pods' webhook is
/// unreachable: `code message`.
async fn refused_pod_create(client: &Client, chain: &ControllerChain, namespace: &str) -> String {
    let webhook = chain.policy_for("", "pods").webhook_name();
    match dry_run_pod_create(client, namespace, "during-the-outage")
        .await
        .expect("a Pod CREATE")
    {
        Err((code, message)) if message.contains(UNREACHABLE) && message.contains(&webhook) => {
            format!("{code} {message}")
        }
        other => panic!("a pod in {namespace} during the outage: {other:?}"),
    }
}

/// The `resourceVersion` of each of the chain's webhook configurations.
async fn webhook_configurations(client: &Client, chain: &ControllerChain) -> Vec<Option<String>> {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let mut versions = Vec::new();
    for policy in &chain.policies {
        let configuration = api
            .get(&policy.unique_name())
            .await
            .unwrap_or_else(|error| panic!("reading {}: {error}", policy.unique_name()));
        versions.push(configuration.metadata.resource_version);
    }
    versions
}

/// Waits until the reconciler's write of the late baseline's wall is refused (its audit
/// event since `mark`); returns it described.
async fn wait_refused_wall_write(bed: &Bed<'_>, mark: AuditMark) -> String {
    let reconciler = reconciler_username();
    wait_until(
        &format!("the reconciler's write of {}'s wall refused", bed.late),
        Duration::from_secs(30),
        || {
            let events = bed
                .cluster
                .audit
                .requests_since(mark, &reconciler)
                .expect("the node's audit log");
            let refused = events
                .iter()
                .find(|event| {
                    event.is_write()
                        && event.resource() == "networkpolicies"
                        && event
                            .object_ref
                            .as_ref()
                            .and_then(|r| r.namespace.as_deref())
                            == Some(bed.late.as_str())
                        && event.code().is_some_and(|code| code >= 500)
                })
                .map(AuditEvent::describe);
            async move { Ok(refused) }
        },
    )
    .await
    .unwrap_or_else(|error| panic!("{error:#}"))
    .0
}

/// Waits until each namespace's ReplicaSet had [`REFUSALS_BEFORE_RETURN`] Pod CREATEs
/// refused since `mark` (the audit log).
async fn wait_refused_creates(bed: &Bed<'_>, mark: AuditMark, namespaces: &[&String]) {
    wait_until(
        &format!("{REFUSALS_BEFORE_RETURN} refused Pod CREATEs of each ReplicaSet"),
        Duration::from_secs(120),
        || {
            let requests = bed
                .cluster
                .audit
                .all_requests_since(mark)
                .expect("the node's audit log");
            // Every refusal so far is one during the outage.
            let done = namespaces.iter().all(|namespace| {
                ControllerPodCreates::of(&requests, namespace, Timestamp::MAX).refused_during
                    >= REFUSALS_BEFORE_RETURN as usize
            });
            async move { Ok(done.then_some(())) }
        },
    )
    .await
    .unwrap_or_else(|error| panic!("{error:#}"));
}

/// Waits until a test namespace's Deployment `app` reports its one replica ready.
async fn wait_deployment_ready(client: &Client, namespace: &str) {
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    wait_until(
        &format!("the Deployment of {namespace} with its replica ready"),
        RUNNING,
        || {
            let api = api.clone();
            async move {
                let status = api.get("app").await?.status.unwrap_or_default();
                Ok((status.ready_replicas == Some(1)).then_some(()))
            }
        },
    )
    .await
    .unwrap_or_else(|error| panic!("{error:#}"));
}

/// The ReplicaSet controller's Pod CREATEs in one namespace, from the audit log.
#[derive(Debug)]
struct ControllerPodCreates {
    /// Refused before the policy-server was ready again.
    refused_during: usize,
    /// Refused after (the gate, while the namespace's wall is missing).
    refused_after: usize,
    admitted: usize,
    /// Seconds from ready to the API server receiving the first admitted one.
    first_admitted_after: Option<f64>,
}

impl ControllerPodCreates {
    fn of(requests: &[AuditEvent], namespace: &str, ready_at: Timestamp) -> Self {
        let mut creates = Self {
            refused_during: 0,
            refused_after: 0,
            admitted: 0,
            first_admitted_after: None,
        };
        for event in requests.iter().filter(|event| {
            event.verb == "create"
                && event.resource() == "pods"
                && event.subresource().is_none()
                && event.user.username == REPLICASET_CONTROLLER
                && event
                    .object_ref
                    .as_ref()
                    .and_then(|r| r.namespace.as_deref())
                    == Some(namespace)
        }) {
            let received = event.received_at().expect("an audit event's time");
            if event.code() == Some(201) {
                creates.admitted += 1;
                let after = received.duration_since(ready_at).as_secs_f64();
                creates.first_admitted_after = Some(
                    creates
                        .first_admitted_after
                        .map_or(after, |first| first.min(after)),
                );
            } else if received < ready_at {
                creates.refused_during += 1;
            } else {
                creates.refused_after += 1;
            }
        }
        creates
    }
}

/// The message of the newest FailedCreate Event of a ReplicaSet in `namespace`.
async fn wait_failed_create(client: &Client, namespace: &str) -> String {
    wait_until(
        &format!("a FailedCreate Event in {namespace}"),
        Duration::from_secs(60),
        || newest_failed_create(client, namespace),
    )
    .await
    .unwrap_or_else(|error| panic!("{error:#}"))
    .0
}

/// The message of the newest FailedCreate Event of a ReplicaSet in `namespace`, if any.
async fn newest_failed_create(client: &Client, namespace: &str) -> anyhow::Result<Option<String>> {
    let api: Api<Event> = Api::namespaced(client.clone(), namespace);
    let params = ListParams::default().fields("reason=FailedCreate,involvedObject.kind=ReplicaSet");
    let mut events = api.list(&params).await?.items;
    events.sort_by_key(|event| event.last_timestamp.clone().map(|t| t.0));
    Ok(events.pop().and_then(|event| event.message))
}

/// Waits until a pod labelled `app=<app>` in `namespace`, other than `replacing` (a name),
/// is Running; its name and the time since `since`.
async fn wait_pod_running(
    client: &Client,
    namespace: &str,
    app: &str,
    replacing: Option<&str>,
    since: Instant,
) -> (String, Duration) {
    wait_pod_running_for(client, namespace, app, replacing, since, RUNNING).await
}

async fn wait_pod_running_for(
    client: &Client,
    namespace: &str,
    app: &str,
    replacing: Option<&str>,
    since: Instant,
    timeout: Duration,
) -> (String, Duration) {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let params = ListParams::default().labels(&format!("app={app}"));
    let found = wait_until(
        &format!("a pod of {app} in {namespace} Running"),
        timeout.saturating_sub(since.elapsed()),
        || {
            let api = api.clone();
            let params = params.clone();
            async move {
                let pods = api.list(&params).await?.items;
                Ok(pods.into_iter().find_map(|pod| {
                    let name = pod.metadata.name?;
                    let running = pod.metadata.deletion_timestamp.is_none()
                        && pod.status.and_then(|s| s.phase).as_deref() == Some("Running");
                    (running && replacing != Some(name.as_str())).then_some(name)
                }))
            }
        },
    )
    .await;
    match found {
        Ok((name, _)) => (name, since.elapsed()),
        Err(error) => {
            // Why, when its controller could not create it.
            let refused = newest_failed_create(client, namespace).await;
            panic!("{error:#}; the newest FailedCreate in {namespace}: {refused:?}")
        }
    }
}

/// Waits until the `default` ServiceAccount exists in `namespace` (kube-controller-manager
/// makes it; a Pod CREATE without it is refused before any webhook).
async fn wait_default_service_account(client: &Client, namespace: &str) {
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    wait_until(
        &format!("the default ServiceAccount of {namespace}"),
        Duration::from_secs(60),
        || {
            let api = api.clone();
            async move { Ok(api.get_opt("default").await?.map(|_| ())) }
        },
    )
    .await
    .unwrap_or_else(|error| panic!("{error:#}"));
}

/// A pod that only sleeps, labelled `app=<app>`.
fn sleeper(node: &Node, app: &str) -> Value {
    json!({
        "metadata": {"labels": {"app": app}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": false,
            "containers": [{
                "name": "sleeper",
                "image": node.tools_image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["/bin/sh", "-c", "trap 'exit 0' TERM; sleep 2147483647 & wait"]
            }]
        }
    })
}

/// One replica of [`sleeper`] named `name` in `namespace`.
fn deployment(node: &Node, namespace: &str, name: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"app.kubernetes.io/managed-by": TEST_MANAGER}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": sleeper(node, name)
        }
    })
}

/// The Deployment `app` of a test namespace.
fn app(bed: &Bed<'_>, namespace: &str) -> Value {
    deployment(bed.node, namespace, "app")
}

/// The kube-system Deployment created during the outage.
fn system_deployment(bed: &Bed<'_>) -> Value {
    deployment(bed.node, "kube-system", &bed.system_deployment)
}

/// A kube-system DaemonSet (the node runs none of its own: kube-proxy and kube-router are
/// processes here), standing for a network plugin's.
fn daemon_set(bed: &Bed<'_>) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": bed.daemon_set, "namespace": "kube-system",
                     "labels": {"app.kubernetes.io/managed-by": TEST_MANAGER}},
        "spec": {
            "selector": {"matchLabels": {"app": bed.daemon_set}},
            "template": sleeper(bed.node, &bed.daemon_set)
        }
    })
}
