//! A NetworkPolicy's spec, read from the JSON of a request as k8s-openapi would read it into
//! `NetworkPolicySpec`, without building those types (their readers were a tenth of the
//! policy's wasm module): which specs read ([`SPEC`], [`is_valid`]), which rules read equal
//! ([`rules_equal`]); and the JSON side of the rule engine ([`crate::network::engine`]): the holes a
//! spec opens ([`spec_holes`]), read from the JSON into the engine's shapes.
//!
//! The schema is that of k8s-openapi 0.28 for NetworkPolicySpec: every field may be absent
//! or `null`; a field the schema does not name is ignored whatever it holds; a string field
//! k8s-openapi requires (`cidr`, `key`, `operator`) reads as `""` when absent or `null`;
//! numbers are 32-bit integers (a float or an out-of-range number does not read); list items
//! and map values are never `null`; a struct is a JSON object.

use std::collections::BTreeMap;

use crate::network::engine::{self, PeerShape, RuleShape, SelectorShape, SpecShape};
use crate::network::hole::{Direction, Hole};
use crate::network::reach::IpBlockShape;
use crate::vocabulary::json::{Json as Value, Text};
use crate::vocabulary::selector::{LabelSelector, SelectorError};

type Map<'a> = BTreeMap<Text<'a>, Value<'a>>;

/// What a field of the schema holds.
pub(crate) enum Kind {
    Str,
    /// A string k8s-openapi requires: absent or `null` reads as `""`.
    RequiredStr,
    Int32,
    IntOrString,
    /// `BTreeMap<String, String>`.
    StrMap,
    List(&'static Kind),
    Struct(&'static [(&'static str, Kind)]),
}

const LABEL_SELECTOR_REQUIREMENT: Kind = Kind::Struct(&[
    ("key", Kind::RequiredStr),
    ("operator", Kind::RequiredStr),
    ("values", Kind::List(&Kind::Str)),
]);
const LABEL_SELECTOR: Kind = Kind::Struct(&[
    ("matchExpressions", Kind::List(&LABEL_SELECTOR_REQUIREMENT)),
    ("matchLabels", Kind::StrMap),
]);
const IP_BLOCK: Kind = Kind::Struct(&[
    ("cidr", Kind::RequiredStr),
    ("except", Kind::List(&Kind::Str)),
]);
const PEER: Kind = Kind::Struct(&[
    ("ipBlock", IP_BLOCK),
    ("namespaceSelector", LABEL_SELECTOR),
    ("podSelector", LABEL_SELECTOR),
]);
const PORT: Kind = Kind::Struct(&[
    ("endPort", Kind::Int32),
    ("port", Kind::IntOrString),
    ("protocol", Kind::Str),
]);
const INGRESS_RULE: Kind =
    Kind::Struct(&[("from", Kind::List(&PEER)), ("ports", Kind::List(&PORT))]);
const EGRESS_RULE: Kind = Kind::Struct(&[("ports", Kind::List(&PORT)), ("to", Kind::List(&PEER))]);
/// `NetworkPolicySpec`.
pub(crate) const SPEC: Kind = Kind::Struct(&[
    ("egress", Kind::List(&EGRESS_RULE)),
    ("ingress", Kind::List(&INGRESS_RULE)),
    ("podSelector", LABEL_SELECTOR),
    ("policyTypes", Kind::List(&Kind::Str)),
]);

/// A field's value, absent and `null` alike being `None`.
fn field<'v, 'a>(object: &'v Map<'a>, name: &str) -> Option<&'v Value<'a>> {
    object.get(name).filter(|value| !value.is_null())
}

fn is_int32(value: &Value<'_>) -> bool {
    value
        .as_i64()
        .is_some_and(|number| i32::try_from(number).is_ok())
}

/// Whether `value` (not `null`: a field's `null` is its absence) reads as `kind`.
pub(crate) fn is_valid(value: &Value<'_>, kind: &Kind) -> bool {
    match kind {
        Kind::Str | Kind::RequiredStr => value.is_string(),
        Kind::Int32 => is_int32(value),
        Kind::IntOrString => value.is_string() || is_int32(value),
        Kind::StrMap => value
            .as_object()
            .is_some_and(|map| map.values().all(|value| value.is_string())),
        Kind::List(item) => value
            .as_array()
            .is_some_and(|items| items.iter().all(|value| is_valid(value, item))),
        Kind::Struct(fields) => value.as_object().is_some_and(|object| {
            fields
                .iter()
                .all(|(name, kind)| field(object, name).is_none_or(|value| is_valid(value, kind)))
        }),
    }
}

