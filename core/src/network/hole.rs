//! A hole: one rule of one NetworkPolicy that opens the wall, which direction, and how far
//! (widest first: the whole internet, every pod of the cluster, some namespaces, some pods,
//! some addresses). The rule engine ([`super::engine`]) says which rules are holes; this is
//! its answer, read by the reconciler's status and metrics, the admission policy's `holes`
//! rule and the reports.

use std::fmt;

use serde::Serialize;

/// How far a rule opens the wall, widest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Width {
    /// Any address: a rule without peers, or ipBlocks that together open the internet
    /// ([`crate::network::reach::opens_internet`]: `0.0.0.0/0`, `::/0`, `0.0.0.0/1` with
    /// `128.0.0.0/1`, whatever their `except` lists carve out of them).
    World,
    /// Every pod of every namespace: a `namespaceSelector` that selects every namespace anyone
    /// creates (`{}`, `kubernetes.io/metadata.name Exists`, only `NotIn` or `DoesNotExist`
    /// terms: [`crate::vocabulary::selector::selects_unlabelled`]) with a pod selector that selects every
    /// pod in the same sense, or none.
    Cluster,
    /// Some namespaces (every pod in them).
    Namespaces,
    /// Some pods (of this namespace, or of some namespaces).
    Pods,
    /// Some addresses: an ipBlock narrower than the whole internet.
    Addresses,
}

impl Width {
    pub const ALL: [Self; 5] = [
        Self::World,
        Self::Cluster,
        Self::Namespaces,
        Self::Pods,
        Self::Addresses,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::World => "World",
            Self::Cluster => "Cluster",
            Self::Namespaces => "Namespaces",
            Self::Pods => "Pods",
            Self::Addresses => "Addresses",
        }
    }

    /// Whether a hole this wide undoes the wall (the `Sealed` condition, the policy's
    /// `holes` setting): `World` and `Cluster`.
    pub fn is_breach(self) -> bool {
        matches!(self, Self::World | Self::Cluster)
    }
}

impl fmt::Display for Width {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Direction {
    Ingress,
    Egress,
}

impl Direction {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ingress => "Ingress",
            Self::Egress => "Egress",
        }
    }

    /// `ingress` or `egress`, as a sentence says it (without `str::to_lowercase`, whose
    /// Unicode tables would add 18 KB to the policy's wasm module).
    pub fn as_lowercase(self) -> &'static str {
        match self {
            Self::Ingress => "ingress",
            Self::Egress => "egress",
        }
    }
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One rule of one policy that opens the wall.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Hole {
    pub policy: String,
    pub direction: Direction,
    /// The rule's index in the policy's `ingress` or `egress` list.
    pub rule: usize,
    pub width: Width,
    /// The rule names no port: every port is open.
    pub all_ports: bool,
    /// For a rule that selects namespaces (`Cluster`, `Namespaces`): how many of the live
    /// namespaces it reaches, when the caller knows them ([`namespace_reach`]: the
    /// reconciler); `None` otherwise (the admission policy sees no namespace list).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reach: Option<NamespaceReach>,
}

/// How many of the live (not terminating) namespaces a rule's namespace selectors select.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct NamespaceReach {
    pub reached: u32,
    pub of: u32,
}

impl fmt::Display for Hole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "NetworkPolicy {} {} rule {} opens {} to {}",
            self.policy,
            self.direction.as_lowercase(),
            self.rule,
            if self.all_ports {
                "every port"
            } else {
                "some ports"
            },
            match self.width {
                Width::World => "the whole internet",
                Width::Cluster => "every pod of the cluster",
                Width::Namespaces => "some namespaces",
                Width::Pods => "some pods",
                Width::Addresses => "some addresses",
            }
        )?;
        match self.reach {
            Some(NamespaceReach { reached, of }) => write!(f, " ({reached} of {of} namespaces)"),
            None => Ok(()),
        }
    }
}

/// Holes counted by width, for status and metrics.
pub fn count_by_width<'a>(holes: impl IntoIterator<Item = &'a Hole>) -> [(Width, u32); 5] {
    let mut counts = Width::ALL.map(|width| (width, 0));
    for hole in holes {
        if let Some(entry) = counts.iter_mut().find(|(width, _)| *width == hole.width) {
            entry.1 += 1;
        }
    }
    counts
}
