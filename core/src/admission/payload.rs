//! What the policy-server hands the policy, read the one way both the policy (waPC) and the
//! playground (wasm-bindgen) read it: the settings as `validate_settings` receives them, and
//! the `{"settings": ..., "request": ...}` payload of `validate`.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::{AdmissionRequest, BaselineSource, PolicySettings, Verdict, review};

/// The answer to `validate_settings`: the settings when they can work, otherwise a message
/// a person can act on. Settings that cannot even be read (an unknown field, a wrong type,
/// not JSON) are invalid with the reader's message, like any other mistake.
pub fn check_settings(payload: &[u8]) -> Result<PolicySettings, String> {
    let settings: PolicySettings = serde_json::from_slice(payload)
        .map_err(|error| format!("the settings cannot be read: {error}"))?;
    settings.validate()?;
    Ok(settings)
}

/// What the policy-server sends to `validate`. The request is kept raw so that it can be
/// read on its own: an unreadable request is allowed, unreadable settings are an error.
#[derive(Deserialize)]
struct ValidationPayload<'a> {
    #[serde(default)]
    settings: PolicySettings,
    #[serde(borrow, default)]
    request: Option<&'a RawValue>,
}

/// The verdict for a `validate` payload. A request the policy cannot read is not one it
/// guards, so it is allowed (a guest error would reject it, and a trap would reject every
/// request in the cluster). Settings the policy-server validated at load time always
/// read; if they do not, that is an error, not a verdict.
pub fn evaluate(payload: &[u8], source: &dyn BaselineSource) -> Result<Verdict, String> {
    let payload: ValidationPayload = serde_json::from_slice(payload)
        .map_err(|error| format!("cannot read the validation payload: {error}"))?;
    Ok(match read_request(payload.request) {
        Some(request) => review(&request, &payload.settings.gate(), source),
        None => Verdict::Allow,
    })
}

/// The request as the rules read it, or `None` when it cannot be read (then it is allowed).
pub fn read_request(raw: Option<&RawValue>) -> Option<AdmissionRequest> {
    raw.and_then(|raw| serde_json::from_str::<AdmissionRequest>(raw.get()).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::LiveBaseline;
    use serde_json::json;

    struct NoCluster;

    impl BaselineSource for NoCluster {
        fn baselines(&self) -> Result<Vec<LiveBaseline>, String> {
            Ok(Vec::new())
        }

        fn namespace(&self, name: &str) -> Result<crate::admission::ObjectView, String> {
            Err(format!("namespaces {name:?} not found"))
        }
    }

    #[test]
    fn settings_are_read_then_validated() {
        let settings = check_settings(br#"{"guardSelectors": ["baseline=guarded"]}"#).unwrap();
        assert_eq!(settings.guard_selectors, ["baseline=guarded"]);
        let unreadable = check_settings(br#"{"guards": []}"#).unwrap_err();
        assert!(
            unreadable.starts_with("the settings cannot be read: unknown field `guards`"),
            "{unreadable}"
        );
        let invalid = check_settings(b"{}").unwrap_err();
        assert!(
            invalid.contains("no namespace would be guarded"),
            "{invalid}"
        );
    }

    #[test]
    fn a_payload_is_settings_and_a_request() {
        let payload = json!({
            "settings": {"guardSelectors": ["baseline"]},
            "request": {
                "kind": {"group": "", "kind": "Namespace"},
                "operation": "UPDATE",
                "userInfo": {"username": "bob"},
                "object": {"metadata": {"name": "a", "labels": {}}},
                "oldObject": {"metadata": {"name": "a", "labels": {"baseline": "x"}}},
            },
        });
        let verdict = evaluate(payload.to_string().as_bytes(), &NoCluster).unwrap();
        assert!(!verdict.is_allowed(), "{verdict:?}");
        let unreadable_request = json!({"settings": {"contextAware": true}, "request": [1]});
        assert_eq!(
            evaluate(unreadable_request.to_string().as_bytes(), &NoCluster),
            Ok(Verdict::Allow)
        );
        assert!(
            evaluate(b"not json", &NoCluster)
                .unwrap_err()
                .starts_with("cannot read the validation payload")
        );
    }
}
