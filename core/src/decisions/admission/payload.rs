//! The entry points. What the policy-server hands the policy, read the one way both the
//! policy (waPC) and the playground (wasm-bindgen) read it: the settings as
//! `validate_settings` receives them, and the `{"settings": ..., "request": ...}` payload of
//! `validate`; and [`review`], a typed request against compiled settings (the tests, the
//! demo).

use serde::Deserialize;
use serde_json::value::RawValue;

use super::host::{BaselineSource, Cluster, Host, HostCapabilities, Typed};
use super::request::AdmissionRequest;
use super::rules;
use super::settings::{Decider, Gate, PolicySettings, SettingsRef};
use super::verdict::Verdict;
use super::view::{GuardRef, RequestRef};

/// Reviews one admission request. Requests this policy does not guard, or cannot read, are
/// allowed: the policy stands only in front of the wall; an exempt requester is allowed as
/// far as its [`super::Exemption`] goes.
pub fn review(request: &AdmissionRequest, gate: &Gate, source: &dyn BaselineSource) -> Verdict {
    let decider = Decider {
        exemption: gate.exemption(&request.user_info),
        guards: gate.guards.iter().map(GuardRef::of).collect(),
        context_aware: gate.context_aware,
        holes: gate.holes,
        pods_wait_for_wall: gate.pods_wait_for_wall,
        reconciler_username: gate.reconciler_username(),
    };
    rules::review(&RequestRef::of(request), &decider, &Typed(source))
}

/// The answer to `validate_settings`: the settings when they can work, otherwise a message
/// a person can act on. Settings that cannot even be read (an unknown field, a wrong type,
/// not JSON) are invalid with the reader's message, like any other mistake.
pub fn check_settings(payload: &[u8]) -> Result<PolicySettings, String> {
    let settings = read_settings(payload)?;
    settings.validate()?;
    Ok(settings.to_owned())
}

/// [`check_settings`] without a copy of the settings: what the policy's `validate_settings`
/// answers.
pub fn settings_problem(payload: &[u8]) -> Option<String> {
    read_settings(payload)
        .and_then(|settings| settings.validate())
        .err()
}

fn read_settings(payload: &[u8]) -> Result<SettingsRef<'_>, String> {
    serde_json::from_slice(payload).map_err(|error| format!("the settings cannot be read: {error}"))
}

/// What the policy-server sends to `validate`. The request is kept raw so that it can be
/// read on its own: an unreadable request is allowed, unreadable settings are an error.
#[derive(Deserialize)]
struct ValidationPayload<'a> {
    #[serde(borrow, default)]
    settings: SettingsRef<'a>,
    #[serde(borrow, default)]
    request: Option<&'a RawValue>,
}

/// The verdict for a `validate` payload. A request the policy cannot read is not one it
/// guards, so it is allowed (a guest error would reject it, and a trap would reject every
/// request in the cluster). Settings the policy-server validated at load time always
/// read; if they do not, that is an error, not a verdict.
pub fn evaluate(payload: &[u8], source: &dyn BaselineSource) -> Result<Verdict, String> {
    evaluate_with(payload, &Typed(source))
}

/// [`evaluate`] with the cluster's answers as the policy-server gives them (JSON text), read
/// without copying them: what the policy's `validate` calls.
pub fn evaluate_in_host(payload: &[u8], host: &dyn HostCapabilities) -> Result<Verdict, String> {
    evaluate_with(payload, &Host(host))
}

/// [`ValidationPayload`] with the request read in place: one pass over the payload instead
/// of two, for the payloads that read at all.
#[derive(Deserialize)]
struct ReadPayload<'a> {
    #[serde(borrow, default)]
    settings: SettingsRef<'a>,
    #[serde(borrow, default)]
    request: Option<RequestRef<'a>>,
}

fn evaluate_with(payload: &[u8], cluster: &impl Cluster) -> Result<Verdict, String> {
    // Most payloads read in one pass. One that does not is read again as before (the request
    // on its own), which tells an unreadable request (allowed) from unreadable settings (an
    // error) and keeps every verdict and message: a payload that reads in one pass reads to
    // the same settings and request in two. Only a payload that is all UTF-8, though: the raw
    // request of two passes must be UTF-8 throughout, while one pass checks only the strings
    // it reads (not those of fields it skips).
    let fast = std::str::from_utf8(payload)
        .ok()
        .and_then(|text| serde_json::from_slice::<ReadPayload>(text.as_bytes()).ok());
    let payload = match fast {
        Some(payload) => payload,
        None => {
            let payload: ValidationPayload = serde_json::from_slice(payload)
                .map_err(|error| format!("cannot read the validation payload: {error}"))?;
            ReadPayload {
                request: payload.request.and_then(read_view),
                settings: payload.settings,
            }
        }
    };
    let Some(request) = payload.request else {
        return Ok(Verdict::Allow);
    };
    let settings = &payload.settings;
    let decider = Decider {
        exemption: settings.exemption(&request.user_info.username, &request.user_info.groups),
        guards: settings.guards(),
        context_aware: settings.context_aware,
        holes: settings.holes(),
        pods_wait_for_wall: settings.pods_wait_for_wall,
        reconciler_username: &settings.reconciler_username,
    };
    Ok(rules::review(&request, &decider, cluster))
}

/// The request as the rules read it, or `None` when it cannot be read (then it is allowed).
pub fn read_request(raw: Option<&RawValue>) -> Option<AdmissionRequest> {
    raw.and_then(|raw| serde_json::from_str::<AdmissionRequest>(raw.get()).ok())
}

/// [`read_request`], borrowing the payload's text: it reads exactly the requests
/// [`AdmissionRequest`] reads.
fn read_view(raw: &RawValue) -> Option<RequestRef<'_>> {
    serde_json::from_slice(raw.get().as_bytes()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decisions::admission::LiveBaseline;
    use serde_json::json;

    struct NoCluster;

    impl BaselineSource for NoCluster {
        fn baselines(&self) -> Result<Vec<LiveBaseline>, String> {
            Ok(Vec::new())
        }

        fn namespace(&self, name: &str) -> Result<crate::decisions::admission::ObjectView, String> {
            Err(format!("namespaces {name:?} not found"))
        }

        fn network_policy(
            &self,
            _namespace: &str,
            _name: &str,
        ) -> Result<Option<crate::decisions::admission::ObjectView>, String> {
            Ok(None)
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
