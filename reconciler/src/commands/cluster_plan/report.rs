//! `plan`'s report: for each baseline, the reconcile's own decision (the core's [`decide`])
//! over the input, described (changes, drift, holes, orphans, the DNS door) and summed up.

use kube::ResourceExt;
use namespace_baseline_core::holes::namespace_reach;
use namespace_baseline_core::identity::dns_policy_name;
use namespace_baseline_core::plan::{Baseline, Decision, NamespacePlan, decide};
use namespace_baseline_core::spec::{DeletionPolicy, Mode, NamespaceBaseline};
use namespace_baseline_core::wall::{Change, drifted_fields};
use serde::Serialize;

use crate::base::error::Error;
use crate::reconcile::probe::condition::ENFORCED;

use crate::commands::cluster_plan::input::{DnsObject, PlanInput, PodPolicy, Source};

/// Nothing would change.
pub const EXIT_NO_CHANGES: u8 = 0;
/// An error: unreadable input, an unreachable cluster, or a baseline whose spec the
/// reconciler cannot act on.
pub const EXIT_ERROR: u8 = 1;
/// The reconciler would write.
pub const EXIT_PENDING: u8 = 2;

/// The version of the JSON shape (`--output json`); bumped on any incompatible change.
pub const JSON_VERSION: u32 = 1;

/// The plan: for each baseline, the reconcile's decision ([`decide`]) over
/// `input`, described.
pub fn plan(input: &PlanInput) -> PrintedPlan {
    let baselines: Vec<BaselineReport> = input
        .baselines
        .iter()
        .map(|(origin, baseline)| describe(origin, baseline, input))
        .collect();
    let mut summary = Summary::default();
    for baseline in &baselines {
        for change in &baseline.changes {
            match change.action {
                Action::Create => summary.create += 1,
                Action::Update => summary.update += 1,
                Action::Delete => summary.delete += 1,
            }
        }
        summary.orphaned += baseline.orphaned.len();
        summary.holes += baseline.holes.len();
        summary.breaches += baseline
            .holes
            .iter()
            .filter(|item| item.hole.width.is_breach())
            .count();
        summary.drift += baseline.drift.len();
        summary.ungated += baseline.pods_ungated.len();
        summary.invalid += usize::from(baseline.invalid.is_some());
    }
    PrintedPlan {
        version: JSON_VERSION,
        source: input.source,
        pending: summary.create + summary.update + summary.delete > 0,
        summary,
        baselines,
        notes: input.notes.clone(),
    }
}

fn describe(origin: &str, baseline: &NamespaceBaseline, input: &PlanInput) -> BaselineReport {
    let name = baseline.name_any();
    let spec = &baseline.spec;
    let mut report = BaselineReport {
        name: name.clone(),
        origin: origin.to_owned(),
        namespace_label: spec.namespace_label.clone(),
        selector: spec.selector_words(),
        mode: spec.mode,
        deletion_policy: spec.deletion_policy,
        allow_dns: spec.allow_dns,
        deleting: baseline.metadata.deletion_timestamp.is_some(),
        invalid: None,
        guarded: Vec::new(),
        left_out: Vec::new(),
        changes: Vec::new(),
        drift: Vec::new(),
        orphaned: Vec::new(),
        holes: Vec::new(),
        enforced: enforced(baseline),
        dns: if spec.allow_dns {
            dns_check(spec, &input.dns)
        } else {
            None
        },
        pods_ungated: Vec::new(),
    };
    match decide(Baseline::from(baseline), &input.namespaces, &input.policies) {
        Decision::CleanUp(mut writes) => {
            writes.sort_by(|a, b| a.0.cmp(&b.0));
            for (_, changes) in writes {
                report.changes.extend(changes.iter().map(|change| {
                    let mut item = ChangeItem::of(change);
                    item.reason =
                        "the baseline is being deleted under deletionPolicy Delete".into();
                    item
                }));
            }
        }
        Decision::Invalid(spec_error) => {
            report.invalid = Some(format!(
                "{}; the reconciler writes nothing and reports Ready=False (InvalidSpec)",
                Error::InvalidSpec(spec_error).report()
            ));
        }
        Decision::Converge(planner) => {
            report.holes = namespace_baseline_core::plan::holes(&planner, &input.policies)
                .into_iter()
                .map(|(namespace, mut hole)| {
                    hole.reach = input
                        .policy(&namespace, &hole.policy)
                        .and_then(|policy| policy.spec.as_ref())
                        .and_then(|spec| namespace_reach(spec, &hole, &input.namespaces));
                    HoleItem { namespace, hole }
                })
                .collect();
            report.left_out = planner.left_out_names().map(str::to_owned).collect();
            for namespace in planner.namespaces() {
                if namespace.selected {
                    report.guarded.push(namespace.namespace.to_owned());
                } else {
                    report.orphaned.extend(orphans(&namespace));
                }
                let items = namespace
                    .changes
                    .iter()
                    .map(|change| explain(change, &namespace, &name, baseline));
                match spec.mode {
                    Mode::Enforce => report.changes.extend(items),
                    Mode::Audit => report.drift.extend(items),
                }
            }
            if let (Mode::Enforce, Some(pod_policy)) = (spec.mode, &input.pod_policy) {
                report.pods_ungated = ungated(&report.guarded, pod_policy, input);
            }
        }
    }
    report
}

