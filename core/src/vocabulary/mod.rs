//! The words the other layers use: the NamespaceBaseline spec, the one selector engine,
//! the names and labels of what Namespace Baseline manages, what is read of existing objects,
//! CIDR blocks, and the borrowed JSON value the policy reads its payload into.

pub mod cidr;
pub mod facts;
pub mod identity;
pub(crate) mod json;
pub mod selector;
pub mod spec;
