//! Scenario 15: what Kubewarden's policy-server 1.35 itself does with the policy's host
//! calls, which only the real one can show (docs/design.md, "What the policy-server does with
//! each"; docs/operations.md, "Troubleshooting"), on the Pod CREATE rule (`podsWaitForWall`):
//!
//! - a wall **found** is answered from policy-server's cache for 5 seconds: after its deny-all
//!   is deleted, Pod CREATEs are still admitted until 5 s after the first read, then refused;
//!   a **not found** is never cached: once the wall is back, the next pod is admitted;
//! - a **forbidden GET** (the ServiceAccount without `get networkpolicies`) reaches the user
//!   as the policy's refusal naming the missing grant, with the API server's error inside;
//! - a **forbidden LIST** (without `list namespacebaselines`) never reaches the policy:
//!   policy-server retries the list without end, the API server gives up after the webhook's
//!   `timeoutSeconds` ("context deadline exceeded"), and while requests hang on it they hold
//!   policy-server's workers, so that an unrelated request waits behind them.

use std::cell::Cell;
use std::time::{Duration, Instant};

use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use namespace_baseline_cluster_tests::admission::{
    AdmissionChain, ChainOptions, dry_run_pod_create,
};
use namespace_baseline_cluster_tests::{
    Cluster, deny_all_policy_name, dns_policy_name, wait_until,
};
use namespace_baseline_testkit::kubewarden::{CONTROLLER_NAMESPACE, POLICY_SERVER_SERVICE_ACCOUNT};
use namespace_baseline_testkit::policy_server::LogLevel;
use serde_json::json;

use crate::common::{SINGLE, create_baseline, figure, namespaces, spec, start, wait_wall};

/// How long a webhook configuration change may take to reach the admission chain.
const CHAIN_UPDATE: Duration = Duration::from_secs(15);
/// policy-server's cache of a `get_resource` that found its object (`get_resource_cached`,
/// `#[cached(time = 5)]` in policy-evaluator).
const FOUND_CACHED_FOR: Duration = Duration::from_secs(5);

fn policy_server_username() -> String {
    format!("system:serviceaccount:{CONTROLLER_NAMESPACE}:{POLICY_SERVER_SERVICE_ACCOUNT}")
}

#[tokio::test]
async fn s15_a_found_wall_is_served_from_the_cache_for_five_seconds_a_missing_one_never() {
    let (cluster, names, _) = start("s15-cache").await;
    let baseline = names.name.clone();
    let (walled, outside) = namespaces(&names, 1, 1).await;
    for namespace in walled.iter().chain(&outside) {
        cluster.default_service_account(namespace).await.unwrap();
    }
    create_baseline(&cluster, &baseline, spec(&names)).await;
    let mut reconciler = cluster
        .start_reconciler("s15-cache", SINGLE)
        .await
        .expect("the reconciler");
    wait_wall(&cluster, &baseline, &walled, true, Duration::from_secs(30)).await;
    // Nothing puts the wall back while the cache is watched.
    reconciler.stop().await.expect("stopping the reconciler");

    cluster
        .with_admission_chain(async |chain| {
            chain
                .wait_pods_judged(&cluster.admin, &outside[0], true, CHAIN_UPDATE)
                .await
                .unwrap_or_else(|error| panic!("{error:#}"));
            cached_wall(&cluster, &baseline, &walled[0], chain).await;
        })
        .await
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    names.delete_namespaces(&[walled, outside].concat()).await;
}

