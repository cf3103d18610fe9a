//! Scenario 11: the doors and the holes, on the real API server.
//!
//! - A DNS door whose ports miss the DNS Service's endpoints (OpenShift-shaped: the pods
//!   listen on 5353): `DNSReachable=False`, reason `PortMismatch`, an Event; the wall is
//!   installed anyway. Fixing the door's ports turns it `True`.
//! - A NodeLocal-style door: an ipBlock next to the DNS pods, in the installed policy.
//! - A hole opened (another policy with `ingress: [{}]` in a walled namespace) and closed:
//!   `Sealed`, `status.holes`, a `HoleOpened` Event and the `holes` metric follow.
//! - Drift repairs that tell the truth: a deleted deny-all re-created three times counts 3
//!   repairs (metric, status) with `DriftRepaired` Events naming the deletion.

use std::time::Duration;

use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use namespace_baseline_cluster_tests::{
    Cluster, condition, deny_all_policy_name, dns_policy_name, get_policy, spec_json, wait_until,
};
use serde_json::json;

use crate::common::{
    SINGLE, assert_rbac_was_enough, create_baseline, figure, namespaces, patch_spec, spec, start,
    wait_wall,
};

/// Waits (10 s) for the baseline's condition `type_` to have `status` (and `reason` if
/// given): its reason and message.
async fn wait_condition(
    cluster: &Cluster,
    baseline: &str,
    type_: &str,
    status: &str,
    reason: Option<&str>,
) -> (String, String) {
    let (reason, message, _) = cluster
        .wait_condition(baseline, type_, status, reason, Duration::from_secs(10))
        .await
        .unwrap_or_else(|error| panic!("{error:#}"));
    (reason, message)
}

/// A DNS Service of the test's own in kube-system (the reconciler's DNS namespace): one pod
/// labelled `app=<name>`, its endpoint listening on `port` (UDP and TCP).
async fn dns_service(cluster: &Cluster, name: &str, port: u16) {
    let objects = [
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": name, "namespace": "kube-system"},
               "spec": {"selector": {"app": name}, "ports": [
                   {"name": "dns", "protocol": "UDP", "port": 53, "targetPort": port},
                   {"name": "dns-tcp", "protocol": "TCP", "port": 53, "targetPort": port}]}}),
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": format!("{name}-pod"), "namespace": "kube-system", "labels": {"app": name}},
               "spec": {"nodeName": "no-such-node", "containers": [{"name": "dns", "image": "dns:stand-in"}]}}),
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
               "metadata": {"name": format!("{name}-x"), "namespace": "kube-system",
                            "labels": {"kubernetes.io/service-name": name}},
               "addressType": "IPv4",
               "endpoints": [{"addresses": ["10.0.0.54"], "conditions": {"ready": true},
                              "targetRef": {"kind": "Pod", "namespace": "kube-system", "name": format!("{name}-pod")}}],
               "ports": [{"name": "dns", "protocol": "UDP", "port": port}, {"name": "dns-tcp", "protocol": "TCP", "port": port}]}),
    ];
    for object in objects {
        cluster
            .apply(&object)
            .await
            .unwrap_or_else(|error| panic!("{error:#}"));
    }
}

