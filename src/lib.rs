//! The Namespace Baseline admission policy: waPC glue only. It parses the request, asks the
//! shared core for a verdict and writes the Kubewarden response; every rule lives in
//! `namespace_baseline_core::admission`.

mod baselines;
pub mod settings;

use kubewarden_policy_sdk::response::ValidationResponse;
use kubewarden_policy_sdk::settings::SettingsValidationResponse;
use kubewarden_policy_sdk::wapc_guest as guest;
use kubewarden_policy_sdk::{accept_request, protocol_version_guest, reject_request};
use namespace_baseline_core::admission::{self, Verdict};

use guest::prelude::*;

pub use baselines::ClusterBaselines;
pub use settings::Settings;

#[unsafe(no_mangle)]
pub extern "C" fn wapc_init() {
    register_function("validate", validate);
    register_function("validate_settings", validate_settings);
    register_function("protocol_version", protocol_version_guest);
}

/// Answers whether the settings can work, with the core's check (the playground asks the
/// same one). Settings that cannot even be read are invalid with the reader's message,
/// rather than a guest error the policy-server would wrap beyond recognition.
pub fn validate_settings(payload: &[u8]) -> CallResult {
    let response = match admission::check_settings(payload) {
        Ok(_) => SettingsValidationResponse {
            valid: true,
            message: None,
        },
        Err(message) => SettingsValidationResponse {
            valid: false,
            message: Some(message),
        },
    };
    Ok(serde_json::to_vec(&response)?)
}

fn validate(payload: &[u8]) -> CallResult {
    match evaluate(payload, &ClusterBaselines) {
        Ok(Verdict::Allow) => accept_request(),
        Ok(Verdict::Warn(warnings)) => accept_with_warnings(warnings),
        Ok(Verdict::Deny(message)) => reject_request(Some(message), Some(403), None, None),
        Err(error) => Err(error.into()),
    }
}

/// An acceptance carrying warnings for the requester (the SDK has a constructor for
/// rejections with warnings only).
pub fn accept_with_warnings(warnings: Vec<String>) -> CallResult {
    Ok(serde_json::to_vec(&ValidationResponse {
        accepted: true,
        message: None,
        code: None,
        mutated_object: None,
        audit_annotations: None,
        warnings: Some(warnings),
    })?)
}

/// The verdict for a `validate` payload: the core's [`admission::evaluate`], which the
/// playground calls too.
pub use admission::evaluate;

#[cfg(test)]
mod tests;
