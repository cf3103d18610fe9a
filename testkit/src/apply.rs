//! Server-side apply (and create) of any object, its kind found through API discovery, as
//! `kubectl apply --server-side` does it: the one way the demo, `nsb-manifests`, the cluster
//! tests, the node tests and the bench write an object given as JSON.

use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams, ValidationDirective};
use kube::core::GroupVersionKind;
use kube::discovery::{Scope, pinned_kind};
use serde_json::Value;

use crate::manifests::Key;
use crate::wait_until;

/// How a server-side apply changed the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Created,
    Configured,
    Unchanged,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Configured => "configured",
            Self::Unchanged => "unchanged",
        }
    }
}

/// Applies objects under one field manager.
#[derive(Clone)]
pub struct Applier {
    pub client: Client,
    pub field_manager: String,
    /// `dryRun=All`: every admission step and validation runs, nothing is stored.
    pub dry_run: bool,
    /// Strict field validation (an unknown or duplicate field is an error, not a warning);
    /// `false` leaves it to the API server's default (a warning).
    pub strict: bool,
}

impl Applier {
    pub fn new(client: Client, field_manager: &str) -> Self {
        Self {
            client,
            field_manager: field_manager.to_owned(),
            dry_run: false,
            strict: true,
        }
    }

    /// The API of `object`'s kind (found by discovery, retried for a few seconds so that a
    /// CRD applied just before is served) and its name.
    pub async fn api_for(&self, object: &Value) -> Result<(Api<DynamicObject>, Key)> {
        let key = Key::of(object)?;
        let (group, version) = key
            .api_version
            .rsplit_once('/')
            .unwrap_or(("", key.api_version.as_str()));
        let gvk = GroupVersionKind::gvk(group, version, &key.kind);
        // A CRD applied just before may take a moment to be served.
        let ((resource, capabilities), _) = wait_until(
            &format!("the API server to serve {} {}", key.api_version, key.kind),
            Duration::from_secs(10),
            || async { Ok(Some(pinned_kind(&self.client, &gvk).await?)) },
        )
        .await?;
        let api = match capabilities.scope {
            Scope::Cluster => Api::all_with(self.client.clone(), &resource),
            Scope::Namespaced => Api::namespaced_with(
                self.client.clone(),
                key.namespace.as_deref().unwrap_or("default"),
                &resource,
            ),
        };
        Ok((api, key))
    }

    /// Server-side applies `object` (forced; strict field validation unless [`Self::strict`]
    /// is off): the object as the API server stored it. A CRD is not waited for.
    pub async fn apply_object(&self, object: &Value) -> Result<DynamicObject> {
        let (api, key) = self.api_for(object).await?;
        self.patch(&api, &key, object).await
    }

    /// Server-side applies `object` as [`Self::apply_object`] does, and says what changed.
    /// A CRD is waited for until Established.
    pub async fn apply(&self, object: &Value) -> Result<Outcome> {
        let (api, key) = self.api_for(object).await?;
        let before = api
            .get_opt(&key.name)
            .await
            .with_context(|| format!("reading {key}"))?;
        let after = self.patch(&api, &key, object).await?;
        if key.kind == "CustomResourceDefinition" && !self.dry_run {
            wait_established(&self.client, &key.name).await?;
        }
        Ok(match before {
            None => Outcome::Created,
            Some(before) if comparable(&before) == comparable(&after) => Outcome::Unchanged,
            Some(_) => Outcome::Configured,
        })
    }

    /// Creates `object` (any kind): the API server's verdict, unchanged (a discovery failure
    /// comes back as `kube::Error::Service`).
    pub async fn create(&self, object: &Value) -> Result<DynamicObject, kube::Error> {
        let (api, _) = self
            .api_for(object)
            .await
            .map_err(|error| kube::Error::Service(error.into()))?;
        let object: DynamicObject =
            serde_json::from_value(object.clone()).map_err(kube::Error::SerdeError)?;
        let params = PostParams {
            dry_run: self.dry_run,
            ..PostParams::default()
        };
        api.create(&params, &object).await
    }

    async fn patch(
        &self,
        api: &Api<DynamicObject>,
        key: &Key,
        object: &Value,
    ) -> Result<DynamicObject> {
        let mut params = PatchParams::apply(&self.field_manager).force();
        params.dry_run = self.dry_run;
        if self.strict {
            params.field_validation = Some(ValidationDirective::Strict);
        }
        api.patch(&key.name, &params, &Patch::Apply(object))
            .await
            .with_context(|| {
                format!(
                    "server-side apply{} of {key}",
                    if self.dry_run { " (dry run)" } else { "" }
                )
            })
    }
}

/// An object without the fields every write changes.
fn comparable(object: &DynamicObject) -> Value {
    let mut value = serde_json::to_value(object).unwrap_or(Value::Null);
    if let Some(metadata) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in ["managedFields", "resourceVersion", "generation"] {
            metadata.remove(field);
        }
    }
    value
}

/// Waits until a CRD is Established (its kind is served), at most 30 s.
pub async fn wait_established(client: &Client, name: &str) -> Result<Duration> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let ((), took) = wait_until(
        &format!("CustomResourceDefinition {name} to be Established"),
        Duration::from_secs(30),
        || async {
            let crd = api.get(name).await?;
            let established = crd
                .status
                .and_then(|status| status.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            Ok(established.then_some(()))
        },
    )
    .await?;
    Ok(took)
}
