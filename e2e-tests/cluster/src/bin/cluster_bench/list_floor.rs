//! The floor of a restart: what a bare client needs to read what the reconciler's caches must
//! hold before its first pass, the Namespaces (metadata only) and the NetworkPolicies, listed
//! as the reconciler's watches list them (`resourceVersion=0`, not older than; pages of 500,
//! kube's watcher default), both at once, over a fresh connection of the reconciler's
//! ServiceAccount. No process start, no Lease, no cache, no plan: what a restart is measured
//! against.

use std::time::{Duration, Instant};

use anyhow::Result;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{ListParams, ObjectList, VersionMatch};
use kube::{Api, Client};

/// kube's `watcher::Config::default().page_size`.
const PAGE_SIZE: u32 = 500;

/// What one bare listing read, and how long it took from its first request (on a client not
/// yet connected) to its last page.
pub struct Listed {
    pub took: Duration,
    pub namespaces: usize,
    pub policies: usize,
    pub pages: usize,
}

pub async fn list(client: Client) -> Result<Listed> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let policies: Api<NetworkPolicy> = Api::all(client);
    let started = Instant::now();
    let (namespaces, policies) = tokio::try_join!(
        pages(|params| {
            let namespaces = namespaces.clone();
            async move { namespaces.list_metadata(&params).await }
        }),
        pages(|params| {
            let policies = policies.clone();
            async move { policies.list(&params).await }
        }),
    )?;
    Ok(Listed {
        took: started.elapsed(),
        namespaces: namespaces.0,
        policies: policies.0,
        pages: namespaces.1 + policies.1,
    })
}

/// Lists page by page as kube's watcher does; (objects, pages).
async fn pages<T, F, Fut>(mut list: F) -> Result<(usize, usize)>
where
    T: Clone,
    F: FnMut(ListParams) -> Fut,
    Fut: Future<Output = kube::Result<ObjectList<T>>>,
{
    let mut params = ListParams {
        resource_version: Some("0".to_owned()),
        version_match: Some(VersionMatch::NotOlderThan),
        limit: Some(PAGE_SIZE),
        ..ListParams::default()
    };
    let (mut objects, mut pages) = (0, 0);
    loop {
        let page = list(params.clone()).await?;
        objects += page.items.len();
        pages += 1;
        match page.metadata.continue_.filter(|token| !token.is_empty()) {
            Some(token) => params.continue_token = Some(token),
            None => return Ok((objects, pages)),
        }
    }
}
