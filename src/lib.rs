//! The Namespace Baseline admission policy: waPC glue only. It parses the request, asks the
//! shared core for a verdict and writes the Kubewarden response; every rule lives in
//! `namespace_baseline_core::admission`.

mod baselines;
pub mod settings;

use kubewarden_policy_sdk::protocol_version_guest;
use kubewarden_policy_sdk::settings::SettingsValidationResponse;
use kubewarden_policy_sdk::wapc_guest as guest;
use namespace_baseline_core::admission::{self, Verdict};

use guest::prelude::*;

pub use baselines::{
    ClusterBaselines, LIST_BASELINES_REQUEST, get_namespace_request, get_network_policy_request,
};
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
    let message = admission::settings_problem(payload);
    let response = SettingsValidationResponse {
        valid: message.is_none(),
        message,
    };
    Ok(serde_json::to_vec(&response)?)
}

fn validate(payload: &[u8]) -> CallResult {
    match admission::evaluate_in_host(payload, &ClusterBaselines) {
        Ok(Verdict::Allow) => respond(true, None, None),
        Ok(Verdict::Warn(warnings)) => respond(true, None, Some(&warnings)),
        Ok(Verdict::Deny(message)) => respond(false, Some(&message), None),
        Err(error) => Err(error.into()),
    }
}

/// An acceptance (with warnings for the requester, if any) or a rejection with HTTP 403:
/// the JSON the SDK's `ValidationResponse` is written as by its `accept_request` and
/// `reject_request` (a test checks it), without its `mutated_object` and `audit_annotations`
/// writers, which a validating policy never fills.
fn respond(accepted: bool, message: Option<&str>, warnings: Option<&[String]>) -> CallResult {
    let mut out = Vec::with_capacity(128 + message.map_or(0, str::len));
    out.extend_from_slice(if accepted {
        br#"{"accepted":true,"message":"#
    } else {
        br#"{"accepted":false,"message":"#
    });
    match message {
        Some(message) => serde_json::to_writer(&mut out, message)?,
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(if accepted {
        br#","code":null,"mutated_object":null,"audit_annotations":null,"warnings":"#
    } else {
        br#","code":403,"mutated_object":null,"audit_annotations":null,"warnings":"#
    });
    match warnings {
        Some(warnings) => serde_json::to_writer(&mut out, warnings)?,
        None => out.extend_from_slice(b"null"),
    }
    out.push(b'}');
    Ok(out)
}

/// An acceptance carrying warnings for the requester (the SDK has a constructor for
/// rejections with warnings only).
pub fn accept_with_warnings(warnings: Vec<String>) -> CallResult {
    respond(true, None, Some(&warnings))
}

/// The verdict for a `validate` payload: the core's [`admission::evaluate`], which the
/// playground calls too.
pub use admission::evaluate;

#[cfg(test)]
mod tests;
