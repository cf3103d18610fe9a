//! Arbitrary bytes as settings: `validate_settings` always answers, unreadable settings
//! are invalid, and settings it accepts compile into a gate whose guards all parse.
#![no_main]

use libfuzzer_sys::fuzz_target;
use namespace_baseline_core::admission::PolicySettings;

fuzz_target!(|data: &[u8]| {
    let answer = namespace_baseline_policy::validate_settings(data).expect("always an answer");
    let response: serde_json::Value = serde_json::from_slice(&answer).expect("a response");
    match serde_json::from_slice::<PolicySettings>(data) {
        Ok(settings) => {
            let valid = settings.validate().is_ok();
            assert_eq!(response["valid"], valid);
            if valid {
                let gate = settings.gate();
                assert_eq!(gate.guards.len(), settings.guard_selectors.len());
            }
        }
        Err(_) => assert_eq!(response["valid"], false, "unreadable settings must be invalid"),
    }
});
