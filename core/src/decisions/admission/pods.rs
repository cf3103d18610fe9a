//! Pods wait for their wall (`podsWaitForWall`): a Pod CREATE in a namespace that a live
//! `Enforce` NamespaceBaseline guards is refused until that baseline's wall (its deny-all,
//! and its DNS door when `allowDNS`) exists in the API. It closes the window between a
//! namespace starting to match a baseline and the reconciler installing its wall, in which a
//! pod would otherwise start unwalled (docs/design.md, "Pods wait for their wall").
//!
//! Unguarded namespaces are the hot path: the live baselines are read first (the
//! policy-server answers from a watch), the Namespace only when some baseline enforces a wall,
//! and no NetworkPolicy at all unless a baseline guards the namespace.

use super::host::{ReadBaselines, ReadObject};
use super::verdict::Verdict;
use super::view::{LiveBaselineRef, ObjectRef};
use crate::vocabulary::identity::{
    BASELINE_LABEL, deny_all_policy_name, dns_policy_name, is_labelled_for,
};

/// One NetworkPolicy of a baseline's wall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WallPart {
    DenyAll,
    DnsDoor,
}

impl WallPart {
    /// Its name in every namespace the baseline `baseline` guards (as the reconciler names it).
    fn name(self, baseline: &str) -> String {
        match self {
            Self::DenyAll => deny_all_policy_name(baseline),
            Self::DnsDoor => dns_policy_name(baseline),
        }
    }

    fn role(self) -> &'static str {
        match self {
            Self::DenyAll => "its deny-all",
            Self::DnsDoor => "its DNS door (allowDNS: true)",
        }
    }

    /// The parts of `baseline`'s wall, in the order they are checked.
    fn of(baseline: &LiveBaselineRef<'_>) -> &'static [Self] {
        if baseline.spec.allow_dns {
            &[Self::DenyAll, Self::DnsDoor]
        } else {
            &[Self::DenyAll]
        }
    }
}

/// A read of this rule through the policy-server's host capabilities, and the permission of
/// the policy-server's ServiceAccount it needs.
#[derive(Clone, Copy)]
enum Read {
    Baselines,
    Namespace,
    NetworkPolicy,
}

impl Read {
    fn permission(self) -> &'static str {
        match self {
            Self::Baselines => "list and watch on namespacebaselines.hedronite.io",
            Self::Namespace => "get on namespaces",
            Self::NetworkPolicy => "get on networkpolicies.networking.k8s.io",
        }
    }
}

/// The pod as a message names it: by name, or by `generateName` (a controller's pods have no
/// name yet when they are admitted).
pub(crate) fn pod_ref(pod: Option<&ObjectRef<'_>>, request_name: &str) -> String {
    let metadata = pod.map(|pod| &pod.metadata);
    let name = metadata
        .map(|metadata| &*metadata.name)
        .filter(|name| !name.is_empty())
        .unwrap_or(request_name);
    if !name.is_empty() {
        return format!("pod {name:?}");
    }
    match metadata
        .and_then(|metadata| metadata.other.get("generateName"))
        .and_then(|value| value.as_str())
    {
        Some(prefix) => format!("pod {prefix:?}... (generateName)"),
        None => "a pod".to_owned(),
    }
}

/// Whether the pod `pod` of `namespace` runs as the ServiceAccount whose username is
/// `username` (`system:serviceaccount:<namespace>:<name>`; a pod without
/// `serviceAccountName` runs as `default`).
///
/// The reconciler's own pod never waits: its namespace is usually guarded (deploy/'s
/// `namespace-baseline-system`), and its wall is installed by the reconciler alone, so
/// waiting would keep a first install (or any moment without a running reconciler and its
/// wall) from ever starting it. This lets through no one who could not already act as the
/// reconciler: whoever may create a pod running as its ServiceAccount holds its token.
pub(crate) fn runs_as(pod: Option<&ObjectRef<'_>>, namespace: &str, username: &str) -> bool {
    let Some(account) = username
        .strip_prefix("system:serviceaccount:")
        .and_then(|account| account.strip_prefix(namespace))
        .and_then(|account| account.strip_prefix(':'))
    else {
        return false;
    };
    let spec = pod.and_then(|pod| pod.spec.as_object());
    let name = spec
        .and_then(|spec| spec.get("serviceAccountName"))
        .and_then(|name| name.as_str())
        .filter(|name| !name.is_empty())
        .unwrap_or("default");
    !namespace.is_empty() && name == account
}

