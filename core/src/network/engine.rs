//! The NetworkPolicy rule engine: the one place that says what a NetworkPolicy spec opens
//! (its holes, [`spec_holes`]), which directions it governs (the `policyTypes` default,
//! [`governed`]) and when two specs are the same wall ([`canonical_eq`]), so that the
//! reconciler and the admission policy cannot disagree about them.
//!
//! The rules read a spec as a [`SpecShape`]: the little of it they look at, borrowed. Its two
//! readers are thin adapters onto it: [`crate::network::holes::spec_holes`] over k8s-openapi's
//! `NetworkPolicySpec` (the reconciler, the playground), and `admission::netpol` over the
//! request's borrowed JSON (the policy's wasm module, which must not carry k8s-openapi's
//! deserializers). Canonical equality compares the policy's borrowed JSON tree, into which
//! the reconciler's specs are read too ([`spec_json`]).

use k8s_openapi::api::networking::v1::NetworkPolicySpec;

use crate::network::hole::{Direction, Hole, Width};
use crate::network::reach::{IpBlockShape, opens_internet};
use crate::vocabulary::json::Json;
use crate::vocabulary::selector::selects_unlabelled;

/// A NetworkPolicy spec, as the rules read it: borrowed, and lazily (each reader's iterators,
/// so that the policy's module holds no list built only to be read once).
pub(crate) struct SpecShape<T, I, E> {
    /// `policyTypes`, when given (absent or `null`: `None`).
    pub policy_types: Option<T>,
    /// The `ingress` rules ([`RuleShape`]s).
    pub ingress: I,
    /// The `egress` rules ([`RuleShape`]s).
    pub egress: E,
}

/// One `ingress` or `egress` rule.
pub(crate) struct RuleShape<P> {
    /// Its `from` (or `to`) peers ([`PeerShape`]s).
    pub peers: P,
    /// It names no port: every port is open.
    pub all_ports: bool,
}

/// One peer of a rule.
pub(crate) struct PeerShape<'a, X> {
    pub ip_block: Option<IpBlockShape<'a>>,
    pub namespace_selector: Option<SelectorShape<X>>,
    pub pod_selector: Option<SelectorShape<X>>,
}

/// A label selector, as far as [`selects_unlabelled`] reads it.
pub(crate) struct SelectorShape<X> {
    /// It has a non-empty `matchLabels`.
    pub has_match_labels: bool,
    /// The `(key, operator)` of each `matchExpressions` term.
    pub expressions: X,
}

/// The directions (ingress, egress) a spec governs: `policyTypes` when given (and not
/// empty), else Ingress always and Egress when it has egress rules (the API server's own
/// defaulting).
fn governed<'a>(
    policy_types: Option<impl IntoIterator<Item = &'a str>>,
    has_egress_rules: bool,
) -> (bool, bool) {
    let (mut given, mut ingress, mut egress) = (false, false, false);
    for kind in policy_types.into_iter().flatten() {
        given = true;
        ingress |= kind == "Ingress";
        egress |= kind == "Egress";
    }
    if given {
        (ingress, egress)
    } else {
        (true, has_egress_rules)
    }
}

/// The holes a spec opens, named `policy`: one per rule of each direction it governs.
pub(crate) fn spec_holes<'a, T, I, E, P, Q, X>(policy: &str, spec: SpecShape<T, I, E>) -> Vec<Hole>
where
    T: IntoIterator<Item = &'a str>,
    I: Iterator<Item = RuleShape<P>>,
    E: Iterator<Item = RuleShape<Q>>,
    P: IntoIterator<Item = PeerShape<'a, X>>,
    Q: IntoIterator<Item = PeerShape<'a, X>>,
    X: IntoIterator<Item = (&'a str, &'a str)>,
{
    let mut egress = spec.egress.peekable();
    let (ingress_on, egress_on) = governed(spec.policy_types, egress.peek().is_some());
    let mut found = Vec::new();
    if ingress_on {
        for (index, rule) in spec.ingress.enumerate() {
            found.push(hole(policy, Direction::Ingress, index, rule));
        }
    }
    if egress_on {
        for (index, rule) in egress.enumerate() {
            found.push(hole(policy, Direction::Egress, index, rule));
        }
    }
    found
}

