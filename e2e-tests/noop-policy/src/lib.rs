//! A no-op Kubewarden policy: the floor the Namespace Baseline policy is benchmarked
//! against (`e2e-tests/runner/benches/policy.rs`, `make bench-policy`).
//!
//! It is built like the real policy (wasm32-wasip1, the workspace's `policy` profile, the
//! same kubewarden-policy-sdk) and registers the same three waPC functions: `validate`
//! accepts every request without reading it, answering with the SDK's own
//! `accept_request`; `validate_settings` is the real policy's check
//! (`admission::settings_problem`), so that both load with the same settings; and
//! `protocol_version` is the SDK's. What the benchmark measures for it is therefore the
//! waPC host's round trip (payload in, a ValidationResponse out) and nothing of a decision.

use kubewarden_policy_sdk::settings::SettingsValidationResponse;
use kubewarden_policy_sdk::wapc_guest::{CallResult, register_function};
use kubewarden_policy_sdk::{accept_request, protocol_version_guest};
use namespace_baseline_core::admission;

#[unsafe(no_mangle)]
pub extern "C" fn wapc_init() {
    register_function("validate", validate);
    register_function("validate_settings", validate_settings);
    register_function("protocol_version", protocol_version_guest);
}

/// Accepts everything.
pub fn validate(_payload: &[u8]) -> CallResult {
    accept_request()
}

/// The Namespace Baseline policy's own settings check, answered the same way.
pub fn validate_settings(payload: &[u8]) -> CallResult {
    let message = admission::settings_problem(payload);
    let response = SettingsValidationResponse {
        valid: message.is_none(),
        message,
    };
    Ok(serde_json::to_vec(&response)?)
}
