//! Node test 4, the reconciler as users run it: the Helm chart (charts/namespace-baseline),
//! two replicas of the reconciler image (`make image`, imported into the node's containerd by
//! node-tests.sh as NSB_RECONCILER_IMAGE), its own namespace walled by the chart's
//! `namespace-baseline-system` baseline (deploy/system-baseline.yaml). The pods must reach the
//! API server through their egress door (the test that the door is right), the kubelet's
//! liveness and readiness probes must pass, one pod leads; when the leader pod is deleted the
//! other takes over and repairs a drift made during the hand-over.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};
use namespace_baseline_cluster_tests::leadership::lease_holder;
use namespace_baseline_cluster_tests::{deny_all_policy_name, wait_recreated, wait_until, wall_of};
use namespace_baseline_core::identity::RECONCILER_NAMESPACE;

use crate::chart::{self, set};
use crate::common::{self, figure, wait_ready};
use crate::pods::{Node, TestPod, no_labels, start_pod};
use crate::{assert_blocked, assert_passed, wait_wire};

const LEASE: &str = "namespace-baseline-reconciler";
const SYSTEM_BASELINE: &str = "namespace-baseline-system";
const POD_SELECTOR: &str = "app.kubernetes.io/name=namespace-baseline-reconciler";

/// The reconciler pods, Ready ones only when `ready`.
async fn reconciler_pods(pods: &Api<Pod>) -> Vec<Pod> {
    pods.list(&ListParams::default().labels(POD_SELECTOR))
        .await
        .map(|list| list.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .collect()
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// When the pod last became Ready.
fn ready_since(pod: &Pod) -> Option<k8s_openapi::jiff::Timestamp> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")?
        .last_transition_time
        .as_ref()
        .map(|t| t.0)
}

fn restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map_or(0, |c| c.iter().map(|c| c.restart_count).sum())
}