/// The hole a rule opens. Its ipBlocks are judged together (the addresses they open add up),
/// its selector peers one by one; the widest decides, and no peer at all opens to any source
/// or destination.
fn hole<'a, P, X>(policy: &str, direction: Direction, rule: usize, shape: RuleShape<P>) -> Hole
where
    P: IntoIterator<Item = PeerShape<'a, X>>,
    X: IntoIterator<Item = (&'a str, &'a str)>,
{
    let mut blocks = Vec::new();
    let mut width = None;
    for peer in shape.peers {
        match peer.ip_block {
            Some(block) => blocks.push(block),
            None => {
                let opened = selector_width(peer.namespace_selector, peer.pod_selector);
                width = Some(width.map_or(opened, |width: Width| width.min(opened)));
            }
        }
    }
    if !blocks.is_empty() {
        let addresses = if opens_internet(&blocks) {
            Width::World
        } else {
            Width::Addresses
        };
        width = Some(width.map_or(addresses, |width| width.min(addresses)));
    }
    Hole {
        policy: policy.to_owned(),
        direction,
        rule,
        width: width.unwrap_or(Width::World),
        all_ports: shape.all_ports,
        reach: None,
    }
}

/// How far a peer of selectors (no ipBlock) opens: a selector "selects every" namespace (or
/// pod) when it selects every one anyone creates ([`selects_unlabelled`]); no pod selector
/// selects every pod.
fn selector_width<'a, X>(
    namespaces: Option<SelectorShape<X>>,
    pods: Option<SelectorShape<X>>,
) -> Width
where
    X: IntoIterator<Item = (&'a str, &'a str)>,
{
    let every = |selector: SelectorShape<X>, namespaces| {
        selects_unlabelled(selector.has_match_labels, selector.expressions, namespaces)
    };
    let pods_all = pods.is_none_or(|pods| every(pods, false));
    match namespaces.map(|namespaces| every(namespaces, true)) {
        Some(true) if pods_all => Width::Cluster,
        Some(false) if pods_all => Width::Namespaces,
        // Some pods of some namespaces, or a pod selector alone: pods of this namespace.
        _ => Width::Pods,
    }
}

/// A NetworkPolicy spec (k8s-openapi's type) as the JSON tree [`canonical_eq`] compares: the
/// admission policy reads the request's specs into the same tree (no spec: `null`).
pub(crate) fn spec_json(spec: Option<&NetworkPolicySpec>) -> Json<'static> {
    // Serializing k8s-openapi types cannot fail: they hold only JSON-representable data.
    serde_json::to_value(spec).map_or(Json::Null, Json::from_value)
}

/// Whether two specs (or any two JSON values) are equal once nulls, empty lists and objects
/// whose entries are all dropped are dropped from their objects: `ingress: []` (what the
/// reconciler applies) equals an absent `ingress` (what the API server returns), while
/// `egress: [{}]` (allow all egress) differs from no egress at all. The wall's drift check
/// and the policy's guard of the wall's specs both compare this way.
pub(crate) fn canonical_eq(a: &Json<'_>, b: &Json<'_>) -> bool {
    match (a, b) {
        (Json::Object(a), Json::Object(b)) => {
            a.iter()
                .all(|(key, value)| entry_eq(Some(value), b.get(key)))
                && b.iter()
                    .all(|(key, value)| entry_eq(a.get(key), Some(value)))
        }
        (Json::Array(a), Json::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| canonical_eq(a, b))
        }
        (a, b) => a == b,
    }
}

/// Whether an object's entries of one key are equal as [`canonical_eq`] compares them: an
/// absent entry and a dropped one alike.
pub(crate) fn entry_eq(a: Option<&Json<'_>>, b: Option<&Json<'_>>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) if !dropped(a) || !dropped(b) => canonical_eq(a, b),
        (a, b) => a.is_none_or(dropped) && b.is_none_or(dropped),
    }
}

/// Whether a value is dropped from its object: null, an empty list, or an object whose
/// entries are all dropped.
fn dropped(value: &Json<'_>) -> bool {
    match value {
        Json::Null => true,
        Json::Array(items) => items.is_empty(),
        Json::Object(map) => map.values().all(dropped),
        _ => false,
    }
}
