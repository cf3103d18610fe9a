//! The Namespace Baseline admission policy: waPC glue only. It parses the request, asks the
//! shared core for a verdict and writes the Kubewarden response; every rule lives in
//! `namespace_baseline_core::admission`.

mod baselines;
pub mod settings;

use kubewarden_policy_sdk::settings::{SettingsValidationResponse, Validatable};
use kubewarden_policy_sdk::wapc_guest as guest;
use kubewarden_policy_sdk::{accept_request, protocol_version_guest, reject_request};
use namespace_baseline_core::admission::{self, AdmissionRequest, BaselineSource, Verdict};
use serde::Deserialize;
use serde_json::value::RawValue;

use guest::prelude::*;

pub use baselines::ClusterBaselines;
pub use settings::Settings;

#[unsafe(no_mangle)]
pub extern "C" fn wapc_init() {
    register_function("validate", validate);
    register_function("validate_settings", validate_settings);
    register_function("protocol_version", protocol_version_guest);
}

/// Answers whether the settings can work. Settings that cannot even be read (an unknown
/// field, a wrong type) are invalid with the reader's message, like any other mistake,
/// rather than a guest error the policy-server would wrap beyond recognition.
pub fn validate_settings(payload: &[u8]) -> CallResult {
    let response = match serde_json::from_slice::<Settings>(payload) {
        Ok(settings) => match settings.validate() {
            Ok(()) => SettingsValidationResponse {
                valid: true,
                message: None,
            },
            Err(message) => SettingsValidationResponse {
                valid: false,
                message: Some(message),
            },
        },
        Err(error) => SettingsValidationResponse {
            valid: false,
            message: Some(format!("the settings cannot be read: {error}")),
        },
    };
    Ok(serde_json::to_vec(&response)?)
}

/// What the policy-server sends to `validate`. The request is kept raw so that it can be
/// read on its own: an unreadable request is allowed, unreadable settings are an error.
#[derive(Deserialize)]
struct ValidationPayload<'a> {
    #[serde(default)]
    settings: Settings,
    #[serde(borrow, default)]
    request: Option<&'a RawValue>,
}

fn validate(payload: &[u8]) -> CallResult {
    match evaluate(payload, &ClusterBaselines) {
        Ok(Verdict::Allow) => accept_request(),
        Ok(Verdict::Deny(message)) => reject_request(Some(message), Some(403), None, None),
        Err(error) => Err(error.into()),
    }
}

/// The verdict for a `validate` payload. A request the policy cannot read is not one it
/// guards, so it is allowed (a guest error would reject it, and a trap would reject every
/// request in the cluster). Settings the policy-server validated at load time always
/// read; if they do not, that is an error, not a verdict.
pub fn evaluate(payload: &[u8], source: &dyn BaselineSource) -> Result<Verdict, String> {
    let payload: ValidationPayload = serde_json::from_slice(payload)
        .map_err(|error| format!("cannot read the validation payload: {error}"))?;
    let request = payload
        .request
        .and_then(|raw| serde_json::from_str::<AdmissionRequest>(raw.get()).ok());
    Ok(match request {
        Some(request) => admission::review(&request, &payload.settings.gate(), source),
        None => Verdict::Allow,
    })
}

#[cfg(test)]
mod tests;
