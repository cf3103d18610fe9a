//! Steps shared by the fault scenarios (`s9_*`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{Result, ensure};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use namespace_baseline_cluster_tests::faults::{policy_writes, writes_outside};
use namespace_baseline_cluster_tests::{
    AuditEvent, AuditMark, Cluster, condition, reconciler_username, wait_until,
};
use rand::rngs::StdRng;
use rand::{RngExt as _, SeedableRng as _};

use crate::common::{check_wall, expected_wall};

/// The scenarios' random choices, from a fixed seed.
pub struct Rng(StdRng);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(StdRng::seed_from_u64(seed))
    }

    pub fn below(&mut self, n: usize) -> usize {
        self.0.random_range(0..n.max(1))
    }
}

/// One baseline's expected wall: its name, the namespaces it covers, whether the DNS door
/// is on.
pub struct Wall<'a> {
    pub baseline: &'a str,
    pub namespaces: &'a [String],
    pub dns: bool,
}

/// Every NetworkPolicy of `namespaces` (any label), by `(namespace, name)`.
pub async fn policies_in(
    cluster: &Cluster,
    namespaces: &BTreeSet<String>,
) -> Result<BTreeMap<(String, String), NetworkPolicy>> {
    let api: Api<NetworkPolicy> = Api::all(cluster.admin.clone());
    let mut found = BTreeMap::new();
    let mut params = ListParams::default().limit(500);
    loop {
        let page = api.list(&params).await?;
        for policy in page.items {
            let namespace = policy.namespace().unwrap_or_default();
            if namespaces.contains(&namespace) {
                found.insert((namespace, policy.name_any()), policy);
            }
        }
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => break,
        }
    }
    Ok(found)
}

/// The walls are exactly in place (every spec and label) and the namespaces of `scope` hold
/// nothing else but `bystanders`: no stray, duplicate or half-made object.
pub async fn check_exact(
    cluster: &Cluster,
    walls: &[Wall<'_>],
    scope: &BTreeSet<String>,
    bystanders: &BTreeSet<(String, String)>,
) -> Result<()> {
    let mut expected: BTreeSet<(String, String)> = bystanders.clone();
    for wall in walls {
        check_wall(cluster, wall.baseline, wall.namespaces, wall.dns).await?;
        expected.extend(expected_wall(wall.baseline, wall.namespaces, wall.dns));
    }
    let found: BTreeSet<(String, String)> =
        policies_in(cluster, scope).await?.into_keys().collect();
    ensure!(
        found == expected,
        "{} NetworkPolicies in the scenario's namespaces, {} expected; missing {:?}, stray {:?}",
        found.len(),
        expected.len(),
        expected.difference(&found).take(5).collect::<Vec<_>>(),
        found.difference(&expected).take(5).collect::<Vec<_>>()
    );
    Ok(())
}

/// Waits for [`check_exact`]; returns how long it took.
pub async fn wait_exact(
    cluster: &Cluster,
    walls: &[Wall<'_>],
    scope: &BTreeSet<String>,
    bystanders: &BTreeSet<(String, String)>,
    timeout: Duration,
) -> Result<Duration> {
    Ok(wait_until("the exact walls", timeout, || async {
        check_exact(cluster, walls, scope, bystanders)
            .await
            .map(Some)
    })
    .await?
    .1)
}

/// Waits for a baseline's status to be right: current generation observed, `namespaces`
/// matched, `Ready=True`, nothing left drifted. Returns how long it took.
pub async fn wait_status_right(
    cluster: &Cluster,
    baseline: &str,
    namespaces: u32,
    timeout: Duration,
) -> Result<Duration> {
    let api = cluster.baselines();
    Ok(wait_until(
        &format!("the status of {baseline} to be right"),
        timeout,
        || {
            let api = api.clone();
            async move {
                let object = api.get(baseline).await?;
                let generation = object.metadata.generation;
                Ok(object
                    .status
                    .filter(|status| {
                        status.observed_generation == generation
                            && status.namespaces == namespaces
                            && status.drifted.unwrap_or(0) == 0
                            && condition(status, "Ready").is_some_and(|(s, _, _)| s == "True")
                    })
                    .map(|_| ()))
            }
        },
    )
    .await?
    .1)
}

/// The reconciler's requests since `mark` (`None` when the audit log is skipped).
pub fn reconciler_requests(cluster: &Cluster, mark: AuditMark) -> Option<Vec<AuditEvent>> {
    cluster.audit.requests_since(mark, &reconciler_username())
}

/// The writes among `events`, described.
pub fn writes_among(events: &[AuditEvent]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.is_write())
        .map(AuditEvent::describe)
        .collect()
}

/// The names the reconciler may write: the walls' policy names (both doors of every
/// baseline) in `scope`.
pub fn writable(baselines: &[&str], scope: &BTreeSet<String>) -> BTreeSet<(String, String)> {
    let mut names = BTreeSet::new();
    for baseline in baselines {
        let all: Vec<String> = scope.iter().cloned().collect();
        names.extend(expected_wall(baseline, &all, true));
    }
    names
}

/// Asserts every NetworkPolicy write the reconciler made since `mark` targets a managed
/// policy name in `scope`; returns the number of such writes.
pub fn assert_writes_only_walls(
    cluster: &Cluster,
    mark: AuditMark,
    baselines: &[&str],
    scope: &BTreeSet<String>,
) -> Option<usize> {
    let events = reconciler_requests(cluster, mark)?;
    let writes = policy_writes(&events);
    let outside = writes_outside(&writes, &writable(baselines, scope));
    assert!(
        outside.is_empty(),
        "the reconciler wrote NetworkPolicies that are not its walls: {outside:#?}"
    );
    Some(writes.len())
}
