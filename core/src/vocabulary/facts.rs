//! What the core reads of an existing NetworkPolicy ([`PolicyFacts`]) and of a Namespace
//! ([`NamespaceFacts`]). Traits rather than the k8s-openapi types, so that the reconciler's
//! caches can hold thousands of objects in a compact form (the walls' identical specs and
//! labels shared, a namespace's labels only), while the policy, `plan`, the playground and
//! the tests pass k8s-openapi objects as they are.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicySpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

pub trait PolicyFacts {
    fn name(&self) -> Option<&str>;
    fn namespace(&self) -> Option<&str>;
    fn labels(&self) -> Option<&BTreeMap<String, String>>;
    fn spec(&self) -> Option<&NetworkPolicySpec>;
}

/// An existing policy as the planner holds it: any [`PolicyFacts`] that can cross an await.
pub type ExistingPolicy<'a> = &'a (dyn PolicyFacts + Sync);

impl fmt::Debug for dyn PolicyFacts + Sync + '_ {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PolicyFacts")
            .field("namespace", &self.namespace())
            .field("name", &self.name())
            .field("labels", &self.labels())
            .field("spec", &self.spec())
            .finish()
    }
}

impl PolicyFacts for NetworkPolicy {
    fn name(&self) -> Option<&str> {
        self.metadata.name.as_deref()
    }

    fn namespace(&self) -> Option<&str> {
        self.metadata.namespace.as_deref()
    }

    fn labels(&self) -> Option<&BTreeMap<String, String>> {
        self.metadata.labels.as_ref()
    }

    fn spec(&self) -> Option<&NetworkPolicySpec> {
        self.spec.as_ref()
    }
}

impl<T: PolicyFacts + ?Sized> PolicyFacts for Arc<T> {
    fn name(&self) -> Option<&str> {
        (**self).name()
    }

    fn namespace(&self) -> Option<&str> {
        (**self).namespace()
    }

    fn labels(&self) -> Option<&BTreeMap<String, String>> {
        (**self).labels()
    }

    fn spec(&self) -> Option<&NetworkPolicySpec> {
        (**self).spec()
    }
}

/// What a decision reads of a namespace: its name, the value of a label (the one question a
/// baseline's selector asks) and whether it is going away. The reconciler caches a compact
/// form; the tests and `plan` pass whole Namespaces or metadata.
pub trait NamespaceFacts {
    fn name(&self) -> &str;
    fn label(&self, key: &str) -> Option<&str>;
    fn terminating(&self) -> bool;
}

impl NamespaceFacts for ObjectMeta {
    fn name(&self) -> &str {
        self.name.as_deref().unwrap_or_default()
    }

    fn label(&self, key: &str) -> Option<&str> {
        self.labels.as_ref()?.get(key).map(String::as_str)
    }

    fn terminating(&self) -> bool {
        self.deletion_timestamp.is_some()
    }
}

impl NamespaceFacts for Namespace {
    fn name(&self) -> &str {
        self.metadata.name()
    }

    fn label(&self, key: &str) -> Option<&str> {
        self.metadata.label(key)
    }

    fn terminating(&self) -> bool {
        self.metadata.terminating()
    }
}

#[cfg(feature = "crd")]
impl<K> NamespaceFacts for kube::core::PartialObjectMeta<K> {
    fn name(&self) -> &str {
        self.metadata.name()
    }

    fn label(&self, key: &str) -> Option<&str> {
        self.metadata.label(key)
    }

    fn terminating(&self) -> bool {
        self.metadata.terminating()
    }
}

impl<T: NamespaceFacts + ?Sized> NamespaceFacts for Arc<T> {
    fn name(&self) -> &str {
        (**self).name()
    }

    fn label(&self, key: &str) -> Option<&str> {
        (**self).label(key)
    }

    fn terminating(&self) -> bool {
        (**self).terminating()
    }
}
