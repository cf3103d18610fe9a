//! Node test 5, namespace deletion: deleting a walled namespace (pods, the wall) completes
//! while the reconciler runs: the namespace controller removes the wall with everything else,
//! the reconciler does not fight it, and the baseline then counts no namespace.

use std::time::Duration;

use namespace_baseline_cluster_tests::wall_of;

use crate::common::{figure, wait_ready};
use crate::{Bed, wait_namespace_gone};

#[tokio::test(flavor = "multi_thread")]
async fn n5_walled_namespace_deletion_completes() {
    let bed = Bed::new("n5", false, true).await;
    let namespace = bed.walled.namespace.clone();
    assert_eq!(
        wall_of(&bed.cluster.admin, &bed.baseline)
            .await
            .unwrap()
            .len(),
        2,
        "the wall stands before the delete"
    );
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(bed.cluster.admin.clone());
    namespaces
        .delete(&namespace, &Default::default())
        .await
        .unwrap();
    let took = wait_namespace_gone(&bed.cluster, &namespace, Duration::from_secs(90)).await;
    let left = wall_of(&bed.cluster.admin, &bed.baseline).await.unwrap();
    assert!(
        left.is_empty(),
        "policies of the deleted namespace left: {left:?}"
    );
    let (_, counted) = wait_ready(&bed.cluster, &bed.baseline, 0, Duration::from_secs(15)).await;
    bed.reconciler.check_alive().unwrap();
    figure(
        "n5",
        format!(
            "walled namespace with a running pod deleted in {:.1} s (wall removed by the namespace controller, reconciler running); baseline counts 0 namespaces {:.0} ms later",
            took.as_secs_f64(),
            counted.as_secs_f64() * 1000.0
        ),
    );
    bed.cleanup().await;
}
