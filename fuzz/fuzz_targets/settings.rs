//! Arbitrary bytes as settings: `validate_settings` always answers, and settings it
//! accepts compile into a gate whose guards all parse.
#![no_main]

use libfuzzer_sys::fuzz_target;
use namespace_baseline_core::admission::PolicySettings;
use namespace_baseline_policy::Settings;

fuzz_target!(|data: &[u8]| {
    let answer = kubewarden_policy_sdk::validate_settings::<Settings>(data);
    if let Ok(settings) = serde_json::from_slice::<PolicySettings>(data) {
        let response: serde_json::Value =
            serde_json::from_slice(&answer.expect("readable settings get an answer")).unwrap();
        let valid = settings.validate().is_ok();
        assert_eq!(response["valid"], valid);
        if valid {
            let gate = settings.gate();
            assert_eq!(gate.guards.len(), settings.guard_selectors.len());
        }
    } else {
        assert!(answer.is_err(), "unreadable settings must be an error");
    }
});
