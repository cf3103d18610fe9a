//! What reconciling one NamespaceBaseline writes, decided from the cluster state alone: which
//! namespaces it covers, the wall each needs, and the changes that get it there. Pure
//! functions of the objects a reconciler caches: the reconciler acts on them, `plan` and the
//! playground report them.

use std::collections::HashMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::network::hole::Hole;
use crate::network::wall::{Change, desired_wall, plan_namespace};
use crate::vocabulary::facts::{ExistingPolicy, NamespaceFacts, PolicyFacts};
use crate::vocabulary::identity::{
    BASELINE_LABEL, CLEANUP_FINALIZER, baseline_label_value, claims_management,
    deny_all_policy_name, dns_policy_name,
};
use crate::vocabulary::selector::LabelSelector;
use crate::vocabulary::spec::{DeletionPolicy, Mode, NamespaceBaselineSpec, SpecError};

/// What a decision reads of a NamespaceBaseline object.
#[derive(Debug, Clone, Copy)]
pub struct Baseline<'a> {
    pub name: &'a str,
    pub spec: &'a NamespaceBaselineSpec,
    /// It has a deletion timestamp.
    pub deleting: bool,
    /// Its finalizers include [`CLEANUP_FINALIZER`].
    pub has_cleanup_finalizer: bool,
}

impl<'a> Baseline<'a> {
    /// The facts of a baseline's `metadata` and `spec`.
    pub fn of(metadata: &'a ObjectMeta, spec: &'a NamespaceBaselineSpec) -> Self {
        Self {
            name: metadata.name.as_deref().unwrap_or_default(),
            spec,
            deleting: metadata.deletion_timestamp.is_some(),
            has_cleanup_finalizer: metadata
                .finalizers
                .iter()
                .flatten()
                .any(|finalizer| finalizer == CLEANUP_FINALIZER),
        }
    }
}

#[cfg(feature = "crd")]
impl<'a> From<&'a crate::vocabulary::spec::NamespaceBaseline> for Baseline<'a> {
    fn from(baseline: &'a crate::vocabulary::spec::NamespaceBaseline) -> Self {
        Self::of(&baseline.metadata, &baseline.spec)
    }
}

/// The cleanup finalizer is on a baseline exactly while its deletion must remove its wall.
pub fn wants_finalizer(spec: &NamespaceBaselineSpec) -> bool {
    spec.deletion_policy == DeletionPolicy::Delete && spec.mode == Mode::Enforce
}

/// What one reconcile of a baseline does to NetworkPolicies.
pub enum Decision<'a, N> {
    /// The baseline is being deleted: these deletions (none under `Orphan`, or without the
    /// cleanup finalizer), then the finalizer, if present, is released.
    CleanUp(Vec<(String, Vec<Change>)>),
    /// The spec cannot be acted on: nothing is written (`Ready=False`, `InvalidSpec`).
    Invalid(SpecError),
    /// The wall in every matching namespace: written in `Enforce`, reported as drift in
    /// `Audit`.
    Converge(Planner<'a, N>),
}

/// Decides what reconciling `baseline` writes, given the namespaces and the managed policies
/// (as the watch caches hold them).
pub fn decide<'a, N: NamespaceFacts, P: PolicyFacts + Sync>(
    baseline: Baseline<'a>,
    namespaces: &'a [N],
    policies: &'a [P],
) -> Decision<'a, N> {
    if baseline.deleting {
        let writes = if baseline.has_cleanup_finalizer && wants_finalizer(baseline.spec) {
            policies_by_namespace(baseline.name, policies)
                .into_iter()
                .map(|(namespace, existing)| {
                    (
                        namespace.to_owned(),
                        plan_namespace(Vec::new(), &existing, true),
                    )
                })
                .filter(|(_, changes)| !changes.is_empty())
                .collect()
        } else {
            Vec::new()
        };
        return Decision::CleanUp(writes);
    }
    match baseline.spec.validate() {
        Ok(selector) => Decision::Converge(Planner::new(
            baseline.name,
            baseline.spec,
            selector,
            namespaces,
            policies,
        )),
        Err(spec_error) => Decision::Invalid(spec_error),
    }
}

