//! One pure function per admission case. Each message names the object, the rule, and what
//! to do instead.

use super::baselines::LiveBaseline;
use super::holes_setting::HolesSetting;
use super::host::{Cluster, ReadBaselines, ReadObject};
use super::netpol::{self, SPEC};
use super::pods;
use super::settings::{Decider, Exemption};
use super::verdict::Verdict;
use super::view::{
    GuardRef, Labels, LiveBaselineRef, ObjectRef, RequestRef, Selection, claims_management,
};
use crate::network::engine::canonical_eq;
use crate::network::hole::{Direction, Hole, Width};
use crate::vocabulary::identity::{
    BASELINE_LABEL, MANAGED_BY_LABEL, POD_GATE_LABEL, is_labelled_for,
};
use crate::vocabulary::json::Json;
use crate::vocabulary::selector::is_system_namespace;

/// Reads the live baselines: `Ok(None)` when the policy is not context-aware.
pub type LiveBaselines = Result<Option<Vec<LiveBaseline>>, String>;

/// The live baselines, read when the rules need them: `Ok(None)` when the policy is not
/// context-aware.
type Live<A> = Result<Option<A>, String>;

const HOW_TO_LEAVE: &str = "to take a namespace out of the baseline, change the NamespaceBaseline's namespaceLabel or namespaceSelector; to remove the wall everywhere, delete the NamespaceBaseline with deletionPolicy: Delete";

/// The API server's own identity: it re-creates the namespaces it owns (`kube-node-lease`,
/// `kube-public`) when they are missing, which a selector always excludes.
pub const API_SERVER_USER: &str = "system:apiserver";

/// Reviews a request, as far as the requester's exemption leaves it to the rules.
pub(crate) fn review(
    request: &RequestRef<'_>,
    decider: &Decider<'_>,
    cluster: &impl Cluster,
) -> Verdict {
    let deletes = *request.operation == *"DELETE";
    match decider.exemption {
        Exemption::Everything => return Verdict::Allow,
        Exemption::Deletes if deletes => return Verdict::Allow,
        _ => {}
    }
    let verdict = review_rules(request, decider, cluster);
    // The namespace controller's DELETE is read against its namespace only when a rule
    // refused it (most of what it deletes is no managed policy): allowed while the
    // namespace is being deleted, refused as anyone's otherwise.
    if decider.exemption == Exemption::DeletesInTerminatingNamespace
        && deletes
        && !verdict.is_allowed()
        && is_terminating(&request.namespace, cluster)
    {
        return Verdict::Allow;
    }
    verdict
}

/// Whether the namespace `name` is being deleted (it has a `deletionTimestamp`). One that
/// cannot be read is not known to be.
fn is_terminating(name: &str, cluster: &impl Cluster) -> bool {
    cluster.namespace(name).is_ok_and(|answer| {
        answer.read().is_ok_and(|namespace| {
            namespace
                .metadata
                .other
                .get("deletionTimestamp")
                .is_some_and(|stamp| !stamp.is_null())
        })
    })
}

/// Reviews a request under the rules alone.
fn review_rules(
    request: &RequestRef<'_>,
    decider: &Decider<'_>,
    cluster: &impl Cluster,
) -> Verdict {
    let live = || {
        if decider.context_aware {
            cluster.baselines().map(Some)
        } else {
            Ok(None)
        }
    };
    let operation: &str = &request.operation;
    let (new, old) = (request.object.as_ref(), request.old_object.as_ref());
    if request.is_network_policy() {
        // The wall's own rules first; what they allow may still open a hole in it.
        let (verdict, opened) = match (operation, new, old) {
            ("CREATE", Some(new), _) => (review_policy_create(new), Some((new, None))),
            ("UPDATE", Some(new), Some(old)) => {
                (review_policy_update(old, new), Some((new, Some(old))))
            }
            ("DELETE", _, Some(old)) => (review_policy_delete(old, live), None),
            _ => (Verdict::Allow, None),
        };
        match (verdict, opened) {
            (Verdict::Allow, Some((new, old))) if decider.holes != HolesSetting::Ignore => {
                let namespace: &str = if request.namespace.is_empty() {
                    &new.metadata.namespace
                } else {
                    &request.namespace
                };
                let old = old.and_then(NetworkPolicy::of);
                match NetworkPolicy::of(new) {
                    Some(new) => review_policy_holes(
                        &new,
                        old.as_ref(),
                        decider.holes,
                        namespace,
                        || cluster.namespace(namespace),
                        &decider.guards,
                        live,
                    ),
                    // A spec that is not a NetworkPolicy's opens nothing we can name.
                    None => Verdict::Allow,
                }
            }
            (verdict, _) => verdict,
        }
    } else if request.is_namespace() {
        if decider.pods_wait_for_wall
            && let Some(denial) = review_pod_gate_label(new, old)
        {
            return denial;
        }
        match (operation, new, old) {
            ("UPDATE", Some(new), Some(old)) => {
                review_namespace_update(old, new, &decider.guards, live)
            }
            ("CREATE", Some(new), _) => {
                review_namespace_create(new, &request.user_info.username, &decider.guards, live)
            }
            _ => Verdict::Allow,
        }
    } else if request.is_pod() && operation == "CREATE" && decider.pods_wait_for_wall {
        let namespace: &str = match new {
            Some(pod) if request.namespace.is_empty() => &pod.metadata.namespace,
            _ => &request.namespace,
        };
        if pods::runs_as(new, namespace, decider.reconciler_username) {
            return Verdict::Allow;
        }
        pods::review_pod_create(
            &pods::pod_ref(new, &request.name),
            namespace,
            live,
            || cluster.namespace(namespace),
            |name| cluster.network_policy(namespace, name),
        )
    } else {
        Verdict::Allow
    }
}