/// Whether two values that read as `kind` read as equal values.
fn equal(a: &Value<'_>, b: &Value<'_>, kind: &Kind) -> bool {
    match kind {
        Kind::List(item) => a.as_array().zip(b.as_array()).is_some_and(|(a, b)| {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| equal(a, b, item))
        }),
        Kind::Struct(fields) => a.as_object().zip(b.as_object()).is_some_and(|(a, b)| {
            fields.iter().all(
                |(name, kind)| match (field(a, name), field(b, name), kind) {
                    (None, None, _) => true,
                    (Some(a), Some(b), kind) => equal(a, b, kind),
                    (Some(value), None, Kind::RequiredStr)
                    | (None, Some(value), Kind::RequiredStr) => value.as_str() == Some(""),
                    _ => false,
                },
            )
        }),
        _ => a == b,
    }
}

/// Whether two rules (of `direction`) of specs that read are equal as k8s-openapi's types.
pub(crate) fn rules_equal(direction: Direction, a: &Value<'_>, b: &Value<'_>) -> bool {
    let kind = match direction {
        Direction::Ingress => &INGRESS_RULE,
        Direction::Egress => &EGRESS_RULE,
    };
    equal(a, b, kind)
}

/// Rule `index` of `direction` in a spec that reads.
pub(crate) fn rule<'v, 'a>(
    spec: &'v Value<'a>,
    direction: Direction,
    index: usize,
) -> Option<&'v Value<'a>> {
    items(spec, direction.as_lowercase()).nth(index)
}

