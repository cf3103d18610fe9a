//! The project's file formats, each with one reader:
//!
//! - [`fixture`]: an admission fixture of `e2e-tests/fixtures/` (request, settings, live
//!   baselines, host-capability failure, expected verdict). The e2e runner, its tests and
//!   benchmark, the playground's tests and its examples index all read fixtures here; the
//!   kwctl bats file reads them with `jq` through one function (`fixture_jq`).
//!   [`fixture::kwctl_session`]: the host calls the policy made for a fixture, and the
//!   fixture's answers, as the session kwctl replays (written by the e2e runner).
//! - [`yaml`]: YAML documents (Kubernetes manifests, `metadata.yml`, kubeconfigs), read into
//!   and written from JSON values with one YAML crate.

pub mod fixture;
pub mod yaml;