#[tokio::test(flavor = "multi_thread")]
async fn n4_chart_two_replicas_walled_probes_leader_handover() {
    let (cluster, names, _) = common::start("n4").await;
    let node = Node::from_env();
    // A walled namespace of this scenario (its own baseline) with a test pod, and an open one.
    let walled_ns = names.namespace("walled");
    let open_ns = names.namespace("open");
    let other_ns = names.namespace("other");
    names
        .create_namespaces(&[open_ns.clone(), other_ns.clone()], &no_labels())
        .await
        .unwrap();
    names
        .create_namespaces(std::slice::from_ref(&walled_ns), &names.walled_labels())
        .await
        .unwrap();
    let walled = start_pod(&cluster.admin, &node, &walled_ns, "server").await;
    let open = start_pod(&cluster.admin, &node, &open_ns, "server").await;
    let other = start_pod(&cluster.admin, &node, &other_ns, "server").await;
    assert_passed(
        "TCP open -> walled before any baseline",
        &open.tcp(&node, &walled.server()).unwrap(),
    );

    // --- install, as a user would --------------------------------------------------------
    let chart::Installed {
        release,
        door_text,
        took: installed,
    } = chart::install(&set(
        "reconciler.logLevel",
        "info\\,namespace_baseline_reconciler=debug\\,namespace_baseline_leader=debug",
    ));
    eprintln!("FIGURE n4: the API door of the test node, as `api-door` prints it:\n{door_text}");
    let pods: Api<Pod> = Api::namespaced(cluster.admin.clone(), RECONCILER_NAMESPACE);
    let leases: Api<Lease> = Api::namespaced(cluster.admin.clone(), RECONCILER_NAMESPACE);

    // Both replicas Ready (readiness probe), one leads.
    let (ready_pods, _) = wait_until("2 reconciler pods Ready", Duration::from_secs(120), || {
        let pods = pods.clone();
        async move {
            let ready: Vec<Pod> = reconciler_pods(&pods)
                .await
                .into_iter()
                .filter(is_ready)
                .collect();
            Ok((ready.len() == 2).then_some(ready))
        }
    })
    .await
    .unwrap_or_else(|error| panic!("{error:#}"));
    let (leader, _) = wait_until("a lease holder", Duration::from_secs(60), || {
        let leases = leases.clone();
        async move { Ok(lease_holder(&leases, LEASE).await) }
    })
    .await
    .unwrap();
    let names_of: Vec<String> = ready_pods.iter().map(ResourceExt::name_any).collect();
    assert!(
        names_of.contains(&leader),
        "lease holder {leader} is not one of the pods {names_of:?}"
    );

    // Its own namespace is walled (the chart's system baseline, applied by the in-cluster
    // reconciler itself: it reached the API server through its door) ...
    let (status, _) = wait_ready(&cluster, SYSTEM_BASELINE, 1, Duration::from_secs(60)).await;
    assert_eq!(
        wall_of(&cluster.admin, SYSTEM_BASELINE)
            .await
            .unwrap()
            .len(),
        2
    );
    // ... and on the wire: from the leader pod's network namespace, the API server through the
    // kubernetes Service (the door) passes, the test server of another namespace does not,
    // while an unwalled pod reaches that server (positive control).
    let leader_pod = ready_pods
        .iter()
        .find(|pod| pod.name_any() == leader)
        .unwrap();
    let reconciler_net = netns_of(&node, leader_pod);
    let api_via_service = reconciler_net.tcp(&node, "10.0.0.1:443").unwrap();
    let to_server = reconciler_net.tcp(&node, &open.server()).unwrap();
    // The API server's own address and port (after the Service's DNAT): the door; the
    // kubelet on the same node address: not in the door, so blocked (the enforcer filters
    // pod-to-node traffic too, so the door is what lets the API traffic through).
    let node_ip = std::env::var("NSB_NODE_IP").expect("NSB_NODE_IP");
    let api_direct = reconciler_net
        .tcp(&node, &format!("{node_ip}:6443"))
        .unwrap();
    let kubelet = reconciler_net
        .tcp(&node, &format!("{node_ip}:10250"))
        .unwrap();
    let kubelet_control = other.tcp(&node, &format!("{node_ip}:10250")).unwrap();
    assert_passed(
        "TCP reconciler pod -> API server on the node (6443, the door)",
        &api_direct,
    );
    assert_passed(
        "TCP unwalled pod -> kubelet on the node (10250)",
        &kubelet_control,
    );
    assert_blocked(
        "TCP reconciler pod -> kubelet on the node (10250, no door)",
        &kubelet,
    );
    let control = other.tcp(&node, &open.server()).unwrap();
    assert_passed(
        "TCP reconciler pod -> kubernetes Service 10.0.0.1:443 (the door)",
        &api_via_service,
    );
    assert_passed("TCP unwalled pod -> the same test server", &control);
    assert_blocked("TCP reconciler pod -> a test server (the wall)", &to_server);

    // The probes pass and keep passing: Ready for 20 s more, no restart, no failed liveness
    // probe, and no failed readiness probe once the pod was Ready (a refused first readiness
    // probe while the server is still binding its port is the kubelet racing the start).
    tokio::time::sleep(Duration::from_secs(20)).await;
    let now: Vec<Pod> = reconciler_pods(&pods).await;
    assert_eq!(now.len(), 2, "two reconciler pods");
    let mut early_readiness = Vec::new();
    let events: Api<Event> = Api::namespaced(cluster.admin.clone(), RECONCILER_NAMESPACE);
    let events = events.list(&ListParams::default()).await.unwrap().items;
    for pod in &now {
        assert!(is_ready(pod), "{} not Ready", pod.name_any());
        assert_eq!(
            restarts(pod),
            0,
            "{} restarted (liveness probe?)",
            pod.name_any()
        );
        let ready_since = ready_since(pod).expect("a Ready condition with its time");
        for event in events.iter().filter(|e| {
            e.reason.as_deref() == Some("Unhealthy")
                && e.involved_object.name.as_deref() == Some(&pod.name_any())
        }) {
            let message = event.message.clone().unwrap_or_default();
            let last = event
                .last_timestamp
                .as_ref()
                .map(|t| t.0)
                .or_else(|| event.event_time.as_ref().map(|t| t.0))
                .expect("an event time");
            assert!(
                message.starts_with("Readiness probe failed") && last <= ready_since,
                "{}: probe failure {message:?} at {last} (Ready since {ready_since})",
                pod.name_any()
            );
            early_readiness.push(format!("{} x{}", pod.name_any(), event.count.unwrap_or(1)));
        }
    }

    // A baseline of this scenario, walled by the in-cluster reconciler; on the wire too.
    common::create_baseline(&cluster, &names.name, common::spec(&names)).await;
    common::wait_wall(
        &cluster,
        &names.name,
        std::slice::from_ref(&walled_ns),
        true,
        Duration::from_secs(10),
    )
    .await;
    wait_wire(
        "the wall of n4 on the wire",
        Duration::from_secs(20),
        true,
        || open.probe(&node, &["tcp", &walled.server(), "300"]),
    )
    .await;

    // --- hand-over: delete the leader pod; a drift made meanwhile is repaired by the other --
    let policies: Api<NetworkPolicy> = Api::namespaced(cluster.admin.clone(), &walled_ns);
    let deny_all = deny_all_policy_name(&names.name);
    let old_uid = policies.get(&deny_all).await.unwrap().uid();
    let deleted_at = Instant::now();
    pods.delete(&leader, &DeleteParams::default())
        .await
        .unwrap();
    policies
        .delete(&deny_all, &DeleteParams::default())
        .await
        .unwrap();
    let (new_leader, took_over) =
        wait_until("another lease holder", Duration::from_secs(60), || {
            let leases = leases.clone();
            let leader = leader.clone();
            async move {
                Ok(lease_holder(&leases, LEASE)
                    .await
                    .filter(|holder| *holder != leader))
            }
        })
        .await
        .unwrap_or_else(|error| panic!("{error:#}"));
    // The lease goes to another live replica: the standby, or the Deployment's replacement
    // pod when it asks first (the deleted leader releases the lease on SIGTERM; whoever
    // acquires it next leads).
    let successor = if names_of.contains(&new_leader) {
        "the standby"
    } else {
        "the replacement pod"
    };
    assert!(
        reconciler_pods(&pods)
            .await
            .iter()
            .any(|pod| pod.name_any() == new_leader),
        "the new leader {new_leader} is not a live reconciler pod"
    );
    let repaired = wait_recreated(&policies, &deny_all, old_uid, Duration::from_secs(60))
        .await
        .unwrap_or_else(|error| panic!("{error:#}"));
    let repaired_after = deleted_at.elapsed().min(repaired + took_over);
    let blocked_again = wait_wire(
        "the repaired wall on the wire",
        Duration::from_secs(20),
        true,
        || open.probe(&node, &["tcp", &walled.server(), "300"]),
    )
    .await;
    // The Deployment replaces the deleted pod; two Ready again.
    wait_until(
        "2 reconciler pods Ready again",
        Duration::from_secs(120),
        || {
            let pods = pods.clone();
            async move {
                Ok((reconciler_pods(&pods)
                    .await
                    .iter()
                    .filter(|pod| is_ready(pod))
                    .count()
                    == 2)
                    .then_some(()))
            }
        },
    )
    .await
    .unwrap_or_else(|error| panic!("{error:#}"));

    figure(
        "n4",
        format!(
            "chart installed (helm --wait) in {:.1} s; 2 replicas Ready, probes passing (readiness refused before Ready: {}), leader {leader}; system baseline Ready ({} namespace); API via the kubernetes Service from the walled pod: {}, direct to 6443: {}; kubelet 10250 on the same node address: {}; a test server: {}",
            installed.as_secs_f64(),
            if early_readiness.is_empty() {
                "none".to_owned()
            } else {
                early_readiness.join(", ")
            },
            status.namespaces,
            api_via_service.result,
            api_direct.result,
            kubelet.result,
            to_server.result
        ),
    );
    figure(
        "n4",
        format!(
            "leader pod deleted: {new_leader} ({successor}) took over after {:.1} s and repaired the deny-all deleted meanwhile {:.1} s after the pod's delete; blocked on the wire {:.0} ms after that",
            took_over.as_secs_f64(),
            repaired_after.as_secs_f64(),
            blocked_again.as_secs_f64() * 1000.0
        ),
    );

    drop(release);
    cluster.remove_all_baselines().await.unwrap();
    names
        .delete_namespaces(&[walled_ns, open_ns, other_ns])
        .await;
}

/// The network namespace of a reconciler pod's container, to probe from (the image has no
/// tools: the probes run `netprobe` from the host in that network namespace).
fn netns_of(node: &Node, pod: &Pod) -> TestPod {
    let container = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .and_then(|c| c.container_id.clone())
        .expect("a container ID")
        .trim_start_matches("containerd://")
        .to_owned();
    TestPod {
        namespace: pod.namespace().unwrap_or_default(),
        name: pod.name_any(),
        ip: pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .unwrap_or_default(),
        pid: node.task_pid(&container).expect("the reconciler's task"),
        tools_container: container,
    }
}