fn policy_ref(policy: &ObjectRef<'_>) -> String {
    format!(
        "NetworkPolicy {:?} in namespace {:?}",
        policy.metadata.name, policy.metadata.namespace
    )
}

fn baseline_of<'p>(policy: &'p ObjectRef<'_>) -> &'p str {
    policy
        .metadata
        .labels
        .get(BASELINE_LABEL)
        .map_or("(unnamed)", |value| value)
}

/// CREATE: only the reconciler may create a policy that claims to be managed.
fn review_policy_create(new: &ObjectRef<'_>) -> Verdict {
    if !claims_management(&new.metadata.labels) {
        return Verdict::Allow;
    }
    Verdict::Deny(format!(
        "{} carries the labels {MANAGED_BY_LABEL}=namespace-baseline or {BASELINE_LABEL}, which only the Namespace Baseline reconciler may set: remove them to create your own policy, or let a NamespaceBaseline install the wall",
        policy_ref(new)
    ))
}

/// Why a field of a managed policy's metadata may not change, for the fields where it is
/// not obvious.
fn why_guarded(field: &str) -> &'static str {
    match field {
        "ownerReferences" => {
            " (an owner reference would let the garbage collector delete the wall)"
        }
        "finalizers" => {
            " (a finalizer would hold up the wall's removal and its namespace's deletion; finalizers may only be removed once the policy is being deleted)"
        }
        _ => "",
    }
}

/// UPDATE: a managed policy keeps its spec, its managed labels and every field of its
/// metadata but its other labels and its annotations (the fields the API server sets aside,
/// and finalizers being removed from a policy that is being deleted). An unmanaged policy
/// may not start claiming to be managed.
fn review_policy_update(old: &ObjectRef<'_>, new: &ObjectRef<'_>) -> Verdict {
    if !claims_management(&old.metadata.labels) {
        return review_policy_create(new);
    }
    // Compared as the reconciler's drift check compares (`canonical_json`).
    if !canonical_eq(&old.spec, &new.spec) {
        return Verdict::Deny(format!(
            "{} is part of the network wall of NamespaceBaseline {:?}; its spec cannot be changed (the reconciler would restore it). Add your own NetworkPolicy next to it to allow more traffic, or change the NamespaceBaseline",
            policy_ref(old),
            baseline_of(old)
        ));
    }
    let edit_instead = format!(
        "Only annotations and labels other than {MANAGED_BY_LABEL} and {BASELINE_LABEL} may be edited"
    );
    for label in [MANAGED_BY_LABEL, BASELINE_LABEL] {
        let before = old.metadata.labels.get(label);
        if new.metadata.labels.get(label) != before {
            return Verdict::Deny(format!(
                "{} is part of the network wall of NamespaceBaseline {:?}; its label {label} cannot be {}. {edit_instead}",
                policy_ref(old),
                baseline_of(old),
                if before.is_some() {
                    "removed or changed"
                } else {
                    "added"
                }
            ));
        }
    }
    // The metadata reader kept only the fields the rules compare, and `deletionTimestamp`,
    // which the API server sets and which is read, not compared.
    let (before, after) = (&old.metadata.other, &new.metadata.other);
    let changed = before
        .keys()
        .chain(after.keys())
        .map(|field| &**field)
        .filter(|field| *field != "deletionTimestamp")
        .find(|field| {
            let (before, after) = (before.get(*field), after.get(*field));
            !(metadata_eq(before, after)
                || (*field == "finalizers" && finalizers_removed_in_deletion(old, before, after)))
        });
    match changed {
        Some(field) => Verdict::Deny(format!(
            "{} is part of the network wall of NamespaceBaseline {:?}; its metadata.{field} cannot be changed{}. {edit_instead}",
            policy_ref(old),
            baseline_of(old),
            why_guarded(field)
        )),
        None => Verdict::Allow,
    }
}

