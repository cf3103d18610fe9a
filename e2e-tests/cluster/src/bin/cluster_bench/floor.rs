//! The API server's floor: the writes a reconciler makes to converge N namespaces (2N
//! server-side applies of the wall's objects, forced, under the reconciler's field manager),
//! made by a plain client with the reconciler's own identity and connection settings, at the
//! best concurrency found, with no watch, no cache and no status. What the reconciler's
//! convergence is measured against.

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use futures::{StreamExt, stream};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use namespace_baseline_cluster_tests::FIELD_MANAGER;
use namespace_baseline_core::NamespaceBaselineSpec;
use namespace_baseline_core::wall::desired_wall;

/// Applies the wall of a baseline named `baseline` to every namespace, `concurrency` applies
/// in flight; every write must succeed. Returns how long the 2N applies took.
pub async fn run(
    client: &Client,
    baseline: &str,
    namespaces: &[String],
    concurrency: usize,
) -> Result<Duration> {
    let spec = NamespaceBaselineSpec::new("floor");
    let objects: Vec<NetworkPolicy> = namespaces
        .iter()
        .flat_map(|namespace| desired_wall(baseline, namespace, &spec))
        .collect();
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let started = Instant::now();
    let results: Vec<kube::Result<NetworkPolicy>> = stream::iter(&objects)
        .map(|policy| {
            let api: Api<NetworkPolicy> = Api::namespaced(
                client.clone(),
                policy.metadata.namespace.as_deref().unwrap_or_default(),
            );
            let params = params.clone();
            async move {
                api.patch(
                    policy.metadata.name.as_deref().unwrap_or_default(),
                    &params,
                    &Patch::Apply(policy),
                )
                .await
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let took = started.elapsed();
    let failed = results.iter().filter(|result| result.is_err()).count();
    ensure!(
        failed == 0,
        "{failed} of {} floor applies failed, e.g. {:?}",
        results.len(),
        results.iter().find_map(|result| result.as_ref().err())
    );
    Ok(took)
}
