//! What the policy reads from the cluster: the live NamespaceBaselines, a Namespace, a
//! NetworkPolicy by name. Two sources answer the same reads: typed objects
//! ([`BaselineSource`]: the tests, the playground, the demo) and the policy-server's host
//! capabilities, as JSON text ([`HostCapabilities`]: the policy); the rules read either
//! through the generic [`Cluster`], borrowing from the answer.

use super::baselines::LiveBaseline;
use super::request::ObjectView;
use super::view::{LiveBaselineRef, ObjectRef};

/// How the policy-server says that `get_resource` found no NetworkPolicy of that name
/// (`Cannot find networking.k8s.io/v1/NetworkPolicy named '<name>' inside of namespace
/// '<namespace>'`, wrapped in "Callback evaluation failure: ..."): the wall's part is
/// missing, rather than unreadable. No other failure of the call says it.
pub const NETWORK_POLICY_NOT_FOUND: &str = "Cannot find networking.k8s.io/v1/NetworkPolicy named '";

/// Whether a failed `get_resource` of a NetworkPolicy means that it does not exist.
pub(crate) fn is_not_found(error: &str) -> bool {
    // A plain window comparison: `str::contains` would add a substring searcher to the module
    // for this one short message.
    let needle = NETWORK_POLICY_NOT_FOUND.as_bytes();
    error
        .as_bytes()
        .windows(needle.len())
        .any(|window| window == needle)
}

/// What the policy reads from the cluster through the policy-server's host capabilities.
/// Each read is made at most once per request, and only when the answer can change the
/// verdict.
pub trait BaselineSource {
    /// The live NamespaceBaselines, when the settings ask for them (`contextAware`).
    fn baselines(&self) -> Result<Vec<LiveBaseline>, String>;

    /// The Namespace `name` (its name and labels), read for the holes check: only for a
    /// NetworkPolicy that opens a `World` or `Cluster` hole, to learn whether its namespace
    /// is walled. A namespace that does not exist is an error like any other failed read.
    fn namespace(&self, name: &str) -> Result<ObjectView, String>;

    /// The NetworkPolicy `name` in `namespace` (its name and labels), read for a Pod CREATE
    /// in a namespace a live baseline guards (`podsWaitForWall`): `Ok(None)` when it does not
    /// exist, an error when it could not be read.
    fn network_policy(&self, namespace: &str, name: &str) -> Result<Option<ObjectView>, String>;
}

/// The same reads as [`BaselineSource`], answered as the policy-server answers them: the JSON
/// text of the host capability's answer, which [`evaluate_in_host`] reads without copying
/// more of it than the rules use. Each read is made at most once per request, and only when
/// the answer can change the verdict.
pub trait HostCapabilities {
    /// `kubernetes/list_resources_all` of the NamespaceBaselines: a `NamespaceBaselineList`
    /// (the field masks may have left only `metadata.name`, `spec.namespaceLabel` and
    /// `spec.mode` of each), or why the call failed.
    fn list_baselines(&self) -> Result<Vec<u8>, String>;

    /// `kubernetes/get_resource` of the Namespace `name`, or why the call failed.
    fn get_namespace(&self, name: &str) -> Result<Vec<u8>, String>;

    /// `kubernetes/get_resource` of the NetworkPolicy `name` in `namespace`, or why the call
    /// failed: a policy that does not exist fails with the policy-server's "not found"
    /// message ([`NETWORK_POLICY_NOT_FOUND`]), which the rules read as "missing".
    fn get_network_policy(&self, namespace: &str, name: &str) -> Result<Vec<u8>, String>;
}

/// Either source, as the rules read it: its answers, and how each is read (borrowed from
/// the answer). Generic, so that the policy's module holds only the readers of its own
/// source.
pub(crate) trait Cluster {
    type Live: ReadBaselines;
    type Object: ReadObject;
    fn baselines(&self) -> Result<Self::Live, String>;
    fn namespace(&self, name: &str) -> Result<Self::Object, String>;
    /// `Ok(None)`: the policy does not exist.
    fn network_policy(&self, namespace: &str, name: &str) -> Result<Option<Self::Object>, String>;
}

pub(crate) trait ReadBaselines {
    /// The baselines, borrowed from the answer.
    fn read(&self) -> Result<Vec<LiveBaselineRef<'_>>, String>;
}

pub(crate) trait ReadObject {
    /// The object (a Namespace or a NetworkPolicy), borrowed from the answer.
    fn read(&self) -> Result<ObjectRef<'_>, String>;
}

pub(crate) struct Typed<'s>(pub &'s dyn BaselineSource);

impl Cluster for Typed<'_> {
    type Live = Vec<LiveBaseline>;
    type Object = ObjectView;

    fn baselines(&self) -> Result<Vec<LiveBaseline>, String> {
        self.0.baselines()
    }

    fn namespace(&self, name: &str) -> Result<ObjectView, String> {
        self.0.namespace(name)
    }

    fn network_policy(&self, namespace: &str, name: &str) -> Result<Option<ObjectView>, String> {
        self.0.network_policy(namespace, name)
    }
}

impl ReadBaselines for Vec<LiveBaseline> {
    fn read(&self) -> Result<Vec<LiveBaselineRef<'_>>, String> {
        Ok(self.iter().map(LiveBaselineRef::of).collect())
    }
}

impl ReadObject for ObjectView {
    fn read(&self) -> Result<ObjectRef<'_>, String> {
        Ok(ObjectRef::of(self))
    }
}

pub(crate) struct Host<'s>(pub &'s dyn HostCapabilities);

/// The JSON text of a `list_resources_all` answer.
pub(crate) struct ListJson(Vec<u8>);

/// The JSON text of a `get_resource` answer.
pub(crate) struct ObjectJson(Vec<u8>);

impl Cluster for Host<'_> {
    type Live = ListJson;
    type Object = ObjectJson;

    fn baselines(&self) -> Result<ListJson, String> {
        self.0.list_baselines().map(ListJson)
    }

    fn namespace(&self, name: &str) -> Result<ObjectJson, String> {
        self.0.get_namespace(name).map(ObjectJson)
    }

    fn network_policy(&self, namespace: &str, name: &str) -> Result<Option<ObjectJson>, String> {
        match self.0.get_network_policy(namespace, name) {
            Ok(answer) => Ok(Some(ObjectJson(answer))),
            Err(error) if is_not_found(&error) => Ok(None),
            Err(error) => Err(error),
        }
    }
}

impl ReadBaselines for ListJson {
    fn read(&self) -> Result<Vec<LiveBaselineRef<'_>>, String> {
        serde_json::from_slice::<k8s_openapi::List<LiveBaselineRef<'_>>>(&self.0)
            .map(|list| list.items)
            // As the SDK's `list_all_resources` says it.
            .map_err(|error| format!("error deserializing list all resources response: {error}"))
    }
}

impl ReadObject for ObjectJson {
    fn read(&self) -> Result<ObjectRef<'_>, String> {
        std::str::from_utf8(&self.0)
            .map_err(|error| error.to_string())
            .and_then(|text| {
                serde_json::from_slice(text.as_bytes()).map_err(|error| error.to_string())
            })
    }
}