async fn cached_wall(cluster: &Cluster, baseline: &str, walled: &str, chain: &AdmissionChain) {
    let deny_all = deny_all_policy_name(baseline);
    let denied_by = chain.denied_by("", "pods");
    let mark = cluster.audit.mark();

    // The first Pod CREATE reads the wall (found) and policy-server caches it.
    let started = Instant::now();
    let first = dry_run_pod_create(&cluster.admin, walled, "first")
        .await
        .unwrap();
    let first_answered = started.elapsed();
    assert_eq!(first, Ok(()), "the wall is in place: the pod is admitted");

    // The deny-all deleted by the reconciler's identity (the policy never reviews it).
    Api::<NetworkPolicy>::namespaced(cluster.reconciler_client().await.unwrap(), walled)
        .delete(&deny_all, &DeleteParams::default())
        .await
        .expect("deleting the deny-all as the reconciler");
    let deleted = started.elapsed();

    // Pod CREATEs until one is refused: those admitted meanwhile were judged on the cached
    // answer.
    let admitted_on_the_cache = Cell::new(0);
    let attempt = Cell::new(0);
    let (refused, _) = wait_until(
        "a Pod CREATE refused once the cached wall expired",
        FOUND_CACHED_FOR * 3,
        || {
            attempt.set(attempt.get() + 1);
            let name = format!("after-deletion-{}", attempt.get());
            let admitted = &admitted_on_the_cache;
            async move {
                match dry_run_pod_create(&cluster.admin, walled, &name).await? {
                    Ok(()) => {
                        admitted.set(admitted.get() + 1);
                        Ok(None)
                    }
                    Err((code, message)) => Ok(Some((started.elapsed(), code, message))),
                }
            }
        },
    )
    .await
    .unwrap_or_else(|error| panic!("{error:#}"));
    let admitted_on_the_cache = admitted_on_the_cache.get();
    let (refused_after, code, message) = refused;
    assert_eq!(code, 403, "{message}");
    assert!(
        message.starts_with(&denied_by)
            && message.contains(&format!(
                "NetworkPolicy \"{deny_all}\" (its deny-all) does not exist"
            )),
        "{message}"
    );
    // Cached from the first read (after `started`) for 5 s: no refusal before, and one soon
    // after (the polling's period and a create's time later).
    assert!(
        refused_after >= FOUND_CACHED_FOR,
        "refused {refused_after:?} after the first read: the found wall was not cached for {FOUND_CACHED_FOR:?}"
    );
    assert!(
        refused_after <= first_answered + FOUND_CACHED_FOR + Duration::from_secs(1),
        "refused only {refused_after:?} after the first read"
    );
    assert!(
        admitted_on_the_cache > 0,
        "no Pod CREATE was admitted on the cached wall between its deletion ({deleted:?}) and the refusal ({refused_after:?})"
    );
    // What policy-server asked the API server meanwhile: the deny-all twice, found then not.
    let gets: Vec<(String, Option<u16>)> = cluster
        .audit
        .requests_since(mark, &policy_server_username())
        .unwrap_or_default()
        .iter()
        .filter(|event| event.verb == "get" && event.resource() == "networkpolicies")
        .map(|event| {
            let name = event
                .object_ref
                .as_ref()
                .and_then(|o| o.name.clone())
                .unwrap_or_default();
            (name, event.code())
        })
        .collect();
    let deny_all_gets: Vec<Option<u16>> = gets
        .iter()
        .filter(|(name, _)| *name == deny_all)
        .map(|(_, code)| *code)
        .collect();
    assert_eq!(deny_all_gets, [Some(200), Some(404)], "{gets:?}");
    figure(
        "s15",
        format!(
            "a found wall is served from policy-server's cache: deny-all deleted {deleted:.2?} after the first read, {admitted_on_the_cache} Pod CREATEs admitted on the cached answer, the first refusal {refused_after:.2?} after the first read; policy-server's GETs of the wall meanwhile: {gets:?}"
        ),
    );

    // A not-found is never cached: once the wall is back, the next pod is admitted.
    let _reconciler = cluster
        .start_reconciler("s15-cache-b", SINGLE)
        .await
        .expect("the reconciler again");
    let policies: Api<NetworkPolicy> = Api::namespaced(cluster.admin.clone(), walled);
    let (_, back) = wait_until("the deny-all back", Duration::from_secs(30), || async {
        Ok(policies.get_opt(&deny_all).await?.map(|_| ()))
    })
    .await
    .unwrap_or_else(|error| panic!("{error:#}"));
    let next = dry_run_pod_create(&cluster.admin, walled, "wall-back")
        .await
        .unwrap();
    assert_eq!(
        next,
        Ok(()),
        "the wall is back: a not-found must not be cached"
    );
    figure(
        "s15",
        format!(
            "a missing wall is never cached: the deny-all back {back:.2?} after the reconciler's restart, the next Pod CREATE admitted at once"
        ),
    );
}