/// The baseline's policies in a namespace it no longer selects that the decision leaves in
/// place (all of them under `Orphan`, none under `Delete`).
fn orphans(namespace: &NamespacePlan<'_>) -> Vec<PolicyRef> {
    namespace
        .existing
        .iter()
        .filter(|policy| {
            !namespace.changes.iter().any(|change| {
                matches!(change, Change::Delete { name, .. } if Some(name.as_str()) == policy.name())
            })
        })
        .map(|policy| PolicyRef {
            namespace: namespace.namespace.to_owned(),
            name: policy.name().unwrap_or_default().to_owned(),
            reason: "the namespace is no longer selected; deletionPolicy Orphan leaves the policy in place, unmanaged".to_owned(),
        })
        .collect()
}

fn explain(
    change: &Change,
    namespace: &NamespacePlan<'_>,
    baseline_name: &str,
    baseline: &NamespaceBaseline,
) -> ChangeItem {
    let mut item = ChangeItem::of(change);
    match change {
        Change::Create(_) => item.reason = "missing".to_owned(),
        Change::Repair(desired, _) => {
            if let Some(actual) = namespace
                .existing
                .iter()
                .find(|policy| policy.name() == desired.metadata.name.as_deref())
            {
                item.fields = drifted_fields(desired, *actual);
            }
            item.reason = format!("differs from the wall: {}", item.fields.join(", "));
        }
        Change::Delete { name, .. } => {
            item.reason = if !namespace.selected {
                "the namespace is no longer selected; deletionPolicy Delete removes the wall"
                    .to_owned()
            } else if !baseline.spec.allow_dns && *name == dns_policy_name(baseline_name) {
                "not part of the wall: allowDNS is off".to_owned()
            } else {
                "not part of the wall".to_owned()
            };
        }
    }
    item
}

/// The plan, as printed (`--output json` is this, serialized).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PrintedPlan {
    /// [`JSON_VERSION`].
    pub version: u32,
    pub source: Source,
    /// Whether the reconciler would write (exit code 2).
    pub pending: bool,
    pub summary: Summary,
    pub baselines: Vec<BaselineReport>,
    pub notes: Vec<String>,
}

impl PrintedPlan {
    pub fn exit_code(&self) -> u8 {
        if self.summary.invalid > 0 {
            EXIT_ERROR
        } else if self.pending {
            EXIT_PENDING
        } else {
            EXIT_NO_CHANGES
        }
    }
}

#[derive(Debug, Default, Serialize)]
pub struct Summary {
    pub create: usize,
    pub update: usize,
    pub delete: usize,
    /// Policies left in place, unmanaged, in namespaces no longer selected (no write).
    pub orphaned: usize,
    /// Changes `Audit` baselines report without writing.
    pub drift: usize,
    /// Baselines whose spec cannot be acted on.
    pub invalid: usize,
    /// Holes in the guarded namespaces, and how many of them open the wall to the world or
    /// the whole cluster.
    pub holes: usize,
    pub breaches: usize,
    /// Guarded namespaces (of `Enforce` baselines) whose pods never reach the pod gate.
    pub ungated: usize,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BaselineReport {
    pub name: String,
    /// "FILE: document N[, item M]", or "cluster".
    pub origin: String,
    pub namespace_label: String,
    /// How it selects its namespaces: `namespaceLabel ...` or `namespaceSelector ...`.
    pub selector: String,
    pub mode: Mode,
    pub deletion_policy: DeletionPolicy,
    #[serde(rename = "allowDNS")]
    pub allow_dns: bool,
    /// Being deleted (read from the cluster with a deletionTimestamp).
    pub deleting: bool,
    /// Why the spec cannot be acted on (nothing is then written).
    pub invalid: Option<String>,
    /// The namespaces behind its wall (selected and not terminating), by name.
    pub guarded: Vec<String>,
    /// The live namespaces its selector leaves out, by name: what "every namespace
    /// except..." excepts.
    pub left_out: Vec<String>,
    /// The writes the reconciler would make, in order.
    pub changes: Vec<ChangeItem>,
    /// `Audit`: the changes found, reported in status, not written.
    pub drift: Vec<ChangeItem>,
    pub orphaned: Vec<PolicyRef>,
    /// Rules of other policies that open the wall in the guarded namespaces.
    pub holes: Vec<HoleItem>,
    /// The `Enforced` condition the baseline carries (read from the cluster; `None`: none,
    /// the enforcement probe is off, or the baseline was read from a file).
    pub enforced: Option<EnforcedItem>,
    /// Whether the DNS door reaches the DNS Service's ready endpoints (`None`: no door, or
    /// no object read in the door's Service namespace).
    pub dns: Option<namespace_baseline_core::doors::Reachability>,
    /// `Enforce`: the guarded namespaces the Pod rule's ClusterAdmissionPolicy leaves out of
    /// its `namespaceSelector` (their pods are admitted before their wall exists), each with
    /// the requirement it does not meet; empty when that policy was not read.
    pub pods_ungated: Vec<UngatedItem>,
}

/// A guarded namespace whose pods never reach the pod gate, and why.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UngatedItem {
    pub namespace: String,
    /// The pod policy's requirement it does not meet, as a selector says it, e.g.
    /// `!hedronite.io/pod-gate` or `baseline`.
    pub unmet: String,
}