/// The changes that bring the cluster to one baseline's wall, per namespace.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    /// Namespaces the selector matches (terminating ones excluded).
    pub namespaces: u32,
    /// Non-empty change lists, by namespace.
    pub writes: Vec<(String, Vec<Change>)>,
}

impl Plan {
    pub fn changes(&self) -> u32 {
        count(self.writes.iter().map(|(_, changes)| changes.len()).sum())
    }
}

/// The writes of [`Planner`], collected.
pub fn plan<N: NamespaceFacts, P: PolicyFacts + Sync>(
    baseline: &str,
    spec: &NamespaceBaselineSpec,
    selector: &LabelSelector,
    namespaces: &[N],
    policies: &[P],
) -> Plan {
    let planner = Planner::new(baseline, spec, selector.clone(), namespaces, policies);
    Plan {
        namespaces: planner.matched(),
        writes: planner.writes().collect(),
    }
}

/// Decides, through the wall's rules, what to write: the wall in every matching namespace
/// (pruning what the spec no longer wants), and in namespaces that stopped matching, nothing
/// under `Orphan` and removal under `Delete`. Terminating namespaces are left to the
/// namespace controller. One namespace at a time: a reconcile pulls a namespace's changes
/// only when a write slot is free, so the desired objects of a large first install are never
/// all in memory together.
pub struct Planner<'a, N> {
    baseline: &'a str,
    spec: &'a NamespaceBaselineSpec,
    selector: LabelSelector,
    namespaces: &'a [N],
    ours: HashMap<&'a str, Vec<ExistingPolicy<'a>>>,
}

/// One namespace as a reconcile sees it.
#[derive(Debug)]
pub struct NamespacePlan<'p> {
    pub namespace: &'p str,
    /// Whether the baseline's selector matches it.
    pub selected: bool,
    /// This baseline's managed policies there.
    pub existing: &'p [ExistingPolicy<'p>],
    /// The writes that bring it to the wall (empty when in place, or left as found).
    pub changes: Vec<Change>,
}

impl<'a, N: NamespaceFacts> Planner<'a, N> {
    fn new<P: PolicyFacts + Sync>(
        baseline: &'a str,
        spec: &'a NamespaceBaselineSpec,
        selector: LabelSelector,
        namespaces: &'a [N],
        policies: &'a [P],
    ) -> Self {
        Self {
            ours: policies_by_namespace(baseline, policies),
            baseline,
            spec,
            selector,
            namespaces,
        }
    }

    /// Namespaces the selector matches among the planner's (terminating ones excluded).
    pub fn matched(&self) -> u32 {
        count_matched(&self.selector, self.namespaces)
    }

    /// The names of those namespaces.
    pub fn matched_names(&self) -> impl Iterator<Item = &str> + '_ {
        matched_names(&self.selector, self.namespaces)
    }

    /// The names of the live namespaces the selector leaves out.
    pub fn left_out_names(&self) -> impl Iterator<Item = &str> + '_ {
        left_out_names(&self.selector, self.namespaces)
    }

    /// The baseline's namespace selector.
    pub fn selector(&self) -> &LabelSelector {
        &self.selector
    }

    /// Every live namespace the selector matches or this baseline has policies in, with its
    /// changes: the wall where the selector matches; where it no longer does, this
    /// baseline's policies (removed only under `Delete`).
    pub fn namespaces(&self) -> impl Iterator<Item = NamespacePlan<'_>> + '_ {
        let prune = self.spec.deletion_policy == DeletionPolicy::Delete;
        self.namespaces
            .iter()
            .filter(|namespace| !namespace.terminating())
            .filter_map(move |namespace| {
                let name = namespace.name();
                let existing = self.ours.get(name).map_or(&[][..], Vec::as_slice);
                let selected = self.selector.covers(namespace);
                let changes = if selected {
                    plan_namespace(desired_wall(self.baseline, name, self.spec), existing, true)
                } else if existing.is_empty() {
                    return None;
                } else {
                    plan_namespace(Vec::new(), existing, prune)
                };
                Some(NamespacePlan {
                    namespace: name,
                    selected,
                    existing,
                    changes,
                })
            })
    }

    /// Non-empty change lists, by namespace.
    pub fn writes(&self) -> impl Iterator<Item = (String, Vec<Change>)> + '_ {
        self.namespaces()
            .filter(|namespace| !namespace.changes.is_empty())
            .map(|namespace| (namespace.namespace.to_owned(), namespace.changes))
    }
}