#[tokio::test]
async fn s15_forbidden_reads_as_a_user_meets_them() {
    let (cluster, names, _) = start("s15-forbidden").await;
    let baseline = names.name.clone();
    let (walled, outside) = namespaces(&names, 1, 1).await;
    for namespace in walled.iter().chain(&outside) {
        cluster.default_service_account(namespace).await.unwrap();
    }
    create_baseline(&cluster, &baseline, spec(&names)).await;
    let _reconciler = cluster
        .start_reconciler("s15-forbidden", SINGLE)
        .await
        .expect("the reconciler");
    wait_wall(&cluster, &baseline, &walled, true, Duration::from_secs(30)).await;

    // A GET the ServiceAccount may not make: the wall's NetworkPolicies.
    let options = ChainOptions {
        without_grant: Some(("networking.k8s.io", "networkpolicies")),
        ..ChainOptions::default()
    };
    cluster
        .with_admission_chain_options(options, async |chain| {
            chain
                .wait_pods_judged(&cluster.admin, &outside[0], true, CHAIN_UPDATE)
                .await
                .unwrap_or_else(|error| panic!("{error:#}"));
            forbidden_get(&cluster, &baseline, &walled[0], chain).await;
        })
        .await
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic));

    // A LIST it may not make: the NamespaceBaselines (a policy-server started without the
    // grant: one that listed them before keeps its watch), with two workers.
    let options = ChainOptions {
        log_level: LogLevel::Debug,
        workers: Some(2),
        without_grant: Some(("hedronite.io", "namespacebaselines")),
        ..ChainOptions::default()
    };
    cluster
        .with_admission_chain_options(options, async |chain| {
            forbidden_list(&cluster, &outside[0], chain).await;
        })
        .await
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    cluster.install_policy_server_identity(None).await.unwrap();
    names.delete_namespaces(&[walled, outside].concat()).await;
}

async fn forbidden_get(cluster: &Cluster, baseline: &str, walled: &str, chain: &AdmissionChain) {
    let denied_by = chain.denied_by("", "pods");
    let deny_all = deny_all_policy_name(baseline);
    let started = Instant::now();
    let outcome = dry_run_pod_create(&cluster.admin, walled, "forbidden-get")
        .await
        .unwrap();
    let took = started.elapsed();
    let Err((code, message)) = outcome else {
        panic!("a pod admitted although its wall could not be read");
    };
    assert_eq!(code, 403, "{message}");
    for part in [
        denied_by.as_str(),
        &format!(
            "NetworkPolicy \"{deny_all}\" of NamespaceBaseline \"{baseline}\" could not be read"
        ),
        "is forbidden: User \"system:serviceaccount:kubewarden:policy-server\" cannot get resource \"networkpolicies\"",
        "needs get on networkpolicies.networking.k8s.io",
    ] {
        assert!(message.contains(part), "{part:?} not in {message}");
    }
    // As in a container: no stack trace in what the user reads.
    assert!(!message.contains("Stack backtrace"), "{message}");
    figure(
        "s15",
        format!(
            "a forbidden GET, as the user reads it ({code}, {} characters, in {took:.2?}): {message}",
            message.len()
        ),
    );
    // The DNS door was never asked for: the policy stops at the first part it cannot read.
    let forbidden_dns = chain
        .log()
        .host_calls()
        .iter()
        .filter(|call| call.request.contains(&dns_policy_name(baseline)))
        .count();
    assert_eq!(forbidden_dns, 0);

    // The grant back: a failed read was not cached, the next pod is judged afresh.
    let back = grant_back(cluster, walled, "get", Duration::from_secs(10)).await;
    figure(
        "s15",
        format!(
            "with the get grant back, the next Pod CREATE admitted after {:.2?} ({} attempt(s), {:.2?} since the grant)",
            back.admitted_after, back.attempts, back.since_grant
        ),
    );
}

