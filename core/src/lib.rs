//! The decisions shared by the Namespace Baseline admission policy and reconciler.
//!
//! Both programs link this crate (natively for the reconciler, as wasm for the policy) so
//! that the gate and the installer can never disagree about what the wall is, which
//! namespaces a baseline covers, or which objects are managed.

pub mod admission;
pub mod cidr;
pub mod doors;
mod engine;
pub mod facts;
pub mod holes;
pub mod identity;
pub mod plan;
mod reach;
pub mod report;
pub mod selector;
pub mod spec;
pub mod wall;

pub use selector::{LabelSelector, SelectorError};
pub use spec::{DeletionPolicy, DnsSpec, Mode, NamespaceBaselineSpec};