#[tokio::test]
async fn s11_dns_door_checked_against_the_endpoints() {
    let (cluster, names, mark) = start("s11-dns").await;
    let (walled, _) = namespaces(&names, 2, 0).await;
    let mut reconciler = cluster.start_reconciler(&names.name, SINGLE).await.unwrap();
    let service = format!("{}-dns", names.name);
    dns_service(&cluster, &service, 5353).await;

    // The door opens 53; the endpoints listen on 5353.
    let baseline = names.name.clone();
    let door = json!({"service": format!("kube-system/{service}"), "podLabels": {"app": service}});
    create_baseline(
        &cluster,
        &baseline,
        json!({"namespaceLabel": names.selector(), "dns": door}),
    )
    .await;
    // The wall, with this door: the DNS pods of the test's Service, on 53.
    let dns = dns_policy_name(&baseline);
    wait_until(
        "the wall with the test's DNS door",
        Duration::from_secs(10),
        || async {
            let mut found = 0;
            for namespace in &walled {
                let door = get_policy(&cluster.admin, namespace, &dns).await?;
                let deny =
                    get_policy(&cluster.admin, namespace, &deny_all_policy_name(&baseline)).await?;
                if deny.is_some()
                    && door.is_some_and(|door| {
                        spec_json(&door)["egress"][0]["to"][0]["podSelector"]["matchLabels"]["app"]
                            == service.as_str()
                    })
                {
                    found += 1;
                }
            }
            Ok((found == walled.len()).then_some(()))
        },
    )
    .await
    .unwrap();
    let (_, message) = wait_condition(
        &cluster,
        &baseline,
        "DNSReachable",
        "False",
        Some("PortMismatch"),
    )
    .await;
    assert!(
        message.contains("listen on TCP 5353, UDP 5353 but the door opens UDP 53, TCP 53"),
        "{message}"
    );
    let (ready, _, _) = condition(&cluster.status(&baseline).await.unwrap(), "Ready").unwrap();
    assert_eq!(ready, "True", "a report, never a block");
    let (notes, _) = wait_until("a DNSUnreachable Event", Duration::from_secs(5), || async {
        Ok(Some(cluster.events(&baseline, "DNSUnreachable").await?)
            .filter(|notes| !notes.is_empty()))
    })
    .await
    .unwrap();
    figure(
        "s11",
        format!(
            "OpenShift-shaped DNS, door on 53: DNSReachable=False PortMismatch: {message}; Event: {notes:?}"
        ),
    );

    // The door fixed: ports 5353.
    let mut fixed = door.clone();
    fixed["ports"] = json!([{"protocol": "UDP", "port": 5353}, {"protocol": "TCP", "port": 5353}]);
    patch_spec(&cluster, &baseline, json!({"dns": fixed})).await;
    let (reason, message) = wait_condition(&cluster, &baseline, "DNSReachable", "True", None).await;
    assert_eq!(reason, "EndpointsInsideDoor");
    let policy = get_policy(&cluster.admin, &walled[0], &dns_policy_name(&baseline))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        spec_json(&policy)["egress"][0]["ports"],
        json!([{"protocol": "UDP", "port": 5353}, {"protocol": "TCP", "port": 5353}])
    );
    figure(
        "s11",
        format!("door fixed to 5353: DNSReachable=True {reason}: {message}"),
    );

    // A NodeLocal-style door: an ipBlock beside the kube-dns pods.
    let node_local = format!("{}-nl", names.name);
    create_baseline(
        &cluster,
        &node_local,
        json!({"namespaceLabel": names.selector(), "dns": {"ipBlocks": ["169.254.20.10/32"]}}),
    )
    .await;
    let (_, _) = wait_condition(&cluster, &node_local, "DNSReachable", "True", None).await;
    let door = get_policy(&cluster.admin, &walled[1], &dns_policy_name(&node_local))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        spec_json(&door)["egress"][0]["to"],
        json!([{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}, "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}},
               {"ipBlock": {"cidr": "169.254.20.10/32"}}])
    );
    reconciler.stop().await.unwrap();
    assert_rbac_was_enough(&cluster, mark);
}