/// Whether two values of a metadata field are the same, an absent field, `null` and an
/// empty list or map being the same nothing (as the API server stores them).
fn metadata_eq(a: Option<&Json<'_>>, b: Option<&Json<'_>>) -> bool {
    let nothing = |value: Option<&Json<'_>>| {
        value.is_none_or(|value| match value {
            Json::Null => true,
            Json::Array(items) => items.is_empty(),
            Json::Object(map) => map.is_empty(),
            _ => false,
        })
    };
    match (a, b) {
        (Some(a), Some(b)) => canonical_eq(a, b) || (nothing(Some(a)) && nothing(Some(b))),
        (a, b) => nothing(a) && nothing(b),
    }
}

/// Whether `after` only takes finalizers away from `before`, on a policy that is being
/// deleted (its deletion waits for them: the garbage collector's `foregroundDeletion`).
fn finalizers_removed_in_deletion(
    old: &ObjectRef<'_>,
    before: Option<&Json<'_>>,
    after: Option<&Json<'_>>,
) -> bool {
    let deleting = old
        .metadata
        .other
        .get("deletionTimestamp")
        .is_some_and(|stamp| !stamp.is_null());
    let names = |value: Option<&Json<'_>>| -> Option<Vec<String>> {
        match value {
            None | Some(Json::Null) => Some(Vec::new()),
            Some(Json::Array(items)) => items
                .iter()
                .map(|item| item.as_str().map(str::to_owned))
                .collect(),
            Some(_) => None,
        }
    };
    deleting
        && names(before)
            .zip(names(after))
            .is_some_and(|(before, after)| after.iter().all(|name| before.contains(name)))
}

/// [`POD_GATE_LABEL`] keeps a namespace's pods away from the Pod rule's webhook: only an exempt
/// identity (which never reaches the rules) may set, change or remove it, else a tenant could
/// take its own namespace out of the gate, at its creation or later.
fn review_pod_gate_label(
    new: Option<&ObjectRef<'_>>,
    old: Option<&ObjectRef<'_>>,
) -> Option<Verdict> {
    let label = |object: Option<&ObjectRef<'_>>| {
        object.and_then(|object| {
            object
                .metadata
                .labels
                .get(POD_GATE_LABEL)
                .map(|v| v.to_string())
        })
    };
    let name = new.or(old).map_or("", |object| &*object.metadata.name);
    (label(new) != label(old)).then(|| {
        Verdict::Deny(format!(
            "namespace {name:?}: the label {POD_GATE_LABEL} keeps a namespace's pods away from the pod gate (podsWaitForWall), so only the platform team's exempt identities may set, change or remove it"
        ))
    })
}

/// DELETE: a managed policy stays while its baseline exists. When the live baselines are
/// known and none owns it any more (the baseline was deleted with `deletionPolicy: Orphan`),
/// the orphan may go.
fn review_policy_delete<A: ReadBaselines>(
    old: &ObjectRef<'_>,
    live: impl FnOnce() -> Live<A>,
) -> Verdict {
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
    let answer = match live() {
        Ok(Some(answer)) => answer,
        Ok(None) => return deny(""),
        Err(error) => return unreadable(&error, deny),
    };
    match answer.read() {
        Ok(baselines) => {
            // The first baseline that owns it decides.
            let owned = baselines
                .iter()
                .any(|baseline| is_labelled_for(&baseline.metadata.name, owner));
            if owned { deny("") } else { Verdict::Allow }
        }
        Err(error) => unreadable(&error, deny),
    }
}

fn unreadable(error: &str, deny: impl Fn(&str) -> Verdict) -> Verdict {
    deny(&format!(
        " (the live NamespaceBaselines could not be read: {error})"
    ))
}

