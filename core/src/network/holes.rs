//! Holes: what other NetworkPolicies open in a walled namespace.
//!
//! The wall is a default-deny policy, and NetworkPolicies are additive: any other policy in
//! the namespace that allows traffic opens the wall for the pods it selects. Each such rule is
//! a hole ([`Hole`]), classified by how far it opens: to the whole internet
//! ([`Width::World`]), to every pod of the cluster ([`Width::Cluster`]), or to something
//! narrower. This is the rule engine read from k8s-openapi's types (the reconciler, `plan`,
//! the playground), and how many live namespaces a hole's selectors reach.

use k8s_openapi::api::networking::v1::{NetworkPolicyPeer, NetworkPolicyPort, NetworkPolicySpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::network::engine::{self, PeerShape, RuleShape, SelectorShape, SpecShape};
pub use crate::network::hole::{Direction, Hole, NamespaceReach, Width, count_by_width};
use crate::network::reach::IpBlockShape;
use crate::vocabulary::facts::{NamespaceFacts, PolicyFacts};
use crate::vocabulary::identity::claims_management;

/// The holes a policy opens, unless it is one of the walls' own (managed) policies.
pub fn holes(policy: &(impl PolicyFacts + ?Sized)) -> Vec<Hole> {
    let managed = policy.labels().is_some_and(claims_management);
    match (policy.spec(), managed) {
        (Some(spec), false) => spec_holes(policy.name().unwrap_or_default(), spec),
        _ => Vec::new(),
    }
}

/// The holes of a spec, named `policy` (the rule engine's [`crate::network::engine::spec_holes`], read
/// from k8s-openapi's types).
pub fn spec_holes(policy: &str, spec: &NetworkPolicySpec) -> Vec<Hole> {
    engine::spec_holes(
        policy,
        SpecShape {
            policy_types: (spec.policy_types.as_ref())
                .map(|types| types.iter().map(String::as_str)),
            ingress: (spec.ingress.iter().flatten()).map(|r| rule(&r.from, &r.ports)),
            egress: (spec.egress.iter().flatten()).map(|r| rule(&r.to, &r.ports)),
        },
    )
}

/// A rule of either direction, as the engine reads it.
fn rule<'a>(
    peers: &'a Option<Vec<NetworkPolicyPeer>>,
    ports: &Option<Vec<NetworkPolicyPort>>,
) -> RuleShape<impl Iterator<Item = PeerShape<'a, impl Iterator<Item = (&'a str, &'a str)>>>> {
    RuleShape {
        peers: peers.iter().flatten().map(|peer| PeerShape {
            ip_block: peer.ip_block.as_ref().map(|block| IpBlockShape {
                cidr: block.cidr.as_str(),
                except: block.except.iter().flatten().map(String::as_str).collect(),
            }),
            namespace_selector: peer.namespace_selector.as_ref().map(selector),
            pod_selector: peer.pod_selector.as_ref().map(selector),
        }),
        all_ports: ports.as_ref().is_none_or(Vec::is_empty),
    }
}

fn selector(selector: &LabelSelector) -> SelectorShape<impl Iterator<Item = (&str, &str)>> {
    SelectorShape {
        has_match_labels: (selector.match_labels.as_ref()).is_some_and(|labels| !labels.is_empty()),
        expressions: (selector.match_expressions.iter().flatten())
            .map(|requirement| (requirement.key.as_str(), requirement.operator.as_str())),
    }
}

