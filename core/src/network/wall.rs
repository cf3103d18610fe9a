//! The wall: the NetworkPolicies a baseline wants in a namespace, whether an existing policy
//! is still that wall, and the changes that bring a namespace to it.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::network::engine::{canonical_eq, entry_eq, spec_json};
use crate::vocabulary::facts::{ExistingPolicy, PolicyFacts};
use crate::vocabulary::identity::{deny_all_policy_name, dns_policy_name, managed_labels};
use crate::vocabulary::spec::{DnsSpec, NamespaceBaselineSpec};

/// The label every namespace carries with its own name (set by the API server).
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// The NetworkPolicies `baseline` wants in `namespace`: deny-all, then the DNS door when
/// `allowDNS` is on. Every field of the spec is named (empty rule lists included) so that a
/// server-side apply of this object also resets rules another manager slipped in.
pub fn desired_wall(
    baseline: &str,
    namespace: &str,
    spec: &NamespaceBaselineSpec,
) -> Vec<NetworkPolicy> {
    let mut wall = vec![deny_all(baseline, namespace)];
    if spec.allow_dns {
        wall.push(dns_door(baseline, namespace, &spec.dns_target()));
    }
    wall
}

fn deny_all(baseline: &str, namespace: &str) -> NetworkPolicy {
    managed_policy(
        deny_all_policy_name(baseline),
        baseline,
        namespace,
        NetworkPolicySpec {
            pod_selector: Some(LabelSelector::default()),
            policy_types: Some(vec!["Ingress".to_owned(), "Egress".to_owned()]),
            ingress: Some(Vec::new()),
            egress: Some(Vec::new()),
        },
    )
}

fn dns_door(baseline: &str, namespace: &str, dns: &DnsSpec) -> NetworkPolicy {
    let dns_pods = NetworkPolicyPeer {
        namespace_selector: Some(LabelSelector {
            match_labels: Some(BTreeMap::from([(
                NAMESPACE_NAME_LABEL.to_owned(),
                dns.namespace.clone(),
            )])),
            match_expressions: None,
        }),
        pod_selector: Some(LabelSelector {
            match_labels: Some(dns.pod_labels.clone()),
            match_expressions: None,
        }),
        ip_block: None,
    };
    let addresses = dns.ip_blocks.iter().map(|cidr| NetworkPolicyPeer {
        ip_block: Some(IPBlock {
            cidr: cidr.clone(),
            except: None,
        }),
        ..NetworkPolicyPeer::default()
    });
    let to = dns
        .pods
        .then_some(dns_pods)
        .into_iter()
        .chain(addresses)
        .collect();
    let ports = dns
        .ports
        .iter()
        .map(|port| NetworkPolicyPort {
            protocol: Some(port.protocol.as_str().to_owned()),
            port: Some(IntOrString::Int(i32::from(port.port))),
            end_port: None,
        })
        .collect();
    managed_policy(
        dns_policy_name(baseline),
        baseline,
        namespace,
        NetworkPolicySpec {
            pod_selector: Some(LabelSelector::default()),
            policy_types: Some(vec!["Egress".to_owned()]),
            ingress: Some(Vec::new()),
            egress: Some(vec![NetworkPolicyEgressRule {
                to: Some(to),
                ports: Some(ports),
            }]),
        },
    )
}

fn managed_policy(
    name: String,
    baseline: &str,
    namespace: &str,
    spec: NetworkPolicySpec,
) -> NetworkPolicy {
    NetworkPolicy {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(namespace.to_owned()),
            labels: Some(managed_labels(baseline)),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
    }
}

/// How a managed policy departed from the wall.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Drift {
    /// The spec differs: a rule added, a selector narrowed, a port changed...
    Spec,
    /// A managed label is missing or changed (the spec is intact).
    Labels,
    /// It was deleted (the reconciler saw it go): re-creating it is a repair, not an install.
    Deleted,
}

impl Drift {
    /// For Events and reports: `spec changed`, `labels changed`, `deleted`.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Spec => "spec changed",
            Self::Labels => "labels changed",
            Self::Deleted => "deleted",
        }
    }
}

impl Change {
    /// The change a planned creation becomes when the policy existed and was deleted: the
    /// same write, reported as the repair of a deletion.
    pub fn recreating(self) -> Self {
        match self {
            Self::Create(policy) => Self::Repair(policy, Drift::Deleted),
            other => other,
        }
    }
}

