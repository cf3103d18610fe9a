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

    use kubewarden_policy_sdk::settings::SettingsValidationResponse;
    use rstest::rstest;

    fn validate_settings(payload: &str) -> SettingsValidationResponse {
        let raw = crate::validate_settings(payload.as_bytes()).expect("always an answer");
        serde_json::from_slice(&raw).expect("a SettingsValidationResponse")
    }

    #[rstest]
    #[case(r#"{"guardSelectors": ["baseline=guarded"]}"#)]
    #[case(r#"{"contextAware": true}"#)]
    fn accepts_valid_settings(#[case] payload: &str) {
        let response = validate_settings(payload);
        assert!(response.valid, "{:?}", response.message);
    }

    #[rstest]
    #[case(r#"{}"#, "no namespace would be guarded")]
    #[case(
        r#"{"guardSelectors": ["baseline!=guarded"]}"#,
        "'!=' is not supported"
    )]
    fn refuses_settings_that_cannot_work(#[case] payload: &str, #[case] message: &str) {
        let response = validate_settings(payload);
        assert!(!response.valid);
        let text = response.message.unwrap();
        assert!(text.contains(message), "{text}");
    }

    #[rstest]
    #[case::unknown_field(
        r#"{"guardSelector": ["baseline=guarded"]}"#,
        "unknown field `guardSelector`"
    )]
    #[case::wrong_type(r#"{"contextAware": "yes"}"#, "invalid type")]
    #[case::not_json("guardSelectors: [a]", "the settings cannot be read")]
    fn unreadable_settings_are_invalid_not_ignored(#[case] payload: &str, #[case] message: &str) {
        let response = validate_settings(payload);
        assert!(!response.valid);
        let text = response.message.unwrap();
        assert!(text.contains(message), "{text}");
    }
}