/// UPDATE of a Namespace: it may not stop matching a guard it matched (whatever the
/// guard's form: dropping a `namespaceLabel`, adding an opt-out label a `DoesNotExist` term
/// reads, changing a label a `NotIn` or `In` term reads). The guards from the settings are
/// checked first; the live baselines are read only when labels changed and the settings
/// alone allow the update.
fn review_namespace_update<A: ReadBaselines>(
    old: &ObjectRef<'_>,
    new: &ObjectRef<'_>,
    guards: &[GuardRef<'_>],
    live: impl FnOnce() -> Live<A>,
) -> Verdict {
    let (before, after) = (&old.metadata.labels, &new.metadata.labels);
    if before == after {
        return Verdict::Allow;
    }
    let name: &str = &old.metadata.name;
    let leaves = |guard: &GuardRef<'_>| guard.matches(before, name) && !guard.matches(after, name);
    let deny = |guard: &GuardRef<'_>| {
        let keep = match &guard.selection {
            Selection::Label(..) => format!("Keep the label {}", guard.selection),
            Selection::Selector(_) => format!(
                "It would no longer meet {}: undo that change",
                guard.unmet(after, name).unwrap_or_default()
            ),
        };
        Verdict::Deny(format!(
            "namespace {name:?} is guarded by {guard}: this change to its labels would take it out of the baseline and leave its network wall unmanaged. {keep}, or ask the platform team to change the NamespaceBaseline"
        ))
    };
    if let Some(guard) = guards.iter().find(|guard| leaves(guard)) {
        return deny(guard);
    }
    // Fail closed, but only for label changes: the gate cannot tell whether this one
    // leaves a baseline, and a retry is cheap.
    let failed = |error: &str| {
        Verdict::Deny(format!(
            "namespace {name:?}: its labels changed and the live NamespaceBaselines could not be read to check them ({error}); retry, or ask the platform team"
        ))
    };
    let answer = match live() {
        Ok(None) => return Verdict::Allow,
        Ok(Some(answer)) => answer,
        Err(error) => return failed(&error),
    };
    match answer.read() {
        Ok(baselines) => {
            first_guard(&baselines, before, leaves).map_or(Verdict::Allow, |guard| deny(&guard))
        }
        Err(error) => failed(&error),
    }
}

/// CREATE of a Namespace: a guard that covers every new namespace (an "every namespace
/// except..." selector) may not be left by creating a namespace it excludes, already
/// carrying an opt-out label or named like an excluded namespace (its
/// `kubernetes.io/metadata.name` listed by a `NotIn` term): a tenant cannot opt out alone.
/// Exempt identities may (the rules never see their requests), and so may the API server
/// re-creating its own namespaces ([`API_SERVER_USER`]). A `namespaceLabel` covers only
/// the namespaces carrying it, so creating one without it is no way out. When the live
/// baselines cannot be read, a namespace created with labels of its own is refused (retry);
/// one without is allowed, so that a failed read does not stop every namespace creation.
fn review_namespace_create<A: ReadBaselines>(
    new: &ObjectRef<'_>,
    username: &str,
    guards: &[GuardRef<'_>],
    live: impl FnOnce() -> Live<A>,
) -> Verdict {
    let (labels, name) = (&new.metadata.labels, &*new.metadata.name);
    // No baseline covers a system namespace, so creating one is no way out of any.
    if username == API_SERVER_USER || is_system_namespace(name) {
        return Verdict::Allow;
    }
    let excludes =
        |guard: &GuardRef<'_>| guard.covers_new_namespaces() && !guard.matches(labels, name);
    let deny = |guard: &GuardRef<'_>| {
        Verdict::Deny(format!(
            "namespace {name:?} would be created outside {guard}, which walls every new namespace but those it excludes: it does not meet {}. Only an exempt identity may create a namespace the baseline leaves out: create it without that label or under another name, or ask the platform team",
            guard.unmet(labels, name).unwrap_or_default()
        ))
    };
    if let Some(guard) = guards.iter().find(|guard| excludes(guard)) {
        return deny(guard);
    }
    let own_labels = labels
        .keys()
        .any(|key| &**key != crate::vocabulary::selector::NAMESPACE_NAME_LABEL);
    let failed = |error: &str| {
        if own_labels {
            Verdict::Deny(format!(
                "namespace {name:?}: it is created with labels and the live NamespaceBaselines could not be read to check that none leaves it out of a baseline ({error}); retry, or ask the platform team"
            ))
        } else {
            Verdict::Allow
        }
    };
    let answer = match live() {
        Ok(None) => return Verdict::Allow,
        Ok(Some(answer)) => answer,
        Err(error) => return failed(&error),
    };
    match answer.read() {
        Ok(baselines) => baselines
            .iter()
            .filter_map(LiveBaselineRef::guard)
            .find(|guard| excludes(guard))
            .map_or(Verdict::Allow, |guard| deny(&guard)),
        Err(error) => failed(&error),
    }
}