/// Whether `actual` has drifted from `desired`, comparing the whole spec (fields another
/// manager added count) and the managed labels. Labels and annotations others add are
/// tolerated: they do not weaken the wall.
pub fn drift(desired: &NetworkPolicy, actual: &(impl PolicyFacts + ?Sized)) -> Option<Drift> {
    if !canonical_eq(&spec_json(desired.spec.as_ref()), &spec_json(actual.spec())) {
        return Some(Drift::Spec);
    }
    let actual_labels = actual.labels();
    let labels_intact = desired
        .metadata
        .labels
        .iter()
        .flatten()
        .all(|(key, value)| actual_labels.and_then(|labels| labels.get(key)) == Some(value));
    (!labels_intact).then_some(Drift::Labels)
}

/// Where `actual` differs from `desired`, for people: the top-level spec fields
/// (`spec.egress`, `spec.podSelector`, ...) and the managed labels
/// (`metadata.labels[hedronite.io/baseline]`) that make [`drift`] find a difference. Empty
/// exactly when [`drift`] is `None`; compared the same way (the rule engine's [`canonical_eq`]).
pub fn drifted_fields(
    desired: &NetworkPolicy,
    actual: &(impl PolicyFacts + ?Sized),
) -> Vec<String> {
    let mut fields = Vec::new();
    let (want, have) = (spec_json(desired.spec.as_ref()), spec_json(actual.spec()));
    if !canonical_eq(&want, &have) {
        let empty = BTreeMap::new();
        let want_fields = want.as_object().unwrap_or(&empty);
        let have_fields = have.as_object().unwrap_or(&empty);
        let keys: BTreeSet<&str> = want_fields
            .keys()
            .chain(have_fields.keys())
            .map(|key| &**key)
            .collect();
        fields.extend(
            keys.into_iter()
                .filter(|key| !entry_eq(want_fields.get(*key), have_fields.get(*key)))
                .map(|key| format!("spec.{key}")),
        );
        if fields.is_empty() {
            // One side has no spec at all.
            fields.push("spec".to_owned());
        }
    }
    let actual_labels = actual.labels();
    for (key, value) in desired.metadata.labels.iter().flatten() {
        if actual_labels.and_then(|labels| labels.get(key)) != Some(value) {
            fields.push(format!("metadata.labels[{key}]"));
        }
    }
    fields
}

/// One write that brings a namespace to its wall.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// The policy does not exist yet.
    Create(NetworkPolicy),
    /// The policy exists but has drifted; apply it whole.
    Repair(NetworkPolicy, Drift),
    /// A managed policy the baseline no longer wants here.
    Delete { namespace: String, name: String },
}

