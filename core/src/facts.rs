//! What the core reads of an existing NetworkPolicy. A trait rather than the k8s-openapi type,
//! so that the reconciler's cache can hold thousands of wall objects in a compact form (their
//! identical specs and labels shared), while the policy, the playground and the tests pass
//! k8s-openapi objects as they are.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicySpec};

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
