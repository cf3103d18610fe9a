//! Namespaces created for a test, many at once: the cluster tests' scenarios, the node tests,
//! the soak and the bench all start from a set of labelled namespaces.

use std::collections::BTreeMap;

use anyhow::{Context as _, Result};
use futures::{StreamExt as _, TryStreamExt as _, stream};
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};

/// Creates the namespaces `names`, each with `labels`, `concurrency` at a time (at least one).
pub async fn create(
    client: &Client,
    names: &[String],
    labels: &BTreeMap<String, String>,
    concurrency: usize,
) -> Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    stream::iter(names.iter().cloned())
        .map(|name| {
            let api = api.clone();
            let namespace = Namespace {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    labels: Some(labels.clone()),
                    ..ObjectMeta::default()
                },
                ..Namespace::default()
            };
            async move {
                api.create(&PostParams::default(), &namespace)
                    .await
                    .with_context(|| format!("creating namespace {name}"))
            }
        })
        .buffer_unordered(concurrency.max(1))
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}
