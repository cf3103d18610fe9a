//! The decisions shared by the Namespace Baseline admission policy and reconciler.
//!
//! Both programs link this crate (natively for the reconciler, as wasm for the policy) so
//! that the gate and the installer can never disagree about what the wall is, which
//! namespaces a baseline covers, or which objects are managed.

// The layers, top to bottom: a module imports from its own layer or the ones below, never
// from above, and no files import each other in a circle (tests/layers.rs declares the order,
// checks both and prints the graph: `make layers`). The public modules below are the crate's
// API, one path each, whichever layer holds them.

/// What a namespace's OpenReports `Report` says: the wall, holes, door and probe as results.
pub mod report;

/// What each program decides: the gate's verdicts (`admission`), the installer's plan (`plan`).
mod decisions;

/// What a NetworkPolicy means: the rule engine, holes and how far they reach, the wall and
/// its drift, the doors.
mod network;

/// The words every layer uses: the spec, the one selector engine, identities and labels, the
/// facts read of existing objects, CIDRs, the borrowed JSON value.
mod vocabulary;

pub use decisions::{admission, plan};
pub use network::{doors, holes, wall};
pub use vocabulary::{cidr, facts, identity, selector, spec};

pub use selector::{LabelSelector, SelectorError};
pub use spec::{DeletionPolicy, DnsSpec, Mode, NamespaceBaselineSpec};