/// CREATE of a Pod in `namespace` (`pod` names it for messages). `live` reads the live
/// baselines (`Ok(None)`: the policy is not context-aware, and then nothing is known to
/// guard the namespace), `read_namespace` the Namespace's labels, `read_policy` a
/// NetworkPolicy of `namespace` by name (`Ok(None)`: it does not exist). Each is called only
/// when its answer can change the verdict.
///
/// Fail-closed: when a read fails and the namespace could be guarded, the pod is refused with
/// what failed and the permission it needs.
pub(crate) fn review_pod_create<A: ReadBaselines, N: ReadObject, P: ReadObject>(
    pod: &str,
    namespace: &str,
    live: impl FnOnce() -> Result<Option<A>, String>,
    read_namespace: impl FnOnce() -> Result<N, String>,
    read_policy: impl Fn(&str) -> Result<Option<P>, String>,
) -> Verdict {
    let unchecked = |read: Read, what: &str, error: &str| {
        Verdict::Deny(format!(
            "{pod} cannot be created in namespace {namespace:?} yet: {what} could not be read ({error}), so the policy cannot tell whether the namespace's network wall is in place, and podsWaitForWall refuses what it cannot check. The policy-server's ServiceAccount needs {} (deploy/policy-server-rbac.yaml); the pod's controller retries on its own, or retry, or ask the platform team",
            read.permission()
        ))
    };
    let answer = match live() {
        Ok(Some(answer)) => answer,
        Ok(None) => return Verdict::Allow,
        Err(error) => return unchecked(Read::Baselines, "the live NamespaceBaselines", &error),
    };
    let baselines = match answer.read() {
        Ok(baselines) => baselines,
        Err(error) => return unchecked(Read::Baselines, "the live NamespaceBaselines", &error),
    };
    // No baseline enforces a wall anywhere: nothing to wait for, and the Namespace is not read.
    if !baselines.iter().any(|baseline| baseline.guard().is_some()) {
        return Verdict::Allow;
    }
    let answer = match read_namespace() {
        Ok(answer) => answer,
        Err(error) => return unchecked(Read::Namespace, "the Namespace", &error),
    };
    let view = match answer.read() {
        Ok(view) => view,
        Err(error) => return unchecked(Read::Namespace, "the Namespace", &error),
    };
    let labels = &view.metadata.labels;
    // Every baseline that guards the namespace owes it a wall; checked by name, so that the
    // verdict and its message do not depend on the order the host lists them in. (Picked one
    // by one rather than sorted: a namespace has one guard, rarely two, and a sort would add
    // its code to the module.)
    let guards = |baseline: &&LiveBaselineRef<'_>| {
        baseline
            .guard()
            .is_some_and(|guard| guard.matches(labels, namespace))
    };
    let mut after: Option<&str> = None;
    while let Some(baseline) = baselines
        .iter()
        .filter(guards)
        .filter(|baseline| after.is_none_or(|last| *baseline.metadata.name > *last))
        .min_by(|a, b| a.metadata.name.cmp(&b.metadata.name))
    {
        after = Some(&baseline.metadata.name);
        let name: &str = &baseline.metadata.name;
        let Some(guard) = baseline.guard() else {
            continue;
        };
        for part in WallPart::of(baseline) {
            let policy = part.name(name);
            // Only the reconciler may create a policy carrying its labels (the CREATE rule),
            // so a policy of that name without them is somebody else's, not the wall.
            let found = read_policy(&policy).and_then(|answer| {
                answer.map_or(Ok(None), |answer| {
                    answer.read().map(|found| {
                        Some(
                            found
                                .metadata
                                .labels
                                .get(BASELINE_LABEL)
                                .is_some_and(|owner| is_labelled_for(name, owner)),
                        )
                    })
                })
            });
            let why = match found {
                Ok(Some(true)) => continue,
                Ok(Some(false)) => {
                    "exists but is not the reconciler's (it lacks the labels the reconciler gives the wall)"
                }
                Ok(None) => "does not exist",
                Err(error) => {
                    return unchecked(
                        Read::NetworkPolicy,
                        &format!("NetworkPolicy {policy:?} of NamespaceBaseline {name:?}"),
                        &error,
                    );
                }
            };
            return Verdict::Deny(format!(
                "{pod} cannot be created in namespace {namespace:?} yet: the namespace is guarded by {guard}, and its network wall is not in place: NetworkPolicy {policy:?} ({}) {why}. This is temporary: the Namespace Baseline reconciler installs the wall moments after a namespace matches, and the pod's controller (ReplicaSet, Job, DaemonSet, StatefulSet) retries on its own; a pod created by hand can be created again once `kubectl get networkpolicy -n {namespace}` lists {policy:?}. If it does not appear, check that the reconciler is running (podsWaitForWall keeps pods out of guarded namespaces until their wall exists)",
                part.role()
            ));
        }
    }
    Verdict::Allow
}