/// How many of `namespaces` (the live ones; terminating ones are not counted) the rule of
/// `hole` reaches through its namespace selectors, for a hole of `spec` that selects
/// namespaces (`Cluster`, `Namespaces`); `None` for another width. A namespace is reached
/// when any `namespaceSelector` peer of the rule selects it ([`crate::vocabulary::selector::LabelSelector::selects`]).
pub fn namespace_reach<N: NamespaceFacts>(
    spec: &NetworkPolicySpec,
    hole: &Hole,
    namespaces: &[N],
) -> Option<NamespaceReach> {
    if !matches!(hole.width, Width::Cluster | Width::Namespaces) {
        return None;
    }
    let peers = match hole.direction {
        Direction::Ingress => spec.ingress.as_ref()?.get(hole.rule)?.from.as_deref(),
        Direction::Egress => spec.egress.as_ref()?.get(hole.rule)?.to.as_deref(),
    };
    // A selector the API server would refuse (an unknown operator) selects nothing.
    let selectors: Vec<crate::vocabulary::selector::LabelSelector> = peers
        .into_iter()
        .flatten()
        .filter(|peer| peer.ip_block.is_none())
        .filter_map(|peer| peer.namespace_selector.as_ref())
        .filter_map(|selector| {
            crate::vocabulary::selector::LabelSelector::from_kubernetes(selector).ok()
        })
        .collect();
    let live = namespaces
        .iter()
        .filter(|namespace| !namespace.terminating());
    let (mut reached, mut of) = (0u32, 0u32);
    for namespace in live {
        of = of.saturating_add(1);
        if selectors.iter().any(|selector| selector.selects(namespace)) {
            reached = reached.saturating_add(1);
        }
    }
    Some(NamespaceReach { reached, of })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    use rstest::rstest;
    use serde_json::json;

    fn policy(spec: serde_json::Value) -> NetworkPolicy {
        serde_json::from_value(json!({
            "metadata": {"name": "team-policy", "namespace": "walled"},
            "spec": spec,
        }))
        .unwrap()
    }

    fn widths(spec: serde_json::Value) -> Vec<(Direction, Width, bool)> {
        holes(&policy(spec))
            .into_iter()
            .map(|hole| (hole.direction, hole.width, hole.all_ports))
            .collect()
    }

    use Direction::{Egress, Ingress};
    use Width::{Addresses, Cluster, Namespaces, Pods, World};

    #[rstest]
    #[case::ingress_from_anywhere(json!({"podSelector": {}, "ingress": [{}]}), vec![(Ingress, World, true)])]
    #[case::empty_from_list(json!({"podSelector": {}, "ingress": [{"from": []}]}), vec![(Ingress, World, true)])]
    #[case::every_namespace(json!({"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {}}]}]}), vec![(Ingress, Cluster, true)])]
    #[case::every_namespace_every_pod(json!({"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {}, "podSelector": {}}]}]}), vec![(Ingress, Cluster, true)])]
    #[case::some_pods_of_every_namespace(json!({"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "probe"}}}]}]}), vec![(Ingress, Pods, true)])]
    #[case::some_pods_of_some_namespaces(json!({"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "a"}}, "podSelector": {"matchLabels": {"app": "probe"}}}]}]}), vec![(Ingress, Pods, true)])]
    #[case::some_namespaces(json!({"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "a"}}}]}]}), vec![(Ingress, Namespaces, true)])]
    #[case::narrow_pod_selector_is_no_hole_of_concern(json!({"podSelector": {}, "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "web"}}}], "ports": [{"port": 8080}]}]}), vec![(Ingress, Pods, false)])]
    #[case::internet_v4(json!({"podSelector": {}, "policyTypes": ["Egress"], "egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}]}), vec![(Egress, World, true)])]
    #[case::internet_v4_with_except(json!({"podSelector": {}, "policyTypes": ["Egress"], "egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8"]}}]}]}), vec![(Egress, World, true)])]
    #[case::internet_v6(json!({"podSelector": {}, "policyTypes": ["Egress"], "egress": [{"to": [{"ipBlock": {"cidr": "::/0"}}]}]}), vec![(Egress, World, true)])]
    #[case::a_subnet(json!({"podSelector": {}, "policyTypes": ["Egress"], "egress": [{"to": [{"ipBlock": {"cidr": "10.1.0.0/16"}}], "ports": [{"protocol": "TCP", "port": 5432}]}]}), vec![(Egress, Addresses, false)])]
    #[case::named_port(json!({"podSelector": {}, "ingress": [{"ports": [{"port": "http"}]}]}), vec![(Ingress, World, false)])]
    #[case::port_range(json!({"podSelector": {}, "policyTypes": ["Egress"], "egress": [{"ports": [{"port": 1, "endPort": 65535}]}]}), vec![(Egress, World, false)])]
    #[case::widest_peer_decides(json!({"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}, {"ipBlock": {"cidr": "0.0.0.0/0"}}]}]}), vec![(Ingress, World, true)])]
    #[case::egress_rules_without_policy_types(json!({"podSelector": {}, "egress": [{}]}), vec![(Egress, World, true)])]
    #[case::egress_rules_ignored_when_not_governed(json!({"podSelector": {}, "policyTypes": ["Ingress"], "egress": [{}]}), vec![])]
    #[case::ingress_governed_alone(json!({"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{}]}), vec![(Ingress, World, true)])]
    #[case::empty_policy_types_read_as_absent(json!({"podSelector": {}, "policyTypes": [], "ingress": [{}]}), vec![(Ingress, World, true)])]
    #[case::ingress_rules_ignored_when_not_governed(json!({"podSelector": {}, "policyTypes": ["Egress"], "ingress": [{}]}), vec![])]
    #[case::deny_only(json!({"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}), vec![])]
    #[case::split_internet(json!({"podSelector": {}, "policyTypes": ["Egress"], "egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/1"}}, {"ipBlock": {"cidr": "128.0.0.0/1"}}]}]}), vec![(Egress, World, true)])]
    #[case::split_internet_with_a_carve_out(json!({"podSelector": {}, "policyTypes": ["Egress"], "egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/1", "except": ["8.8.8.8/32"]}}, {"ipBlock": {"cidr": "128.0.0.0/1"}}]}]}), vec![(Egress, World, true)])]
    #[case::the_v6_internet(json!({"podSelector": {}, "policyTypes": ["Egress"], "egress": [{"to": [{"ipBlock": {"cidr": "2000::/3"}}]}]}), vec![(Egress, World, true)])]
    #[case::private_ranges_together(json!({"podSelector": {}, "policyTypes": ["Egress"], "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}, {"ipBlock": {"cidr": "192.168.0.0/16"}}]}]}), vec![(Egress, Addresses, true)])]
    #[case::internet_with_a_narrower_selector_peer(json!({"podSelector": {}, "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "a"}}}, {"ipBlock": {"cidr": "0.0.0.0/1"}}, {"ipBlock": {"cidr": "128.0.0.0/1"}}]}]}), vec![(Ingress, World, true)])]
    #[case::every_namespace_by_name(json!({"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "Exists"}]}}]}]}), vec![(Ingress, Cluster, true)])]
    #[case::every_namespace_but_some(json!({"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}]}}]}]}), vec![(Ingress, Cluster, true)])]
    #[case::every_namespace_without_a_label(json!({"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {"matchExpressions": [{"key": "opt-out", "operator": "DoesNotExist"}]}}]}]}), vec![(Ingress, Cluster, true)])]
    #[case::every_pod_without_a_label(json!({"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {}, "podSelector": {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["x"]}]}}]}]}), vec![(Ingress, Cluster, true)])]
    #[case::namespaces_by_name(json!({"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["a", "b"]}]}}]}]}), vec![(Ingress, Namespaces, true)])]
    #[case::namespaces_with_a_label(json!({"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "Exists"}]}}]}]}), vec![(Ingress, Namespaces, true)])]
    fn rules_are_classified_by_how_far_they_open(
        #[case] spec: serde_json::Value,
        #[case] expected: Vec<(Direction, Width, bool)>,
    ) {
        assert_eq!(widths(spec), expected);
    }

    #[test]
    fn a_rule_that_selects_namespaces_is_measured_against_the_live_ones() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
        let namespace = |name: &str, team: Option<&str>, terminating: bool| ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(
                team.map(|team| ("team".to_owned(), team.to_owned()))
                    .into_iter()
                    .collect(),
            ),
            deletion_timestamp: terminating.then_some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ),
            ),
            ..ObjectMeta::default()
        };
        let namespaces = [
            namespace("a", Some("a"), false),
            namespace("b", Some("b"), false),
            namespace("c", None, false),
            namespace("gone", Some("a"), true),
        ];
        let policy = policy(json!({
            "podSelector": {},
            "ingress": [
                {"from": [{"namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "Exists"}]}}]},
                {"from": [{"namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["c"]}]}}]},
                {"from": [{"podSelector": {}}]},
            ],
        }));
        let found = holes(&policy);
        let spec = policy.spec.as_ref().unwrap();
        let reach: Vec<Option<NamespaceReach>> = found
            .iter()
            .map(|hole| namespace_reach(spec, hole, &namespaces))
            .collect();
        assert_eq!(
            reach,
            [
                Some(NamespaceReach { reached: 2, of: 3 }),
                Some(NamespaceReach { reached: 2, of: 3 }),
                None,
            ]
        );
        let mut cluster = found[1].clone();
        cluster.reach = reach[1];
        assert_eq!(
            cluster.to_string(),
            "NetworkPolicy team-policy ingress rule 1 opens every port to every pod of the cluster (2 of 3 namespaces)"
        );
    }

    #[test]
    fn the_walls_own_policies_are_no_holes() {
        let mut door =
            policy(json!({"podSelector": {}, "policyTypes": ["Egress"], "egress": [{}]}));
        door.metadata.labels = Some(crate::vocabulary::identity::managed_labels("guarded"));
        assert!(holes(&door).is_empty());
    }

    /// The names status.holes, the metric's labels and the messages use.
    #[test]
    fn widths_and_directions_are_named_as_the_api_shows_them() {
        let names: Vec<String> = Width::ALL.iter().map(ToString::to_string).collect();
        assert_eq!(
            names,
            ["World", "Cluster", "Namespaces", "Pods", "Addresses"]
        );
        assert_eq!(
            [Ingress.to_string(), Egress.to_string()],
            ["Ingress", "Egress"]
        );
        assert_eq!(
            [Ingress.as_lowercase(), Egress.as_lowercase()],
            ["ingress", "egress"]
        );
    }

    #[test]
    fn breaches_are_world_and_cluster() {
        let breaches: Vec<Width> = Width::ALL.into_iter().filter(|w| w.is_breach()).collect();
        assert_eq!(breaches, [World, Cluster]);
    }

    #[test]
    fn holes_are_counted_by_width_and_described_for_people() {
        let found = holes(&policy(json!({
            "podSelector": {},
            "ingress": [{}, {"from": [{"namespaceSelector": {}}]}],
            "policyTypes": ["Ingress", "Egress"],
            "egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "ports": [{"port": 443}]}],
        })));
        let counts = count_by_width(&found);
        assert_eq!(counts[0], (World, 2));
        assert_eq!(counts[1], (Cluster, 1));
        assert_eq!(
            found[2].to_string(),
            "NetworkPolicy team-policy egress rule 0 opens some ports to the whole internet"
        );
    }
}
