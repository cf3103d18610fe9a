//! The one-shot commands beside `run`: `plan` (what the reconciler would write, without
//! writing), `api-door` (the reconciler's own NetworkPolicy for this cluster's API server)
//! and `crd` (the CRD's YAML).

pub mod api_door;
pub mod cluster_plan;
pub mod crd;