/// A Kubernetes label selector read from JSON ([`LabelSelector::from_parts`]); one that is
/// not shaped like one is refused as the API server would refuse it.
pub(crate) fn label_selector(selector: &Value<'_>) -> Result<LabelSelector, SelectorError> {
    let malformed = || SelectorError::NotASelector;
    let selector = selector.as_object().ok_or_else(malformed)?;
    let mut labels = Vec::new();
    for (key, value) in field(selector, "matchLabels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        labels.push((&**key, value.as_str().ok_or_else(malformed)?));
    }
    let mut expressions = Vec::new();
    for requirement in field(selector, "matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let requirement = requirement.as_object().ok_or_else(malformed)?;
        let text = |name| field(requirement, name).and_then(Value::as_str);
        let values = field(requirement, "values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(Value::as_str)
            .collect::<Option<Vec<&str>>>()
            .ok_or_else(malformed)?;
        expressions.push((
            text("key").ok_or_else(malformed)?,
            text("operator").ok_or_else(malformed)?,
            values,
        ));
    }
    LabelSelector::from_parts(labels, expressions)
}

/// The holes a spec that reads opens, named `policy` (the rule engine's
/// [`crate::network::engine::spec_holes`], read from the JSON of a spec).
pub(crate) fn spec_holes(policy: &str, spec: &Value<'_>) -> Vec<Hole> {
    let rules = |direction: Direction, peers| {
        (items(spec, direction.as_lowercase())).map(move |rule| RuleShape {
            peers: items(rule, peers).map(peer_shape),
            all_ports: items(rule, "ports").next().is_none(),
        })
    };
    let policy_types = get(spec, "policyTypes").and_then(Value::as_array);
    engine::spec_holes(
        policy,
        SpecShape {
            policy_types: policy_types
                .map(|types| types.iter().map(|t| t.as_str().unwrap_or_default())),
            ingress: rules(Direction::Ingress, "from"),
            egress: rules(Direction::Egress, "to"),
        },
    )
}

/// The field `name` of an object (absent and `null` alike being `None`).
fn get<'v, 'a>(object: &'v Value<'a>, name: &str) -> Option<&'v Value<'a>> {
    object.as_object().and_then(|object| field(object, name))
}

/// The items of the list `name` of an object (none when either is something else).
fn items<'v, 'a>(object: &'v Value<'a>, name: &str) -> impl Iterator<Item = &'v Value<'a>> {
    get(object, name)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// A string field of an object (`""` when it is absent or something else).
fn text<'v>(object: &'v Value<'_>, name: &str) -> &'v str {
    get(object, name)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn peer_shape<'v>(peer: &'v Value<'_>) -> PeerShape<'v, impl Iterator<Item = (&'v str, &'v str)>> {
    PeerShape {
        ip_block: get(peer, "ipBlock").map(|block| IpBlockShape {
            cidr: text(block, "cidr"),
            except: items(block, "except").filter_map(Value::as_str).collect(),
        }),
        namespace_selector: get(peer, "namespaceSelector").map(selector_shape),
        pod_selector: get(peer, "podSelector").map(selector_shape),
    }
}

fn selector_shape<'v>(
    selector: &'v Value<'_>,
) -> SelectorShape<impl Iterator<Item = (&'v str, &'v str)>> {
    SelectorShape {
        has_match_labels: (get(selector, "matchLabels").and_then(Value::as_object))
            .is_some_and(|labels| !labels.is_empty()),
        expressions: items(selector, "matchExpressions")
            .map(|requirement| (text(requirement, "key"), text(requirement, "operator"))),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::networking::v1::{
        NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicySpec,
    };
    use rstest::rstest;
    use serde_json::{Value, json};

    use super::*;
    use crate::network::engine::canonical_eq;
    use crate::vocabulary::json::Json;

    /// What the drift check compared before the rule engine compared in place: JSON with
    /// nulls, empty lists and empty maps dropped from objects (the oracle of `canonical_eq`).
    fn canonical_json(value: &Value) -> Value {
        let is_empty = |value: &Value| match value {
            Value::Null => true,
            Value::Array(items) => items.is_empty(),
            Value::Object(map) => map.is_empty(),
            _ => false,
        };
        match value {
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(key, value)| (key.clone(), canonical_json(value)))
                    .filter(|(_, value)| !is_empty(value))
                    .collect(),
            ),
            Value::Array(items) => Value::Array(items.iter().map(canonical_json).collect()),
            other => other.clone(),
        }
    }

    /// The same JSON, as the policy reads it from a request.
    fn read(value: &Value) -> Json<'static> {
        serde_json::from_str::<Json<'_>>(&value.to_string())
            .unwrap()
            .into_owned()
    }

    /// What k8s-openapi makes of a spec, the way the policy read it before: the JSON text.
    fn k8s(spec: &Value) -> Option<NetworkPolicySpec> {
        serde_json::from_str(&spec.to_string()).ok()
    }

    fn specs() -> Vec<Value> {
        let peers = [
            json!({}),
            json!({"ipBlock": {"cidr": "0.0.0.0/0"}}),
            json!({"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}),
            json!({"ipBlock": {}}),
            json!({"ipBlock": {"cidr": null}}),
            json!({"ipBlock": {"cidr": ""}}),
            json!({"ipBlock": {"cidr": 5}}),
            json!({"ipBlock": null}),
            json!({"ipBlock": []}),
            json!({"namespaceSelector": {}}),
            json!({"namespaceSelector": {"matchLabels": {}}, "podSelector": {"matchExpressions": []}}),
            json!({"namespaceSelector": {"matchLabels": {"team": "a"}}}),
            json!({"namespaceSelector": {"matchLabels": {"team": null}}}),
            json!({"namespaceSelector": {"matchLabels": null}}),
            json!({"namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "In", "values": ["x"]}]}}),
            json!({"namespaceSelector": {"matchExpressions": [{"operator": "Exists"}]}}),
            json!({"namespaceSelector": {"matchExpressions": [{"key": "", "operator": "Exists"}]}}),
            json!({"namespaceSelector": {"matchExpressions": [{"key": null, "operator": "Exists"}]}}),
            json!({"namespaceSelector": {"matchExpressions": [null]}}),
            json!({"namespaceSelector": {"matchExpressions": [{"values": [null]}]}}),
            json!({"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "web"}}}),
            json!({"ipBlock": {"cidr": "0.0.0.0/1"}}),
            json!({"ipBlock": {"cidr": "128.0.0.0/1", "except": ["255.255.255.254/32"]}}),
            json!({"ipBlock": {"cidr": "2000::/3"}}),
            json!({"ipBlock": {"cidr": "0.0.0.0/0", "except": ["0.0.0.0/1", "128.0.0.0/2"]}}),
            json!({"ipBlock": {"cidr": "0.0.0.0/1", "except": null}}),
            json!({"namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "Exists"}]}}),
            json!({"namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["a"]}]}}),
            json!({"namespaceSelector": {"matchExpressions": [{"key": "opt-out", "operator": "DoesNotExist"}]}}),
            json!({"namespaceSelector": {}, "podSelector": {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["x"]}]}}),
            json!({"namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["a"]}]}}),
            json!({"podSelector": {}}),
            json!({"podSelector": {"matchLabels": {"app": "web"}}, "unknown": [1, {"x": null}]}),
            json!(null),
            json!("peer"),
        ];
        let ports = [
            json!({"port": 80}),
            json!({"port": "http"}),
            json!({"port": 80.0}),
            json!({"port": -1}),
            json!({"port": 2147483648u64}),
            json!({"port": 1, "endPort": 65535}),
            json!({"port": 1, "endPort": "x"}),
            json!({"port": 1, "endPort": 2.5}),
            json!({"protocol": "UDP", "port": 53}),
            json!({"protocol": 17}),
            json!({"port": true}),
            json!({"port": null, "endPort": null, "protocol": null}),
            json!({}),
        ];
        let mut rules = vec![
            json!({}),
            json!({"from": []}),
            json!({"from": null, "ports": []}),
        ];
        for peer in &peers {
            rules.push(json!({"from": [peer]}));
            rules.push(json!({"from": [{"podSelector": {}}, peer], "ports": [{"port": 443}]}));
        }
        for port in &ports {
            rules.push(json!({"ports": [port]}));
        }
        // Peers judged together: ipBlocks whose addresses add up to the internet.
        rules.push(json!({"from": [{"ipBlock": {"cidr": "0.0.0.0/1"}}, {"ipBlock": {"cidr": "128.0.0.0/1"}}]}));
        rules.push(json!({"from": [{"ipBlock": {"cidr": "0.0.0.0/1", "except": ["1.0.0.0/8"]}}, {"podSelector": {}}, {"ipBlock": {"cidr": "128.0.0.0/2"}}]}));
        let mut specs = vec![
            json!({}),
            json!({"podSelector": {}}),
            json!({"podSelector": null, "policyTypes": ["Ingress", "Egress"]}),
            json!({"policyTypes": ["Egress"]}),
            json!({"policyTypes": []}),
            json!({"policyTypes": [null]}),
            json!({"policyTypes": "Ingress"}),
            json!({"ingress": null, "egress": []}),
            json!({"ingress": {}}),
            json!({"ingress": [null]}),
            json!([]),
            json!("spec"),
            json!(5),
        ];
        for rule in &rules {
            specs.push(json!({"podSelector": {}, "ingress": [rule]}));
            let egress = match rule {
                Value::Object(map) => Value::Object(
                    map.iter()
                        .map(|(key, value)| {
                            (
                                if key == "from" {
                                    "to".into()
                                } else {
                                    key.clone()
                                },
                                value.clone(),
                            )
                        })
                        .collect(),
                ),
                other => other.clone(),
            };
            specs.push(json!({"podSelector": {}, "policyTypes": ["Egress"], "egress": [egress]}));
            specs.push(json!({"egress": [egress], "ingress": [rule, {}]}));
        }
        specs
    }

    #[test]
    fn specs_read_as_k8s_openapi_reads_them() {
        for spec in specs() {
            assert_eq!(
                is_valid(&read(&spec), &SPEC),
                k8s(&spec).is_some(),
                "{spec}"
            );
        }
    }

    #[test]
    fn holes_are_those_of_the_k8s_types() {
        for spec in specs() {
            if let Some(typed) = k8s(&spec) {
                assert_eq!(
                    spec_holes("web", &read(&spec)),
                    crate::network::holes::spec_holes("web", &typed),
                    "{spec}"
                );
            }
        }
    }

    /// Every NetworkPolicy spec of the e2e fixtures (requests' objects, old objects, the
    /// cluster's policies), read as JSON.
    fn fixture_specs() -> Vec<Value> {
        fn collect(value: &Value, specs: &mut Vec<Value>) {
            match value {
                Value::Object(map) => {
                    // A NetworkPolicy object (not a request's `kind`: group, version, kind).
                    if map.get("kind") == Some(&json!("NetworkPolicy"))
                        && map.contains_key("metadata")
                    {
                        specs.push(map.get("spec").cloned().unwrap_or(Value::Null));
                    }
                    map.values().for_each(|value| collect(value, specs));
                }
                Value::Array(items) => items.iter().for_each(|value| collect(value, specs)),
                _ => {}
            }
        }
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../e2e-tests/fixtures");
        let mut paths: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
            .collect();
        paths.sort();
        let mut specs = Vec::new();
        for path in paths {
            let text = std::fs::read_to_string(&path).unwrap();
            collect(&serde_json::from_str(&text).unwrap(), &mut specs);
        }
        specs
    }

    /// The differential test of the rule engine's two readers: over every NetworkPolicy spec
    /// of the fixtures and the edge cases of [`specs`], the borrowed JSON reader (the
    /// policy's) and the k8s-openapi one (the reconciler's) read the same specs, find the
    /// same holes, and compare specs as the old `canonical_json` did.
    #[test]
    fn typed_and_borrowed_readers_agree() {
        let fixtures = fixture_specs();
        assert!(fixtures.len() > 100, "{}", fixtures.len());
        assert!(fixtures.iter().filter_map(k8s).count() > 100);
        let all: Vec<Value> = fixtures.iter().cloned().chain(specs()).collect();
        let (mut typed_count, mut holes, mut pairs) = (0, 0, 0);
        for spec in all.iter().filter(|spec| !spec.is_null()) {
            let typed = k8s(spec);
            let borrowed = read(spec);
            assert_eq!(is_valid(&borrowed, &SPEC), typed.is_some(), "{spec}");
            let Some(typed) = typed else { continue };
            typed_count += 1;
            let found = spec_holes("web", &borrowed);
            assert_eq!(
                found,
                crate::network::holes::spec_holes("web", &typed),
                "{spec}"
            );
            holes += found.len();
        }
        for a in &fixtures {
            for b in &fixtures {
                pairs += 1;
                let expected = canonical_json(a) == canonical_json(b);
                assert_eq!(canonical_eq(&read(a), &read(b)), expected, "{a} {b}");
                if let (Some(typed_a), Some(typed_b)) = (k8s(a), k8s(b)) {
                    let serialized = |typed: &NetworkPolicySpec| {
                        canonical_json(&serde_json::to_value(typed).unwrap())
                    };
                    assert_eq!(
                        canonical_eq(
                            &crate::network::engine::spec_json(Some(&typed_a)),
                            &crate::network::engine::spec_json(Some(&typed_b))
                        ),
                        serialized(&typed_a) == serialized(&typed_b),
                        "{a} {b}"
                    );
                }
            }
        }
        eprintln!(
            "{} specs ({} fixtures, {} of them read by both; {} edge cases), {typed_count} read by both, {holes} holes, {pairs} fixture pairs compared",
            all.len(),
            fixtures.len(),
            fixtures.iter().filter_map(k8s).count(),
            all.len() - fixtures.len()
        );
    }

    #[test]
    fn rules_are_equal_when_the_k8s_types_are() {
        let specs: Vec<(Value, NetworkPolicySpec)> = specs()
            .into_iter()
            .filter_map(|spec| k8s(&spec).map(|typed| (spec, typed)))
            .collect();
        let ingress: Vec<(&Value, &NetworkPolicyIngressRule)> = specs
            .iter()
            .flat_map(|(spec, typed)| {
                spec["ingress"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .zip(typed.ingress.iter().flatten())
            })
            .collect();
        let egress: Vec<(&Value, &NetworkPolicyEgressRule)> = specs
            .iter()
            .flat_map(|(spec, typed)| {
                spec["egress"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .zip(typed.egress.iter().flatten())
            })
            .collect();
        assert!(ingress.len() > 50 && egress.len() > 50);
        for (a, typed_a) in &ingress {
            for (b, typed_b) in &ingress {
                assert_eq!(
                    rules_equal(Direction::Ingress, &read(a), &read(b)),
                    typed_a == typed_b,
                    "{a} {b}"
                );
            }
        }
        for (a, typed_a) in &egress {
            for (b, typed_b) in &egress {
                assert_eq!(
                    rules_equal(Direction::Egress, &read(a), &read(b)),
                    typed_a == typed_b,
                    "{a} {b}"
                );
            }
        }
    }

    #[rstest]
    #[case(json!(null), json!(null))]
    #[case(json!(null), json!({}))]
    #[case(json!({}), json!({"a": null, "b": [], "c": {"d": null, "e": {}}}))]
    #[case(json!({"a": [{}]}), json!({"a": [{"x": null}]}))]
    #[case(json!({"a": [{}]}), json!({"a": []}))]
    #[case(json!({"a": [null]}), json!({"a": [{}]}))]
    #[case(json!({"a": 1}), json!({"a": 1.0}))]
    #[case(json!({"a": "x"}), json!({"a": "x", "b": 0}))]
    #[case(json!({"a": {"b": [1, 2]}}), json!({"a": {"b": [1, 2]}, "c": {}}))]
    #[case(json!({"a": {"b": [1, 2]}}), json!({"a": {"b": [2, 1]}}))]
    #[case(json!([{"a": null}]), json!([{}]))]
    #[case(json!({"a": false}), json!({}))]
    #[case(json!({"a": ""}), json!({}))]
    fn canonical_eq_is_equality_of_canonical_json(#[case] a: Value, #[case] b: Value) {
        let expected = canonical_json(&a) == canonical_json(&b);
        assert_eq!(canonical_eq(&read(&a), &read(&b)), expected, "{a} {b}");
        assert_eq!(canonical_eq(&read(&b), &read(&a)), expected, "{b} {a}");
        for spec in specs() {
            assert_eq!(
                canonical_eq(&read(&spec), &read(&a)),
                canonical_json(&spec) == canonical_json(&a)
            );
        }
    }
}