/// The first live baseline's guard that `decides`, reading (and parsing the selector of)
/// only the baselines that may cover a namespace with these labels
/// ([`LiveBaselineRef::may_cover`]).
fn first_guard<'b>(
    baselines: &'b [LiveBaselineRef<'_>],
    labels: &Labels<'_>,
    decides: impl Fn(&GuardRef<'_>) -> bool,
) -> Option<GuardRef<'b>> {
    baselines
        .iter()
        .filter(|baseline| baseline.may_cover(labels))
        .filter_map(LiveBaselineRef::guard)
        .find(|guard| decides(guard))
}

/// At most this many holes are named in one denial or as separate warnings; the rest are
/// counted (the API server truncates long warnings and drops many).
pub const MAX_HOLES_LISTED: usize = 5;

/// A NetworkPolicy as the holes check reads it: its name, whether it is one of the wall's
/// own, and its spec when it has one. [`NetworkPolicy::of`] reads only objects whose spec
/// k8s-openapi would read as a `NetworkPolicySpec` ([`netpol`]).
struct NetworkPolicy<'v> {
    name: &'v str,
    managed: bool,
    spec: Option<&'v Json<'v>>,
}

impl<'v> NetworkPolicy<'v> {
    /// `None` when the spec is not a NetworkPolicy's (the holes check then has nothing it
    /// can name, and the request is allowed like any other it cannot read); no spec at all
    /// is a policy without one.
    fn of(object: &'v ObjectRef<'v>) -> Option<Self> {
        let spec = match &object.spec {
            Json::Null => None,
            spec if netpol::is_valid(spec, &SPEC) => Some(spec),
            _ => return None,
        };
        Some(Self {
            name: &object.metadata.name,
            managed: claims_management(&object.metadata.labels),
            spec,
        })
    }

    /// The holes it opens ([`crate::network::holes::holes`]): none for a managed policy.
    fn holes(&self) -> Vec<Hole> {
        match (self.spec, self.managed) {
            (Some(spec), false) => netpol::spec_holes(self.name, spec),
            _ => Vec::new(),
        }
    }

    /// The rule a hole of this policy comes from.
    fn rule_of(&self, hole: &Hole) -> Option<&'v Json<'v>> {
        netpol::rule(self.spec?, hole.direction, hole.rule)
    }
}