/// The holes other policies open in the namespaces `baseline` covers (its selector matches
/// them, they are not terminating): each with its namespace, by namespace then policy.
pub fn holes<N: NamespaceFacts, P: PolicyFacts>(
    planner: &Planner<'_, N>,
    policies: &[P],
) -> Vec<(String, Hole)> {
    let covered: std::collections::HashSet<&str> = planner
        .namespaces
        .iter()
        .filter(|ns| !ns.terminating() && planner.selector.covers(*ns))
        .map(NamespaceFacts::name)
        .collect();
    let mut found: Vec<(String, Hole)> = policies
        .iter()
        .filter(|policy| {
            policy
                .namespace()
                .is_some_and(|namespace| covered.contains(namespace))
        })
        .flat_map(|policy| {
            let namespace = policy.namespace().unwrap_or_default().to_owned();
            crate::network::holes::holes(policy)
                .into_iter()
                .map(move |hole| (namespace.clone(), hole))
        })
        .collect();
    found.sort_by(|a, b| {
        (&a.0, &a.1.policy, a.1.direction, a.1.rule).cmp(&(
            &b.0,
            &b.1.policy,
            b.1.direction,
            b.1.rule,
        ))
    });
    found
}

/// How many of `namespaces` `selector` matches, terminating ones excluded: the status's
/// `namespaces`.
pub fn count_matched<N: NamespaceFacts>(selector: &LabelSelector, namespaces: &[N]) -> u32 {
    count(matched_names(selector, namespaces).count())
}

/// The names of the namespaces among `namespaces` that `selector` matches, terminating ones
/// excluded.
pub fn matched_names<'a, N: NamespaceFacts>(
    selector: &'a LabelSelector,
    namespaces: &'a [N],
) -> impl Iterator<Item = &'a str> + 'a {
    namespaces
        .iter()
        .filter(|ns| !ns.terminating() && selector.covers(*ns))
        .map(NamespaceFacts::name)
}

/// The names of the namespaces among `namespaces` that `selector` leaves out, terminating
/// ones excluded: what "every namespace except..." excepts.
pub fn left_out_names<'a, N: NamespaceFacts>(
    selector: &'a LabelSelector,
    namespaces: &'a [N],
) -> impl Iterator<Item = &'a str> + 'a {
    namespaces
        .iter()
        .filter(|ns| !ns.terminating() && !selector.covers(*ns))
        .map(NamespaceFacts::name)
}

/// How many of `namespaces` `selector` leaves out, terminating ones excluded: the status's
/// `namespacesLeftOut`.
pub fn count_left_out<N: NamespaceFacts>(selector: &LabelSelector, namespaces: &[N]) -> u32 {
    count(left_out_names(selector, namespaces).count())
}

/// The managed policies of `baseline`, by namespace: those carrying its baseline label, and
/// those with its policy names (a tampered label is drift to repair, not a stranger).
/// Keyed by borrowed names: at thousands of policies, a reconcile builds this on every run.
pub fn policies_by_namespace<'a, P: PolicyFacts + Sync>(
    baseline: &str,
    policies: &'a [P],
) -> HashMap<&'a str, Vec<ExistingPolicy<'a>>> {
    let label = baseline_label_value(baseline);
    let names = [deny_all_policy_name(baseline), dns_policy_name(baseline)];
    let mut ours: HashMap<&str, Vec<ExistingPolicy<'a>>> = HashMap::new();
    for policy in policies {
        let labels = policy.labels();
        if !labels.is_some_and(claims_management) {
            continue;
        }
        let belongs = labels.and_then(|labels| labels.get(BASELINE_LABEL)) == Some(&label)
            || names
                .iter()
                .any(|name| Some(name.as_str()) == policy.name());
        if let (true, Some(namespace)) = (belongs, policy.namespace()) {
            ours.entry(namespace).or_default().push(policy);
        }
    }
    ours
}

fn count(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}
