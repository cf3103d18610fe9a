//! CIDR blocks, as NetworkPolicy `ipBlock`s name them: parsed strictly (the network address,
//! no host bits), and whether an address is inside.

use std::fmt;
use std::net::IpAddr;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub network: IpAddr,
    pub prefix: u8,
}

impl Cidr {
    /// `10.0.0.0/8`, `169.254.20.10/32`, `fd00::/8`...; an error that says what is wrong.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (address, prefix) = text.split_once('/').ok_or_else(|| {
            format!(
                "{text:?} is not a CIDR: give an address and a prefix length, e.g. 169.254.20.10/32"
            )
        })?;
        let network: IpAddr = address
            .parse()
            .map_err(|_| format!("{text:?}: {address:?} is not an IPv4 or IPv6 address"))?;
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix: u8 = prefix
            .parse()
            .ok()
            .filter(|prefix| *prefix <= max)
            .ok_or_else(|| format!("{text:?}: the prefix length must be 0 to {max}"))?;
        let cidr = Self { network, prefix };
        let canonical = Self {
            network: cidr.mask(network),
            prefix,
        };
        if canonical != cidr {
            return Err(format!(
                "{text:?} has host bits set: the network is {canonical}"
            ));
        }
        Ok(cidr)
    }

    /// A single address as a /32 or /128.
    pub fn host(address: IpAddr) -> Self {
        Self {
            network: address,
            prefix: if address.is_ipv4() { 32 } else { 128 },
        }
    }

    fn mask(&self, address: IpAddr) -> IpAddr {
        match address {
            IpAddr::V4(v4) => {
                let bits = u32::from(v4);
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::V4((bits & mask).into())
            }
            IpAddr::V6(v6) => {
                let bits = u128::from(v6);
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::V6((bits & mask).into())
            }
        }
    }

    /// Whether `address` is inside this block (an address of the other family never is).
    pub fn contains(&self, address: IpAddr) -> bool {
        address.is_ipv4() == self.network.is_ipv4() && self.mask(address) == self.network
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("169.254.20.10/32")]
    #[case("10.0.0.0/8")]
    #[case("0.0.0.0/0")]
    #[case("fd00::/8")]
    #[case("::/0")]
    #[case("2001:db8::53/128")]
    fn valid_blocks_round_trip(#[case] text: &str) {
        assert_eq!(Cidr::parse(text).unwrap().to_string(), text);
    }

    #[rstest]
    #[case("10.0.0.1", "not a CIDR")]
    #[case("10.0.0.1/24", "host bits set: the network is 10.0.0.0/24")]
    #[case("10.0.0.0/33", "prefix length must be 0 to 32")]
    #[case("fd00::1/8", "host bits set: the network is fd00::/8")]
    #[case("fd00::/129", "prefix length must be 0 to 128")]
    #[case("kube-dns/32", "not an IPv4 or IPv6 address")]
    #[case("10.0.0.0/-1", "prefix length")]
    fn invalid_blocks_say_what_is_wrong(#[case] text: &str, #[case] expected: &str) {
        let error = Cidr::parse(text).unwrap_err();
        assert!(error.contains(expected), "{error}");
    }

    #[rstest]
    #[case("10.96.0.0/12", "10.96.0.10", true)]
    #[case("10.96.0.0/12", "10.112.0.1", false)]
    #[case("169.254.20.10/32", "169.254.20.10", true)]
    #[case("169.254.20.10/32", "169.254.20.11", false)]
    #[case("0.0.0.0/0", "8.8.8.8", true)]
    #[case("0.0.0.0/0", "::1", false)]
    #[case("fd00::/8", "fd12::53", true)]
    #[case("fd00::/8", "fe80::1", false)]
    fn containment(#[case] block: &str, #[case] address: &str, #[case] inside: bool) {
        let block = Cidr::parse(block).unwrap();
        assert_eq!(block.contains(address.parse().unwrap()), inside);
    }
}
