//! What the admission policy decides. The policy (waPC) and the playground only parse and
//! translate; every verdict comes from here.
//!
//! The public types ([`AdmissionRequest`], [`PolicySettings`], [`LiveBaseline`], ...) own
//! their data; the policy's `validate` reads its payload into borrowed views of the same
//! shape instead (`view`), and its host answers as JSON text ([`HostCapabilities`]), and
//! both go through the same rules.
//!
//! The files, from the entry points down: `payload` (what the policy-server hands the
//! policy, and the typed [`review`]) → `rules` (one function per case) → `pods` (pods wait
//! for their wall) → `host` (the cluster's answers, typed or as the host's JSON) → `settings`
//! → `baselines` and `request` (the public types, and their borrowed views) → `view` (the
//! views the rules read) → `netpol` (the policy's NetworkPolicy reader) → `borrowed` (the
//! payload's shape) → `holes_setting`, `verdict`. This file only declares them.

mod baselines;
mod borrowed;
mod holes_setting;
mod host;
mod netpol;
mod payload;
mod pods;
mod request;
mod rules;
mod settings;
mod verdict;
mod view;

pub use crate::vocabulary::json::Text;
pub use baselines::{Guard, LiveBaseline, LiveBaselineMetadata, LiveBaselineSpec};
pub use holes_setting::HolesSetting;
pub use host::{BaselineSource, HostCapabilities, NETWORK_POLICY_NOT_FOUND};
pub use payload::{
    check_settings, evaluate, evaluate_in_host, read_request, review, settings_problem,
};
pub use request::{AdmissionRequest, GroupVersionKind, MetadataView, ObjectView, UserInfo};
pub use rules::{LiveBaselines, MAX_HOLES_LISTED};
pub use settings::{
    ANONYMOUS_USER, CONTROL_PLANE_USERS, EVERYONE_GROUPS, Exemption, Gate, PolicySettings,
    SettingsRef,
};
pub use verdict::Verdict;

#[cfg(test)]
mod selector_tests;
#[cfg(test)]
mod tests;
