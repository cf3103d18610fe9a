//! The policy's settings as Kubewarden reads them. The fields and their checks live in the
//! core ([`PolicySettings`]) so that the playground validates exactly as the policy does.

use std::ops::Deref;

use kubewarden_policy_sdk::settings::Validatable;
use namespace_baseline_core::admission::PolicySettings;
use serde::{Deserialize, Serialize};

#[derive(Deserialize, Serialize, Debug, Clone, Default, PartialEq)]
#[serde(transparent)]
pub struct Settings(pub PolicySettings);

impl Validatable for Settings {
    fn validate(&self) -> Result<(), String> {
        self.0.validate()
    }
}

impl Deref for Settings {
    type Target = PolicySettings;

    fn deref(&self) -> &PolicySettings {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubewarden_policy_sdk::settings::SettingsValidationResponse;
    use rstest::rstest;

    fn validate_settings(payload: &str) -> Result<SettingsValidationResponse, String> {
        let raw = kubewarden_policy_sdk::validate_settings::<Settings>(payload.as_bytes())
            .map_err(|e| e.to_string())?;
        serde_json::from_slice(&raw).map_err(|e| e.to_string())
    }

    #[rstest]
    #[case(r#"{"guardSelectors": ["baseline=guarded"]}"#)]
    #[case(r#"{"contextAware": true}"#)]
    fn accepts_valid_settings(#[case] payload: &str) {
        let response = validate_settings(payload).unwrap();
        assert!(response.valid, "{:?}", response.message);
    }

    #[rstest]
    #[case(r#"{}"#, "no namespace would be guarded")]
    #[case(
        r#"{"guardSelectors": ["baseline!=guarded"]}"#,
        "'!=' is not supported"
    )]
    fn refuses_settings_that_cannot_work(#[case] payload: &str, #[case] message: &str) {
        let response = validate_settings(payload).unwrap();
        assert!(!response.valid);
        assert!(response.message.unwrap().contains(message));
    }

    #[test]
    fn unknown_fields_are_errors_not_ignored() {
        let error = validate_settings(r#"{"guardSelector": ["baseline=guarded"]}"#).unwrap_err();
        assert!(error.contains("unknown field `guardSelector`"), "{error}");
    }
}
