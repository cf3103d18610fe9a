//! How far a rule's peers reach, judged by what they open rather than by how they are
//! written: `0.0.0.0/1` and `128.0.0.0/1` together are the whole IPv4 internet, and a
//! `namespaceSelector` of `kubernetes.io/metadata.name Exists` selects every namespace, as
//! `0.0.0.0/0` and `namespaceSelector: {}` do. The holes check ([`crate::network::holes`]) asks these
//! two questions of the peers of one rule, whichever reader (k8s-openapi's types in the
//! reconciler, the request's JSON in the policy) read them: the addresses here, the
//! selectors of the one selector engine ([`crate::vocabulary::selector`]).

use std::net::IpAddr;

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
}