async fn forbidden_list(cluster: &Cluster, outside: &str, chain: &AdmissionChain) {
    let pods = chain.policy_for("", "pods");
    let timeout = Duration::from_secs(
        pods.spec["timeoutSeconds"]
            .as_u64()
            .expect("the pods policy's timeoutSeconds"),
    );
    let failed_calling = format!("failed calling webhook \"{}\"", pods.webhook_name());

    // One Pod CREATE (whose rule lists the baselines first): answered by the API server when
    // its webhook timeout ends, not by the policy. The chain cannot be waited for as usual
    // (a judged Pod CREATE hangs here), so a create admitted before the API server applies the
    // new webhook configuration is told apart by policy-server's log: admitted without a
    // review, the webhook was not called yet (tried again); admitted with one, the policy
    // admitted it (a failure). A CI run saw the first, right after the chain's registration.
    let mut attempt = 0;
    let (took, code, message) = loop {
        attempt += 1;
        let name = format!("forbidden-list-{attempt}");
        let started = Instant::now();
        let outcome = dry_run_pod_create(&cluster.admin, outside, &name)
            .await
            .unwrap();
        let took = started.elapsed();
        match outcome {
            Err((code, message)) => break (took, code, message),
            Ok(()) => {
                assert!(
                    !chain.reviewed_pod(&name),
                    "a pod admitted although the baselines could not be listed"
                );
                assert!(
                    attempt < 50,
                    "Pod CREATEs in {outside} never sent to policy-server ({attempt} admitted without a review)"
                );
                eprintln!(
                    "pod {outside}/{name} admitted without a review: the webhook configuration not applied yet, trying again"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert!(
        code == 500
            && message.contains(&failed_calling)
            && message.contains("context deadline exceeded"),
        "{code} {message}"
    );
    assert!(
        took >= timeout - Duration::from_millis(100),
        "answered in {took:?}, before the webhook's {timeout:?}"
    );
    figure(
        "s15",
        format!(
            "a forbidden LIST, as the user reads it: {code} after {took:.2?} (timeoutSeconds {timeout:?}): {message}"
        ),
    );

    // As many at once as policy-server has workers, then an unrelated NetworkPolicy CREATE
    // (no host call): it waits for a worker the stuck ones hold.
    let stuck = (0..2).map(|i| {
        let name = format!("stuck-{i}");
        async move { dry_run_pod_create(&cluster.admin, outside, &name).await }
    });
    let unrelated = async {
        // Sent once policy-server has received the stuck ones.
        wait_until("the stuck Pod CREATEs received", timeout, || async {
            let received = chain.log().received();
            Ok((0..2)
                .all(|i| received.contains(&(outside.to_owned(), format!("stuck-{i}"))))
                .then_some(()))
        })
        .await
        .unwrap_or_else(|error| panic!("{error:#}"));
        let policy: NetworkPolicy = serde_json::from_value(json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "s15-unrelated"},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress"]},
        }))
        .unwrap();
        let dry_run = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        let sent = Instant::now();
        let result = Api::<NetworkPolicy>::namespaced(cluster.admin.clone(), outside)
            .create(&dry_run, &policy)
            .await;
        (
            sent.elapsed(),
            result.map(|_| ()).map_err(|error| error.to_string()),
        )
    };
    let (stuck, (unrelated_took, unrelated_result)) =
        tokio::join!(futures::future::join_all(stuck), unrelated);
    for outcome in &stuck {
        assert!(
            matches!(outcome, Ok(Err((500, message))) if message.contains("context deadline exceeded")),
            "{outcome:?}"
        );
    }
    assert!(
        unrelated_took >= Duration::from_secs(2),
        "the unrelated NetworkPolicy CREATE took {unrelated_took:?}: it did not wait for a worker"
    );
    let log = chain.log();
    let reflectors = log.reflectors_created().len();
    // Each request that listed started a watch of its own, none of which ever synced.
    assert!(reflectors >= 3, "{:?}", log.reflectors_created());
    figure(
        "s15",
        format!(
            "2 Pod CREATEs stuck on the forbidden LIST hold policy-server's 2 workers: an unrelated NetworkPolicy CREATE sent once they were received took {unrelated_took:.2?} ({}); {reflectors} reflectors started for 3 requests, {} watcher warnings so far",
            match &unrelated_result {
                Ok(()) => "admitted".to_owned(),
                Err(error) => format!("failed: {error}"),
            },
            log.warnings()
                .iter()
                .filter(|warning| warning.as_str() == "watcher error")
                .count()
        ),
    );

    // The grant back: the stuck watches sync on their next retry, and Pod CREATEs are judged
    // again without a restart.
    let back = grant_back(cluster, outside, "list", Duration::from_secs(60)).await;
    figure(
        "s15",
        format!(
            "with the list grant back, Pod CREATEs admitted again after {:.2?} (no restart; {:.2?} since the grant)",
            back.admitted_after, back.since_grant
        ),
    );
}

/// How soon Pod CREATEs were admitted once the policy-server's grants were whole again.
struct GrantBack {
    admitted_after: Duration,
    attempts: usize,
    since_grant: Duration,
}

/// Applies `deploy/policy-server-rbac.yaml` whole again and dry-runs Pod CREATEs in
/// `namespace` until one is admitted (within `limit`): no policy-server restart.
async fn grant_back(cluster: &Cluster, namespace: &str, grant: &str, limit: Duration) -> GrantBack {
    cluster.install_policy_server_identity(None).await.unwrap();
    let granted = Instant::now();
    let attempt = Cell::new(0);
    let (_, admitted_after) = wait_until(
        &format!("a Pod CREATE admitted once the {grant} grant is back"),
        limit,
        || {
            attempt.set(attempt.get() + 1);
            let name = format!("{grant}-granted-{}", attempt.get());
            async move {
                Ok(dry_run_pod_create(&cluster.admin, namespace, &name)
                    .await?
                    .ok())
            }
        },
    )
    .await
    .unwrap_or_else(|error| panic!("{error:#}"));
    GrantBack {
        admitted_after,
        attempts: attempt.get(),
        since_grant: granted.elapsed(),
    }
}