#[tokio::test]
async fn s11_a_hole_opened_and_closed() {
    let (cluster, names, mark) = start("s11-holes").await;
    let (walled, _) = namespaces(&names, 2, 0).await;
    let reconciler = cluster.start_reconciler(&names.name, SINGLE).await.unwrap();
    let baseline = names.name.clone();
    create_baseline(&cluster, &baseline, spec(&names)).await;
    wait_condition(&cluster, &baseline, "Sealed", "True", Some("NoBreach")).await;
    let holes = |reconciler: &namespace_baseline_cluster_tests::Reconciler| {
        reconciler
            .metric(r#"namespace_baseline_holes{width="World",direction="Ingress"}"#)
            .unwrap()
    };
    assert_eq!(holes(&reconciler), 0.0);

    let policies: Api<NetworkPolicy> = Api::namespaced(cluster.admin.clone(), &walled[0]);
    let open: NetworkPolicy = serde_json::from_value(json!({
        "metadata": {"name": "let-everyone-in"},
        "spec": {"podSelector": {}, "ingress": [{}]},
    }))
    .unwrap();
    policies
        .create(&PostParams::default(), &open)
        .await
        .unwrap();
    let (_, message) =
        wait_condition(&cluster, &baseline, "Sealed", "False", Some("OpenToWorld")).await;
    assert_eq!(
        message,
        format!(
            "{}: NetworkPolicy let-everyone-in ingress rule 0 opens every port to the whole internet",
            walled[0]
        )
    );
    let status = cluster.status(&baseline).await.unwrap();
    assert_eq!(status.holes.as_ref().unwrap()["World"], 1);
    let (notes, _) = wait_until("a HoleOpened Event", Duration::from_secs(5), || async {
        Ok(Some(cluster.events(&baseline, "HoleOpened").await?).filter(|notes| !notes.is_empty()))
    })
    .await
    .unwrap();
    assert_eq!(holes(&reconciler), 1.0);
    figure(
        "s11",
        format!(
            "hole opened: Sealed=False: {message}; Event: {notes:?}; metric holes{{World,Ingress}} 1"
        ),
    );

    policies
        .delete("let-everyone-in", &DeleteParams::default())
        .await
        .unwrap();
    wait_condition(&cluster, &baseline, "Sealed", "True", Some("NoBreach")).await;
    let status = cluster.status(&baseline).await.unwrap();
    assert_eq!(status.holes.as_ref().unwrap()["World"], 0);
    assert_eq!(holes(&reconciler), 0.0);
    figure(
        "s11",
        "hole closed: Sealed=True, status.holes.World 0, metric 0",
    );
    assert_rbac_was_enough(&cluster, mark);
}

#[tokio::test]
async fn s11_deletions_are_counted_as_drift_repairs() {
    let (cluster, names, mark) = start("s11-repairs").await;
    let (walled, _) = namespaces(&names, 1, 0).await;
    let reconciler = cluster.start_reconciler(&names.name, SINGLE).await.unwrap();
    let baseline = names.name.clone();
    create_baseline(&cluster, &baseline, spec(&names)).await;
    wait_wall(&cluster, &baseline, &walled, true, Duration::from_secs(10)).await;
    let repairs = || {
        reconciler
            .metric("namespace_baseline_drift_repairs_total")
            .unwrap()
    };
    assert_eq!(repairs(), 0.0, "an install is no repair");
    let deny = deny_all_policy_name(&baseline);
    let policies: Api<NetworkPolicy> = Api::namespaced(cluster.admin.clone(), &walled[0]);
    for round in 1..=3 {
        let uid = policies.get(&deny).await.unwrap().metadata.uid;
        policies
            .delete(&deny, &DeleteParams::default())
            .await
            .unwrap();
        wait_until("the deny-all back", Duration::from_secs(5), || async {
            Ok(get_policy(&cluster.admin, &walled[0], &deny)
                .await?
                .filter(|p| p.metadata.uid != uid)
                .map(|_| ()))
        })
        .await
        .unwrap();
        wait_until("the repair counted", Duration::from_secs(5), || async {
            Ok((repairs() >= f64::from(round)).then_some(()))
        })
        .await
        .unwrap();
    }
    assert_eq!(repairs(), 3.0);
    let status = cluster.status(&baseline).await.unwrap();
    assert_eq!(status.drift_repairs, Some(3));
    let notes = cluster.events(&baseline, "DriftRepaired").await.unwrap();
    let expected = format!("{}/{deny} (deleted)", walled[0]);
    assert!(
        notes.iter().any(|note| note.contains(&expected)),
        "{notes:?}"
    );
    assert!(
        cluster
            .events(&baseline, "WallInstalled")
            .await
            .unwrap()
            .len()
            == 1,
        "one install, then repairs"
    );
    figure(
        "s11",
        format!(
            "3 deletions of the deny-all: drift_repairs_total 3, status.driftRepairs 3, Events {notes:?}"
        ),
    );
    assert_rbac_was_enough(&cluster, mark);
}
