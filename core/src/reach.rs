//! How far a rule's peers reach, judged by what they open rather than by how they are
//! written: `0.0.0.0/1` and `128.0.0.0/1` together are the whole IPv4 internet, and a
//! `namespaceSelector` of `kubernetes.io/metadata.name Exists` selects every namespace, as
//! `0.0.0.0/0` and `namespaceSelector: {}` do. The holes check ([`crate::holes`]) asks these
//! two questions of the peers of one rule, whichever reader (k8s-openapi's types in the
//! reconciler, the request's JSON in the policy) read them.

use std::net::IpAddr;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::plan::NamespaceFacts;

/// One `ipBlock`: its `cidr` and its `except` list, as written.
pub(crate) struct IpBlockShape<'a> {
    pub cidr: &'a str,
    pub except: Vec<&'a str>,
}

/// Whether the addresses these ipBlocks open together (each block's `cidr` minus its own
/// `except`s, the blocks of a rule added up) are the internet: at least half of the
/// globally reachable addresses of IPv4 or of IPv6. Private, loopback, link-local,
/// documentation and multicast ranges are not the internet (opening `10.0.0.0/8` is a team
/// reaching its own network), so `0.0.0.0/0` minus the private ranges still is; and a few
/// addresses carved out of an open block (`except: [8.8.8.8/32]`) do not make it narrow.
/// A block that does not parse (the API server refuses those) opens nothing.
pub(crate) fn opens_internet(blocks: &[IpBlockShape<'_>]) -> bool {
    [Family::V4, Family::V6].into_iter().any(|family| {
        let mut opened = Vec::new();
        for block in blocks {
            let Some(range) = family.range(block.cidr) else {
                continue;
            };
            let mut parts = vec![range];
            for except in &block.except {
                if let Some(carved) = family.range(except) {
                    parts = subtract(&parts, carved);
                }
            }
            opened.extend(parts);
        }
        let public = family.public();
        let reached = size(&intersect(&normalize(opened), &public));
        reached >= size(&public) / 2
    })
}

/// An inclusive range of addresses of one family, as integers.
type Range = (u128, u128);

#[derive(Clone, Copy)]
enum Family {
    V4,
    V6,
}

/// The special-purpose IPv4 ranges that are not globally reachable (IANA's registry, RFC
/// 6890 and its updates): this network, private, shared, loopback, link-local, protocol
/// assignments, documentation, benchmarking, multicast, reserved and broadcast.
const NOT_INTERNET_V4: [&str; 14] = [
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.0.2.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "224.0.0.0/4",
    "240.0.0.0/4",
];

/// IPv6's global unicast space (RFC 4291); everything else (unique local, link-local,
/// multicast, the IPv4-mapped space...) is not the internet.
const INTERNET_V6: &str = "2000::/3";

impl Family {
    /// The range a CIDR of this family covers; host bits are ignored, as the network is what
    /// the block opens. `None` for another family or text that is no CIDR.
    fn range(self, cidr: &str) -> Option<Range> {
        let (address, prefix) = cidr.trim().split_once('/')?;
        let address: IpAddr = address.parse().ok()?;
        let prefix: u32 = prefix.parse().ok()?;
        let (bits, width) = match (self, address) {
            (Self::V4, IpAddr::V4(v4)) => (u128::from(u32::from(v4)), 32),
            (Self::V6, IpAddr::V6(v6)) => (u128::from(v6), 128),
            _ => return None,
        };
        if prefix > width {
            return None;
        }
        let host = match width - prefix {
            128 => u128::MAX,
            host_bits => (1u128 << host_bits) - 1,
        };
        Some((bits & !host, bits | host))
    }

    /// The family's globally reachable addresses.
    fn public(self) -> Vec<Range> {
        match self {
            Self::V4 => {
                let mut public = vec![(0, u128::from(u32::MAX))];
                for reserved in NOT_INTERNET_V4 {
                    if let Some(range) = self.range(reserved) {
                        public = subtract(&public, range);
                    }
                }
                public
            }
            Self::V6 => self.range(INTERNET_V6).into_iter().collect(),
        }
    }
}

/// `ranges` without the addresses of `carved`.
fn subtract(ranges: &[Range], carved: Range) -> Vec<Range> {
    let mut left = Vec::with_capacity(ranges.len() + 1);
    for &(start, end) in ranges {
        if carved.1 < start || end < carved.0 {
            left.push((start, end));
            continue;
        }
        if start < carved.0 {
            left.push((start, carved.0 - 1));
        }
        if carved.1 < end {
            left.push((carved.1 + 1, end));
        }
    }
    left
}

/// The same addresses as sorted, disjoint ranges.
fn normalize(mut ranges: Vec<Range>) -> Vec<Range> {
    ranges.sort_unstable();
    let mut merged: Vec<Range> = Vec::with_capacity(ranges.len());
    for (start, end) in ranges {
        match merged.last_mut() {
            Some(last) if start <= last.1.saturating_add(1) => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    merged
}

/// The addresses in both sets of sorted, disjoint ranges.
fn intersect(a: &[Range], b: &[Range]) -> Vec<Range> {
    let mut both = Vec::new();
    for &(a_start, a_end) in a {
        for &(b_start, b_end) in b {
            let (start, end) = (a_start.max(b_start), a_end.min(b_end));
            if start <= end {
                both.push((start, end));
            }
        }
    }
    both
}

/// How many addresses disjoint ranges hold. The sets measured here are within the internet
/// (at most 2^125 IPv6 addresses), so the sum does not overflow.
fn size(ranges: &[Range]) -> u128 {
    ranges.iter().map(|(start, end)| end - start + 1).sum()
}

/// The label a namespace always carries, set by the API server to the namespace's name.
pub(crate) const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Whether a label selector (`matchLabels` non-empty or not, and its `matchExpressions` as
/// key and operator) selects an object that carries no label of its own: a new namespace
/// (which carries only [`NAMESPACE_NAME_LABEL`], with a name no selector lists) when
/// `namespaces`, else a new pod. Such a selector selects every namespace (or pod) anyone
/// creates, whatever it excludes: `{}`, `kubernetes.io/metadata.name Exists`, `team NotIn
/// [a]`, `opt-out DoesNotExist`. A requirement with an operator the API server does not
/// know selects nothing (it refuses such selectors).
pub(crate) fn selects_unlabelled<'a>(
    has_match_labels: bool,
    expressions: impl IntoIterator<Item = (&'a str, &'a str)>,
    namespaces: bool,
) -> bool {
    !has_match_labels
        && expressions.into_iter().all(|(key, operator)| {
            // The one label an unlabelled namespace has; its value is a name no `In` or
            // `NotIn` list of the selector names.
            let carried = namespaces && key == NAMESPACE_NAME_LABEL;
            match operator {
                "In" => false,
                "NotIn" => true,
                "Exists" => carried,
                "DoesNotExist" => !carried,
                _ => false,
            }
        })
}

/// Whether a Kubernetes label selector selects this namespace, as the API server evaluates
/// it: every `matchLabels` pair, and every `matchExpressions` requirement (`In`, `NotIn`,
/// `Exists`, `DoesNotExist`; an operator the API server would refuse selects nothing). A
/// namespace always carries [`NAMESPACE_NAME_LABEL`] with its name, whether the cache kept
/// the label or not.
pub(crate) fn selects<N: NamespaceFacts + ?Sized>(selector: &LabelSelector, namespace: &N) -> bool {
    let label = |key: &str| {
        namespace
            .label(key)
            .or_else(|| (key == NAMESPACE_NAME_LABEL).then(|| namespace.name()))
    };
    let labels_match = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(key, value)| label(key) == Some(value.as_str()));
    labels_match
        && selector
            .match_expressions
            .iter()
            .flatten()
            .all(|requirement| {
                let value = label(&requirement.key);
                let listed = |value: &str| {
                    requirement
                        .values
                        .iter()
                        .flatten()
                        .any(|listed| listed == value)
                };
                match requirement.operator.as_str() {
                    "In" => value.is_some_and(listed),
                    "NotIn" => value.is_none_or(|value| !listed(value)),
                    "Exists" => value.is_some(),
                    "DoesNotExist" => value.is_none(),
                    _ => false,
                }
            })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    /// Each block as `cidr except...`, separated by spaces.
    fn blocks(blocks: &[&'static str]) -> Vec<IpBlockShape<'static>> {
        blocks
            .iter()
            .map(|block| {
                let mut words = block.split(' ');
                IpBlockShape {
                    cidr: words.next().unwrap_or_default(),
                    except: words.collect(),
                }
            })
            .collect()
    }

    #[rstest]
    #[case::everything_v4(&["0.0.0.0/0"], true)]
    #[case::everything_v6(&["::/0"], true)]
    #[case::two_halves(&["0.0.0.0/1", "128.0.0.0/1"], true)]
    #[case::half_of_v4(&["0.0.0.0/1"], true)]
    #[case::a_quarter_of_v4(&["0.0.0.0/2"], false)]
    #[case::everything_but_private(&["0.0.0.0/0 10.0.0.0/8 172.16.0.0/12 192.168.0.0/16"], true)]
    #[case::everything_but_one_address(&["0.0.0.0/1", "128.0.0.0/1 255.255.255.254/32"], true)]
    #[case::everything_but_most(&["0.0.0.0/0 0.0.0.0/1 128.0.0.0/2"], false)]
    #[case::the_v6_internet(&["2000::/3"], true)]
    #[case::half_the_v6_internet(&["2000::/4"], true)]
    #[case::unique_local_v6(&["fc00::/7"], false)]
    #[case::private_networks(&["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"], false)]
    #[case::a_subnet(&["203.0.113.0/24"], false)]
    #[case::host_bits_ignored(&["1.2.3.4/0"], true)]
    #[case::unreadable(&["everything", "0.0.0.0/33"], false)]
    #[case::except_of_the_other_family(&["0.0.0.0/0 ::/0"], true)]
    #[case::no_blocks(&[], false)]
    fn the_internet_is_judged_by_the_addresses_opened(
        #[case] given: &[&'static str],
        #[case] internet: bool,
    ) {
        assert_eq!(opens_internet(&blocks(given)), internet);
    }

    /// A namespace as the reconciler's cache holds it.
    fn namespace(
        name: &str,
        labels: &[(&str, &str)],
    ) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(
                labels
                    .iter()
                    .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    #[rstest]
    #[case::everything(serde_json::json!({}), true)]
    #[case::match_labels(serde_json::json!({"matchLabels": {"team": "a"}}), true)]
    #[case::match_labels_other(serde_json::json!({"matchLabels": {"team": "b"}}), false)]
    #[case::by_name_label_not_cached(serde_json::json!({"matchLabels": {NAMESPACE_NAME_LABEL: "team-a"}}), true)]
    #[case::in_list(serde_json::json!({"matchExpressions": [{"key": "team", "operator": "In", "values": ["a", "b"]}]}), true)]
    #[case::not_in_list(serde_json::json!({"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]}), false)]
    #[case::not_in_absent(serde_json::json!({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["a"]}]}), true)]
    #[case::exists(serde_json::json!({"matchExpressions": [{"key": "team", "operator": "Exists"}]}), true)]
    #[case::does_not_exist(serde_json::json!({"matchExpressions": [{"key": "opt-out", "operator": "DoesNotExist"}]}), true)]
    #[case::all_must_hold(serde_json::json!({"matchLabels": {"team": "a"}, "matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}), false)]
    #[case::unknown_operator(serde_json::json!({"matchExpressions": [{"key": "team", "operator": "Gt", "values": ["1"]}]}), false)]
    fn label_selectors_select_as_the_api_server_does(
        #[case] selector: serde_json::Value,
        #[case] selected: bool,
    ) {
        let selector: LabelSelector = serde_json::from_value(selector).unwrap();
        assert_eq!(
            selects(&selector, &namespace("team-a", &[("team", "a")])),
            selected
        );
    }

    #[rstest]
    #[case::empty(false, &[], true, true)]
    #[case::match_labels(true, &[], true, false)]
    #[case::name_exists(false, &[(NAMESPACE_NAME_LABEL, "Exists")], true, true)]
    #[case::name_exists_of_a_pod(false, &[(NAMESPACE_NAME_LABEL, "Exists")], false, false)]
    #[case::name_in(false, &[(NAMESPACE_NAME_LABEL, "In")], true, false)]
    #[case::name_not_in(false, &[(NAMESPACE_NAME_LABEL, "NotIn")], true, true)]
    #[case::name_does_not_exist(false, &[(NAMESPACE_NAME_LABEL, "DoesNotExist")], true, false)]
    #[case::opt_out_label(false, &[("opt-out", "DoesNotExist")], true, true)]
    #[case::team_not_in(false, &[("team", "NotIn")], false, true)]
    #[case::team_exists(false, &[("team", "Exists")], true, false)]
    #[case::all_must_hold(false, &[("opt-out", "DoesNotExist"), ("team", "In")], true, false)]
    #[case::unknown_operator(false, &[("team", "Matches")], true, false)]
    fn selectors_are_judged_by_what_a_new_object_meets(
        #[case] has_match_labels: bool,
        #[case] expressions: &[(&'static str, &'static str)],
        #[case] namespaces: bool,
        #[case] selects: bool,
    ) {
        assert_eq!(
            selects_unlabelled(has_match_labels, expressions.iter().copied(), namespaces),
            selects
        );
    }
}