/// The `World` and `Cluster` holes `new` opens that `old` (the stored object of an UPDATE)
/// did not already open: a breach counts as already open when `old` had a breach in the same
/// direction through an identical rule (the rule's place in the list may have moved). A
/// managed policy opens none.
fn opened_breaches(new: &NetworkPolicy<'_>, old: Option<&NetworkPolicy<'_>>) -> Vec<Hole> {
    let already: Vec<(Direction, &Json<'_>)> = old.map_or_else(Vec::new, |old| {
        old.holes()
            .iter()
            .filter(|hole| hole.width.is_breach())
            .filter_map(|hole| old.rule_of(hole).map(|rule| (hole.direction, rule)))
            .collect()
    });
    new.holes()
        .into_iter()
        .filter(|hole| hole.width.is_breach())
        .filter(|hole| {
            new.rule_of(hole).is_none_or(|rule| {
                !already.iter().any(|(direction, before)| {
                    *direction == hole.direction && netpol::rules_equal(*direction, before, rule)
                })
            })
        })
        .collect()
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
fn walled_by(guard: &GuardRef<'_>) -> String {
    match guard.baseline {
        Some(name) => format!("NamespaceBaseline {name:?}"),
        None => match guard.selection {
            Selection::Label(..) => format!("the guard label {}", guard.selection),
            Selection::Selector(_) => format!("the guard selector {}", guard.selection),
        },
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
/// baselines) cannot be read, `Deny` means deny: the request is refused with a message that
/// says which read failed and which permission of the policy-server's ServiceAccount it
/// needs; `Warn` accepts it with a warning that says the same (a hole is not the wall
/// itself, and the reconciler reports it anyway).
fn review_policy_holes<N: ReadObject, A: ReadBaselines>(
    new: &NetworkPolicy<'_>,
    old: Option<&NetworkPolicy<'_>>,
    setting: HolesSetting,
    namespace: &str,
    read_namespace: impl FnOnce() -> Result<N, String>,
    guards: &[GuardRef<'_>],
    live: impl FnOnce() -> Live<A>,
) -> Verdict {
    if setting == HolesSetting::Ignore {
        return Verdict::Allow;
    }
    let opened = opened_breaches(new, old);
    let Some(first) = opened.first() else {
        return Verdict::Allow;
    };
    let unchecked = |read: Read, error: &str| {
        let more = match opened.len() - 1 {
            0 => String::new(),
            more => format!(" (and {})", more_breaches(more)),
        };
        let needs = read.permission();
        match setting {
            HolesSetting::Deny => Verdict::Deny(format!(
                "could not check whether namespace {namespace:?} is walled ({error}), and holes: Deny refuses a World or Cluster hole it cannot check: {first}{more}. The policy-server's ServiceAccount needs {needs} (deploy/policy-server-rbac.yaml); retry once it can read them, or ask the platform team"
            )),
            HolesSetting::Warn | HolesSetting::Ignore => Verdict::Warn(vec![format!(
                "could not check whether namespace {namespace:?} is walled ({error}); if it is, {first}{more}. The policy-server's ServiceAccount needs {needs}"
            )]),
        }
    };
    let walled = |guard: &GuardRef<'_>| holes_verdict(new, &opened, setting, namespace, guard);
    // The guard that walls the namespace: the settings' guards first; then, when the policy
    // is context-aware, the live baselines' (read only if no settings guard matched).
    let answer = match read_namespace() {
        Ok(answer) => answer,
        Err(error) => return unchecked(Read::Namespace, &error),
    };
    let view = match answer.read() {
        Ok(view) => view,
        Err(error) => return unchecked(Read::Namespace, &error),
    };
    let (labels, name) = (&view.metadata.labels, &*view.metadata.name);
    let name = if name.is_empty() { namespace } else { name };
    if let Some(guard) = guards.iter().find(|guard| guard.matches(labels, name)) {
        return walled(guard);
    }
    let answer = match live() {
        Ok(Some(answer)) => answer,
        Ok(None) => return Verdict::Allow,
        Err(error) => return unchecked(Read::Baselines, &error),
    };
    match answer.read() {
        Ok(baselines) => first_guard(&baselines, labels, |guard| guard.matches(labels, name))
            .map_or(Verdict::Allow, |guard| walled(&guard)),
        Err(error) => unchecked(Read::Baselines, &error),
    }
}

/// A read of the holes check through the policy-server's host capabilities.
#[derive(Clone, Copy)]
enum Read {
    Namespace,
    Baselines,
}

impl Read {
    /// The RBAC permission of the policy-server's ServiceAccount the read needs.
    fn permission(self) -> &'static str {
        match self {
            Self::Namespace => "get on namespaces",
            Self::Baselines => "list and watch on namespacebaselines.hedronite.io",
        }
    }
}

/// What the `holes` setting makes of the breaches a policy opens in a walled namespace.
fn holes_verdict(
    new: &NetworkPolicy<'_>,
    opened: &[Hole],
    setting: HolesSetting,
    namespace: &str,
    guard: &GuardRef<'_>,
) -> Verdict {
    let listed = &opened[..opened.len().min(MAX_HOLES_LISTED)];
    let unlisted = opened.len() - listed.len();
    match setting {
        HolesSetting::Deny => {
            let mut named: Vec<String> = listed.iter().map(ToString::to_string).collect();
            if unlisted > 0 {
                named.push(format!("and {}", more_breaches(unlisted)));
            }
            // Owned like `named`, so that one `join` serves both.
            let advice: Vec<String> = [Width::World, Width::Cluster]
                .into_iter()
                .filter(|width| opened.iter().any(|hole| hole.width == *width))
                .map(|width| instead(width).to_owned())
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
                        walled_by(guard),
                        instead_briefly(hole.width)
                    )
                })
                .collect();
            if unlisted > 0 {
                warnings.push(format!(
                    "NetworkPolicy {} opens {} in namespace {namespace:?}",
                    new.name,
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
