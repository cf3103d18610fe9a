//! NetworkPolicy semantics, decided once: what a spec opens ([`engine`], [`hole`], [`reach`],
//! and [`holes`] over k8s-openapi's types), the wall a baseline wants and its drift
//! ([`wall`]), and whether a door opens onto what it is for ([`doors`]).

pub mod doors;
pub(crate) mod engine;
pub(crate) mod hole;
pub mod holes;
pub(crate) mod reach;
pub mod wall;
