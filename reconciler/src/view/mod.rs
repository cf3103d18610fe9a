//! One leadership term's view of the cluster, as its watches deliver it: the caches a
//! reconcile reads, the mapping from a watch event to the baselines and namespaces it
//! concerns, and the memory of what this term wrote that the watches have not shown yet
//! ([`unseen_writes`]).
//! Nothing here writes to the API.

pub mod caches;
pub mod namespace_cache;
pub mod policy_cache;
pub mod reports;
pub mod scope;
pub mod triggers;
pub mod unseen_writes;
pub mod watched_cache;
