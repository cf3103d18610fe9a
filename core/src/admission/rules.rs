//! One pure function per admission case. Each message names the object, the rule, and what
//! to do instead.

use super::{Guard, LiveBaseline, ObjectView, Verdict};
use crate::identity::{BASELINE_LABEL, MANAGED_BY_LABEL, baseline_label_value, claims_management};
use crate::wall::canonical_json;

/// Reads the live baselines: `Ok(None)` when the policy is not context-aware.
pub type LiveBaselines = Result<Option<Vec<LiveBaseline>>, String>;

const HOW_TO_LEAVE: &str = "to take a namespace out of the baseline, change the NamespaceBaseline's namespaceLabel; to remove the wall everywhere, delete the NamespaceBaseline with deletionPolicy: Delete";

fn policy_ref(policy: &ObjectView) -> String {
    format!(
        "NetworkPolicy {:?} in namespace {:?}",
        policy.metadata.name, policy.metadata.namespace
    )
}

fn baseline_of(policy: &ObjectView) -> &str {
    policy
        .metadata
        .labels
        .get(BASELINE_LABEL)
        .map_or("(unnamed)", String::as_str)
}

/// CREATE: only the reconciler may create a policy that claims to be managed.
pub fn review_policy_create(new: &ObjectView) -> Verdict {
    if !claims_management(&new.metadata.labels) {
        return Verdict::Allow;
    }
    Verdict::Deny(format!(
        "{} carries the labels {MANAGED_BY_LABEL}=namespace-baseline or {BASELINE_LABEL}, which only the Namespace Baseline reconciler may set: remove them to create your own policy, or let a NamespaceBaseline install the wall",
        policy_ref(new)
    ))
}

/// UPDATE: a managed policy keeps its spec and its managed labels; annotations and other
/// labels may change. An unmanaged policy may not start claiming to be managed.
pub fn review_policy_update(old: &ObjectView, new: &ObjectView) -> Verdict {
    if !claims_management(&old.metadata.labels) {
        return review_policy_create(new);
    }
    if canonical_json(&old.spec) != canonical_json(&new.spec) {
        return Verdict::Deny(format!(
            "{} is part of the network wall of NamespaceBaseline {:?}; its spec cannot be changed (the reconciler would restore it). Add your own NetworkPolicy next to it to allow more traffic, or change the NamespaceBaseline",
            policy_ref(old),
            baseline_of(old)
        ));
    }
    for label in [MANAGED_BY_LABEL, BASELINE_LABEL] {
        let before = old.metadata.labels.get(label);
        if before.is_some() && new.metadata.labels.get(label) != before {
            return Verdict::Deny(format!(
                "{} is part of the network wall of NamespaceBaseline {:?}; its label {label} cannot be removed or changed. Only annotations and other labels may be edited",
                policy_ref(old),
                baseline_of(old)
            ));
        }
    }
    Verdict::Allow
}

/// DELETE: a managed policy stays while its baseline exists. When the live baselines are
/// known and none owns it any more (the baseline was deleted with `deletionPolicy: Orphan`),
/// the orphan may go.
pub fn review_policy_delete(old: &ObjectView, live: impl FnOnce() -> LiveBaselines) -> Verdict {
    if !claims_management(&old.metadata.labels) {
        return Verdict::Allow;
    }
    let owner = old.metadata.labels.get(BASELINE_LABEL);
    let deny = |extra: &str| {
        Verdict::Deny(format!(
            "{} is part of the network wall of NamespaceBaseline {:?} and cannot be deleted{extra}; {HOW_TO_LEAVE}",
            policy_ref(old),
            baseline_of(old)
        ))
    };
    let Some(owner) = owner else {
        return deny("");
    };
    match live() {
        Ok(Some(baselines)) => {
            let owned = baselines
                .iter()
                .any(|baseline| baseline_label_value(&baseline.metadata.name) == *owner);
            if owned { deny("") } else { Verdict::Allow }
        }
        Ok(None) => deny(""),
        Err(error) => deny(&format!(
            " (the live NamespaceBaselines could not be read: {error})"
        )),
    }
}

/// UPDATE of a Namespace: it may not stop matching a guard it matched. The guards from
/// the settings are checked first; the live baselines are read only when labels changed
/// and the settings alone allow the update.
pub fn review_namespace_update(
    old: &ObjectView,
    new: &ObjectView,
    guards: &[Guard],
    live: impl FnOnce() -> LiveBaselines,
) -> Verdict {
    let (before, after) = (&old.metadata.labels, &new.metadata.labels);
    if before == after {
        return Verdict::Allow;
    }
    let leaves = |guard: &Guard| guard.selector.matches(before) && !guard.selector.matches(after);
    let deny = |guard: &Guard| {
        Verdict::Deny(format!(
            "namespace {:?} is guarded by {guard}: this change to its labels would take it out of the baseline and leave its network wall unmanaged. Keep the label {}, or ask the platform team to change the NamespaceBaseline",
            old.metadata.name, guard.selector
        ))
    };
    if let Some(guard) = guards.iter().find(|guard| leaves(guard)) {
        return deny(guard);
    }
    match live() {
        Ok(None) => Verdict::Allow,
        Ok(Some(baselines)) => baselines
            .iter()
            // Only a baseline whose label key the namespace had can be left; skipping the
            // others before parsing keeps a cluster with many baselines cheap to check.
            .filter(|baseline| before.contains_key(label_key(&baseline.spec.namespace_label)))
            .filter_map(LiveBaseline::guard)
            .find(|guard| leaves(guard))
            .map_or(Verdict::Allow, |guard| deny(&guard)),
        // Fail closed, but only for label changes: the gate cannot tell whether this one
        // leaves a baseline, and a retry is cheap.
        Err(error) => Verdict::Deny(format!(
            "namespace {:?}: its labels changed and the live NamespaceBaselines could not be read to check them ({error}); retry, or ask the platform team",
            old.metadata.name
        )),
    }
}

/// The key part of a `namespaceLabel` (whether or not the rest is valid).
fn label_key(namespace_label: &str) -> &str {
    namespace_label
        .split_once('=')
        .map_or(namespace_label, |(key, _)| key)
}
