//! One pure function per admission case. Each message names the object, the rule, and what
//! to do instead.

use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule,
};

use super::{Guard, HolesSetting, LiveBaseline, ObjectView, Verdict};
use crate::holes::{Direction, Hole, Width, holes};
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

/// At most this many holes are named in one denial or as separate warnings; the rest are
/// counted (the API server truncates long warnings and drops many).
pub const MAX_HOLES_LISTED: usize = 5;

/// One rule of a NetworkPolicy, for telling whether an UPDATE changed it.
#[derive(PartialEq)]
enum Rule<'a> {
    Ingress(&'a NetworkPolicyIngressRule),
    Egress(&'a NetworkPolicyEgressRule),
}

fn rule_of<'a>(policy: &'a NetworkPolicy, hole: &Hole) -> Option<Rule<'a>> {
    let spec = policy.spec.as_ref()?;
    match hole.direction {
        Direction::Ingress => spec.ingress.as_ref()?.get(hole.rule).map(Rule::Ingress),
        Direction::Egress => spec.egress.as_ref()?.get(hole.rule).map(Rule::Egress),
    }
}

/// The `World` and `Cluster` holes `new` opens that `old` (the stored object of an UPDATE)
/// did not already open: a breach counts as already open when `old` had a breach in the same
/// direction through an identical rule (the rule's place in the list may have moved). A
/// managed policy opens none ([`holes`]).
pub fn opened_breaches(new: &NetworkPolicy, old: Option<&NetworkPolicy>) -> Vec<Hole> {
    let already: Vec<Rule<'_>> = old.map_or_else(Vec::new, |old| {
        holes(old)
            .iter()
            .filter(|hole| hole.width.is_breach())
            .filter_map(|hole| rule_of(old, hole))
            .collect()
    });
    holes(new)
        .into_iter()
        .filter(|hole| hole.width.is_breach())
        .filter(|hole| rule_of(new, hole).is_none_or(|rule| !already.contains(&rule)))
        .collect()
}

/// The guard that walls `namespace`: the settings' guards first; then, when the policy is
/// context-aware, the live baselines' (read only if no settings guard matched). `Ok(None)`:
/// no baseline covers it.
pub fn walling_guard(
    namespace: &ObjectView,
    guards: &[Guard],
    live: impl FnOnce() -> LiveBaselines,
) -> Result<Option<Guard>, String> {
    let labels = &namespace.metadata.labels;
    if let Some(guard) = guards.iter().find(|guard| guard.selector.matches(labels)) {
        return Ok(Some(guard.clone()));
    }
    Ok(live()?.and_then(|baselines| {
        baselines
            .iter()
            // Only a baseline whose label key the namespace carries can match it.
            .filter(|baseline| labels.contains_key(label_key(&baseline.spec.namespace_label)))
            .filter_map(LiveBaseline::guard)
            .find(|guard| guard.selector.matches(labels))
    }))
}

/// What to write instead of a hole this wide, for people.
fn instead(width: Width) -> &'static str {
    match width {
        Width::Cluster => {
            "select the namespaces the rule is for by label (namespaceSelector.matchLabels), or the pods (podSelector), rather than every namespace (namespaceSelector: {})"
        }
        _ => {
            "name the peers the rule is for rather than any address: pods (podSelector), namespaces by label (namespaceSelector.matchLabels), or an ipBlock narrower than 0.0.0.0/0 and ::/0"
        }
    }
}

/// The same, short enough for a warning.
fn instead_briefly(width: Width) -> &'static str {
    match width {
        Width::Cluster => "select namespaces by label instead of namespaceSelector: {}",
        _ => "name its peers instead (pods, labelled namespaces, or a narrower ipBlock)",
    }
}

/// Who walls the namespace, short enough for a warning.
fn walled_by(guard: &Guard) -> String {
    match &guard.baseline {
        Some(name) => format!("NamespaceBaseline {name:?}"),
        None => format!("the guard label {}", guard.selector),
    }
}

/// CREATE or UPDATE of a NetworkPolicy the wall's own rules allow: whether it opens a
/// `World` or `Cluster` hole in a walled namespace, and what the `holes` setting does about
/// it. `old` is the stored object of an UPDATE: only breaches it did not already open count
/// ([`opened_breaches`]), so an UPDATE that leaves an existing breach as it was (a label, a
/// finalizer, another rule) is not refused for it; the reconciler's `Sealed` condition
/// reports the breach.
///
/// `namespace` is read (a host call) only when there is a breach to report, and the live
/// baselines only when no settings guard walls it. When the namespace (or the live
/// baselines) cannot be read, the request is accepted with a warning that says so, whatever
/// the setting: a hole is not the wall itself, the reconciler reports it anyway, and failing
/// closed would refuse such policies in every namespace, walled or not, while the API server
/// is unreachable.
pub fn review_policy_holes(
    new: &NetworkPolicy,
    old: Option<&NetworkPolicy>,
    setting: HolesSetting,
    namespace: &str,
    read_namespace: impl FnOnce() -> Result<ObjectView, String>,
    guards: &[Guard],
    live: impl FnOnce() -> LiveBaselines,
) -> Verdict {
    if setting == HolesSetting::Ignore {
        return Verdict::Allow;
    }
    let opened = opened_breaches(new, old);
    let Some(first) = opened.first() else {
        return Verdict::Allow;
    };
    let more = opened.len() - 1;
    let walled = read_namespace().and_then(|view| walling_guard(&view, guards, live));
    let guard = match walled {
        Ok(Some(guard)) => guard,
        Ok(None) => return Verdict::Allow,
        Err(error) => {
            return Verdict::Warn(vec![format!(
                "could not check whether namespace {namespace:?} is walled ({error}); if it is, {first}{}",
                match more {
                    0 => String::new(),
                    more => format!(" (and {})", more_breaches(more)),
                }
            )]);
        }
    };
    let listed = &opened[..opened.len().min(MAX_HOLES_LISTED)];
    let unlisted = opened.len() - listed.len();
    let policy = new.metadata.name.as_deref().unwrap_or_default();
    match setting {
        HolesSetting::Deny => {
            let mut named: Vec<String> = listed.iter().map(ToString::to_string).collect();
            if unlisted > 0 {
                named.push(format!("and {}", more_breaches(unlisted)));
            }
            let advice: Vec<&str> = [Width::World, Width::Cluster]
                .into_iter()
                .filter(|width| opened.iter().any(|hole| hole.width == *width))
                .map(instead)
                .collect();
            Verdict::Deny(format!(
                "namespace {namespace:?} is walled by {guard}, and {}: {}. To allow only what is needed, {}. (The policy setting holes: Deny refuses World and Cluster holes in walled namespaces; an exempt identity may still write them)",
                match opened.len() {
                    1 => "this opens its wall".to_owned(),
                    count => format!("this opens its wall in {count} places"),
                },
                named.join("; "),
                advice.join("; and ")
            ))
        }
        HolesSetting::Warn | HolesSetting::Ignore => {
            let mut warnings: Vec<String> = listed
                .iter()
                .map(|hole| {
                    format!(
                        "{hole} in namespace {namespace:?}, walled by {}: {}",
                        walled_by(&guard),
                        instead_briefly(hole.width)
                    )
                })
                .collect();
            if unlisted > 0 {
                warnings.push(format!(
                    "NetworkPolicy {policy} opens {} in namespace {namespace:?}",
                    more_breaches(unlisted)
                ));
            }
            Verdict::Warn(warnings)
        }
    }
}

fn more_breaches(count: usize) -> String {
    format!(
        "{count} more World or Cluster hole{}",
        if count == 1 { "" } else { "s" }
    )
}