/// The changes that turn `existing` (the managed policies of one baseline in one namespace)
/// into `desired`. Policies not in `desired` are deleted only when `prune` is set: a spec
/// change (`allowDNS` turned off) prunes, a namespace leaving an `Orphan` baseline does not.
/// A converged namespace yields no change at all.
pub fn plan_namespace(
    desired: Vec<NetworkPolicy>,
    existing: &[ExistingPolicy<'_>],
    prune: bool,
) -> Vec<Change> {
    let find = |name: Option<&str>| {
        existing
            .iter()
            .find(|policy| policy.name() == name)
            .copied()
    };
    let mut changes = Vec::new();
    if prune {
        for policy in existing {
            let wanted = desired
                .iter()
                .any(|d| d.metadata.name.as_deref() == policy.name());
            if let (false, Some(namespace), Some(name)) =
                (wanted, policy.namespace(), policy.name())
            {
                changes.push(Change::Delete {
                    namespace: namespace.to_owned(),
                    name: name.to_owned(),
                });
            }
        }
    }
    for policy in desired {
        match find(policy.metadata.name.as_deref()) {
            None => changes.push(Change::Create(policy)),
            Some(actual) => {
                if let Some(kind) = drift(&policy, actual) {
                    changes.push(Change::Repair(policy, kind));
                }
            }
        }
    }
    changes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocabulary::identity::{BASELINE_LABEL, MANAGED_BY_LABEL};
    use rstest::rstest;
    use serde_json::Value;
    use serde_json::json;

    fn spec(value: Value) -> NamespaceBaselineSpec {
        serde_json::from_value(value).unwrap()
    }

    fn seed() -> NamespaceBaselineSpec {
        NamespaceBaselineSpec::new("baseline=guarded")
    }

    /// What the API server returns for an applied policy: empty lists omitted.
    fn as_stored(policy: &NetworkPolicy) -> NetworkPolicy {
        let mut value = serde_json::to_value(policy).unwrap();
        let spec = value["spec"].as_object_mut().unwrap();
        spec.retain(|_, v| v.as_array().is_none_or(|a| !a.is_empty()));
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn the_seed_wall_is_deny_all_and_the_dns_door() {
        let wall = desired_wall("guarded", "team-a", &seed());
        assert_eq!(
            serde_json::to_value(&wall).unwrap(),
            json!([
                {
                    "apiVersion": "networking.k8s.io/v1",
                    "kind": "NetworkPolicy",
                    "metadata": {
                        "name": "nsb-guarded-default-deny",
                        "namespace": "team-a",
                        "labels": {MANAGED_BY_LABEL: "namespace-baseline", BASELINE_LABEL: "guarded"},
                    },
                    "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"], "ingress": [], "egress": []},
                },
                {
                    "apiVersion": "networking.k8s.io/v1",
                    "kind": "NetworkPolicy",
                    "metadata": {
                        "name": "nsb-guarded-allow-dns",
                        "namespace": "team-a",
                        "labels": {MANAGED_BY_LABEL: "namespace-baseline", BASELINE_LABEL: "guarded"},
                    },
                    "spec": {
                        "podSelector": {},
                        "policyTypes": ["Egress"],
                        "ingress": [],
                        "egress": [{
                            "to": [{
                                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                                "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                            }],
                            "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
                        }],
                    },
                },
            ])
        );
    }

    /// Baselines stored before `ports`, `ipBlocks`, `pods` and `service` existed keep their
    /// wall to the byte: the server-side apply of an unchanged object writes nothing.
    #[test]
    fn a_default_door_is_the_seeds_byte_for_byte() {
        let seed_door = r#"{"apiVersion":"networking.k8s.io/v1","kind":"NetworkPolicy","metadata":{"labels":{"app.kubernetes.io/managed-by":"namespace-baseline","hedronite.io/baseline":"guarded"},"name":"nsb-guarded-allow-dns","namespace":"team-a"},"spec":{"egress":[{"ports":[{"port":53,"protocol":"UDP"},{"port":53,"protocol":"TCP"}],"to":[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"kube-system"}},"podSelector":{"matchLabels":{"k8s-app":"kube-dns"}}}]}],"ingress":[],"podSelector":{},"policyTypes":["Egress"]}}"#;
        for spec in [
            seed(),
            spec(json!({"namespaceLabel": "baseline=guarded", "dns": {}})),
            spec(json!({"namespaceLabel": "baseline=guarded", "dns": {
                "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
                "pods": true, "ipBlocks": [], "service": "kube-system/kube-dns"}})),
        ] {
            let wall = desired_wall("guarded", "team-a", &spec);
            assert_eq!(serde_json::to_string(&wall[1]).unwrap(), seed_door);
        }
    }

    #[rstest]
    #[case::openshift(
        json!({"namespace": "openshift-dns", "podLabels": {"dns.operator.openshift.io/daemonset-dns": "default"},
               "ports": [{"protocol": "UDP", "port": 5353}, {"protocol": "TCP", "port": 5353}]}),
        json!([{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "openshift-dns"}},
                "podSelector": {"matchLabels": {"dns.operator.openshift.io/daemonset-dns": "default"}}}]),
        json!([{"protocol": "UDP", "port": 5353}, {"protocol": "TCP", "port": 5353}]))]
    #[case::node_local_dns_cache_with_kube_dns_fallback(
        json!({"ipBlocks": ["169.254.20.10/32"]}),
        json!([{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}},
               {"ipBlock": {"cidr": "169.254.20.10/32"}}]),
        json!([{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]))]
    #[case::addresses_only(
        json!({"pods": false, "ipBlocks": ["169.254.20.10/32", "fd00::53/128"], "ports": [{"protocol": "UDP", "port": 53}]}),
        json!([{"ipBlock": {"cidr": "169.254.20.10/32"}}, {"ipBlock": {"cidr": "fd00::53/128"}}]),
        json!([{"protocol": "UDP", "port": 53}]))]
    fn the_door_opens_to_the_pods_and_addresses_on_the_ports_of_the_spec(
        #[case] dns: Value,
        #[case] to: Value,
        #[case] ports: Value,
    ) {
        let spec = spec(json!({"namespaceLabel": "baseline", "dns": dns}));
        spec.validate().unwrap();
        let wall = desired_wall("guarded", "team-a", &spec);
        let rule = &serde_json::to_value(&wall[1]).unwrap()["spec"]["egress"][0];
        assert_eq!(rule["to"], to);
        assert_eq!(rule["ports"], ports);
    }

    #[test]
    fn allow_dns_off_is_deny_all_alone() {
        let wall = desired_wall(
            "guarded",
            "team-a",
            &spec(json!({"namespaceLabel": "baseline", "allowDNS": false})),
        );
        assert_eq!(wall.len(), 1);
        assert_eq!(
            wall[0].metadata.name.as_deref(),
            Some("nsb-guarded-default-deny")
        );
    }

    #[test]
    fn the_dns_door_follows_the_dns_extension() {
        let wall = desired_wall(
            "guarded",
            "team-a",
            &spec(
                json!({"namespaceLabel": "b", "dns": {"namespace": "dns", "podLabels": {"app": "coredns"}}}),
            ),
        );
        let peer = &wall[1].spec.as_ref().unwrap().egress.as_ref().unwrap()[0]
            .to
            .as_ref()
            .unwrap()[0];
        assert_eq!(
            serde_json::to_value(peer).unwrap(),
            json!({
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "dns"}},
                "podSelector": {"matchLabels": {"app": "coredns"}},
            })
        );
    }

    #[test]
    fn a_stored_copy_of_the_wall_has_not_drifted() {
        for policy in desired_wall("guarded", "team-a", &seed()) {
            let mut stored = as_stored(&policy);
            stored.metadata.resource_version = Some("42".into());
            stored
                .metadata
                .labels
                .as_mut()
                .unwrap()
                .insert("team".into(), "a".into());
            stored.metadata.annotations = Some(BTreeMap::from([("note".into(), "x".into())]));
            assert_eq!(drift(&policy, &stored), None);
        }
    }

    #[rstest]
    #[case::egress_slipped_into_deny_all(0, json!({"egress": [{}]}))]
    #[case::ingress_slipped_into_deny_all(0, json!({"ingress": [{"from": [{"podSelector": {}}]}]}))]
    #[case::pod_selector_narrowed(0, json!({"podSelector": {"matchLabels": {"app": "web"}}}))]
    #[case::policy_types_reduced(0, json!({"policyTypes": ["Ingress"]}))]
    #[case::dns_door_widened_to_any_port(1, json!({"egress": [{"to": [{"podSelector": {}}]}]}))]
    #[case::dns_door_another_port(1, json!({"egress": [{"ports": [{"protocol": "UDP", "port": 5353}]}]}))]
    fn any_spec_change_is_drift(#[case] index: usize, #[case] patch: Value) {
        let desired = &desired_wall("guarded", "team-a", &seed())[index];
        let mut actual = serde_json::to_value(as_stored(desired)).unwrap();
        for (key, value) in patch.as_object().unwrap() {
            actual["spec"][key] = value.clone();
        }
        let actual: NetworkPolicy = serde_json::from_value(actual).unwrap();
        assert_eq!(drift(desired, &actual), Some(Drift::Spec));
        let fields: Vec<String> = patch
            .as_object()
            .unwrap()
            .keys()
            .map(|key| format!("spec.{key}"))
            .collect();
        assert_eq!(drifted_fields(desired, &actual), fields);
    }

    #[rstest]
    #[case(Some("other"))]
    #[case(None)]
    fn a_changed_or_missing_managed_label_is_drift(#[case] value: Option<&str>) {
        let desired = &desired_wall("guarded", "team-a", &seed())[0];
        let mut actual = as_stored(desired);
        let labels = actual.metadata.labels.as_mut().unwrap();
        match value {
            Some(value) => labels.insert(BASELINE_LABEL.into(), value.into()),
            None => labels.remove(BASELINE_LABEL),
        };
        assert_eq!(drift(desired, &actual), Some(Drift::Labels));
        assert_eq!(
            drifted_fields(desired, &actual),
            vec![format!("metadata.labels[{BASELINE_LABEL}]")]
        );
    }

    #[test]
    fn drifted_fields_name_every_difference_and_only_differences() {
        let desired = &desired_wall("guarded", "team-a", &seed())[0];
        let stored = as_stored(desired);
        assert!(drifted_fields(desired, &stored).is_empty());
        let mut both = stored.clone();
        both.spec.as_mut().unwrap().egress = Some(vec![NetworkPolicyEgressRule::default()]);
        both.spec.as_mut().unwrap().pod_selector = Some(LabelSelector {
            match_labels: Some(BTreeMap::from([("app".into(), "web".into())])),
            match_expressions: None,
        });
        both.metadata.labels = None;
        assert_eq!(drift(desired, &both), Some(Drift::Spec));
        assert_eq!(
            drifted_fields(desired, &both),
            vec![
                "spec.egress".to_owned(),
                "spec.podSelector".to_owned(),
                format!("metadata.labels[{MANAGED_BY_LABEL}]"),
                format!("metadata.labels[{BASELINE_LABEL}]"),
            ]
        );
        let mut no_spec = stored;
        no_spec.spec = None;
        assert_eq!(drift(desired, &no_spec), Some(Drift::Spec));
        assert_eq!(drifted_fields(desired, &no_spec), vec!["spec.policyTypes"]);
    }

    #[test]
    fn a_converged_namespace_plans_no_change() {
        let stored: Vec<_> = desired_wall("guarded", "ns", &seed())
            .iter()
            .map(as_stored)
            .collect();
        let existing: Vec<ExistingPolicy<'_>> =
            stored.iter().map(|p| p as ExistingPolicy<'_>).collect();
        assert!(plan_namespace(desired_wall("guarded", "ns", &seed()), &existing, true).is_empty());
    }

    #[test]
    fn an_empty_namespace_plans_the_whole_wall() {
        let changes = plan_namespace(desired_wall("guarded", "ns", &seed()), &[], true);
        assert!(matches!(
            changes.as_slice(),
            [Change::Create(_), Change::Create(_)]
        ));
    }

    #[test]
    fn a_drifted_policy_is_repaired_whole() {
        let mut stored: Vec<_> = desired_wall("guarded", "ns", &seed())
            .iter()
            .map(as_stored)
            .collect();
        stored[0].spec.as_mut().unwrap().egress = Some(vec![NetworkPolicyEgressRule::default()]);
        let existing: Vec<ExistingPolicy<'_>> =
            stored.iter().map(|p| p as ExistingPolicy<'_>).collect();
        let changes = plan_namespace(desired_wall("guarded", "ns", &seed()), &existing, true);
        assert_eq!(
            changes,
            vec![Change::Repair(
                desired_wall("guarded", "ns", &seed())[0].clone(),
                Drift::Spec
            )]
        );
    }

    #[rstest]
    #[case::pruned(true, 1)]
    #[case::kept(false, 0)]
    fn policies_no_longer_wanted_go_only_when_pruning(#[case] prune: bool, #[case] deletes: usize) {
        let stored: Vec<_> = desired_wall("guarded", "ns", &seed())
            .iter()
            .map(as_stored)
            .collect();
        let existing: Vec<ExistingPolicy<'_>> =
            stored.iter().map(|p| p as ExistingPolicy<'_>).collect();
        let no_dns = spec(json!({"namespaceLabel": "baseline=guarded", "allowDNS": false}));
        let changes = plan_namespace(desired_wall("guarded", "ns", &no_dns), &existing, prune);
        assert_eq!(changes.len(), deletes);
        if prune {
            assert_eq!(
                changes[0],
                Change::Delete {
                    namespace: "ns".into(),
                    name: "nsb-guarded-allow-dns".into()
                }
            );
        }
    }

    #[rstest]
    #[case::orphan(false, 0)]
    #[case::delete(true, 2)]
    fn a_namespace_leaving_the_baseline(#[case] prune: bool, #[case] deletes: usize) {
        let stored: Vec<_> = desired_wall("guarded", "ns", &seed())
            .iter()
            .map(as_stored)
            .collect();
        let existing: Vec<ExistingPolicy<'_>> =
            stored.iter().map(|p| p as ExistingPolicy<'_>).collect();
        let changes = plan_namespace(Vec::new(), &existing, prune);
        assert_eq!(changes.len(), deletes);
        assert!(changes.iter().all(|c| matches!(c, Change::Delete { .. })));
    }
}