/// The DNS door of `spec` against the Services, EndpointSlices and Pods read; `None` when
/// none of them is in the door's Service namespace (nothing to check against).
fn dns_check(
    spec: &namespace_baseline_core::NamespaceBaselineSpec,
    objects: &[DnsObject],
) -> Option<namespace_baseline_core::doors::Reachability> {
    use namespace_baseline_core::doors::{DnsObjects, check_dns_objects};
    let door = spec.dns_target();
    let (namespace, _) = door.service_ref();
    if !objects.iter().any(|o| o.namespace() == Some(namespace)) {
        return None;
    }
    let mut read = DnsObjects {
        services: Vec::new(),
        slices: Vec::new(),
        pods: Vec::new(),
    };
    for object in objects {
        match object {
            DnsObject::Service(service) => read.services.push(&service.metadata),
            DnsObject::Slice(slice) => read.slices.push(slice),
            DnsObject::Pod(pod) => read.pods.push(&pod.metadata),
        }
    }
    Some(check_dns_objects(&door, &read))
}

/// The enforcement probe's last word on a baseline's wall: its `Enforced` condition.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EnforcedItem {
    pub status: String,
    pub reason: String,
    pub message: String,
    /// When the last probe round ended (`status.lastProbeTime`), RFC 3339.
    pub last_probe_time: Option<String>,
}

/// The `guarded` namespaces whose pods `pod_policy`'s selector never sends to the gate.
fn ungated(guarded: &[String], pod_policy: &PodPolicy, input: &PlanInput) -> Vec<UngatedItem> {
    guarded
        .iter()
        .filter_map(|name| {
            // `input.namespaces` is sorted by name.
            let index = input
                .namespaces
                .binary_search_by(|meta| meta.name_any().as_str().cmp(name))
                .ok()?;
            Some(UngatedItem {
                namespace: name.clone(),
                unmet: pod_policy.leaves_out(&input.namespaces[index])?,
            })
        })
        .collect()
}

/// The `Enforced` condition of `baseline`'s status, if it has one.
fn enforced(baseline: &NamespaceBaseline) -> Option<EnforcedItem> {
    let status = baseline.status.as_ref()?;
    let condition = status
        .conditions
        .iter()
        .find(|condition| condition.type_ == ENFORCED)?;
    Some(EnforcedItem {
        status: condition.status.clone(),
        reason: condition.reason.clone(),
        message: condition.message.clone(),
        last_probe_time: status
            .last_probe_time
            .as_ref()
            .map(|time| time.0.to_string()),
    })
}

/// A hole in a guarded namespace.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HoleItem {
    pub namespace: String,
    #[serde(flatten)]
    pub hole: namespace_baseline_core::holes::Hole,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// A server-side apply of a policy that does not exist.
    Create,
    /// A server-side apply of the whole policy over a drifted one.
    Update,
    Delete,
}

#[derive(Debug, Serialize)]
pub struct ChangeItem {
    pub action: Action,
    pub namespace: String,
    pub name: String,
    /// `update`: what differs (`spec.egress`, `metadata.labels[...]`); empty otherwise.
    pub fields: Vec<String>,
    pub reason: String,
}

impl ChangeItem {
    pub(super) fn of(change: &Change) -> Self {
        let (action, policy) = match change {
            Change::Create(policy) => (Action::Create, policy),
            Change::Repair(policy, _) => (Action::Update, policy),
            Change::Delete { namespace, name } => {
                return Self {
                    action: Action::Delete,
                    namespace: namespace.clone(),
                    name: name.clone(),
                    fields: Vec::new(),
                    reason: String::new(),
                };
            }
        };
        Self {
            action,
            namespace: policy.namespace().unwrap_or_default(),
            name: policy.name_any(),
            fields: Vec::new(),
            reason: String::new(),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct PolicyRef {
    pub namespace: String,
    pub name: String,
    pub reason: String,
}
