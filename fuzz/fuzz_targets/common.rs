//! Shared by the fuzz targets: a host stand-in and the invariants every verdict keeps.

use namespace_baseline_core::admission::{
    AdmissionRequest, BaselineSource, CONTROL_PLANE_USERS, Exemption, LiveBaseline, ObjectView,
    Verdict,
};
use namespace_baseline_core::identity::reconciler_username;

/// Answers the context-aware lookup with two baselines, or an error.
pub struct Host {
    pub fail: bool,
}

impl BaselineSource for Host {
    fn baselines(&self) -> Result<Vec<LiveBaseline>, String> {
        if self.fail {
            return Err("injected host failure".into());
        }
        Ok(["baseline=guarded", "tier"]
            .iter()
            .enumerate()
            .map(|(i, label)| LiveBaseline {
                metadata: namespace_baseline_core::admission::LiveBaselineMetadata {
                    name: format!("b{i}"),
                },
                spec: namespace_baseline_core::admission::LiveBaselineSpec {
                    namespace_label: (*label).into(),
                    namespace_selector: None,
                    mode: Default::default(),
                    allow_dns: i == 0,
                },
            })
            .collect())
    }

    /// Every namespace is walled by the first baseline (or cannot be read).
    fn namespace(&self, name: &str) -> Result<ObjectView, String> {
        if self.fail {
            return Err("injected host failure".into());
        }
        let mut view = ObjectView::default();
        view.metadata.name = name.to_owned();
        view.metadata.labels.insert("baseline".into(), "guarded".into());
        Ok(view)
    }

    /// The first baseline's deny-all exists in every namespace; its DNS door nowhere.
    fn network_policy(&self, namespace: &str, name: &str) -> Result<Option<ObjectView>, String> {
        if self.fail {
            return Err("injected host failure".into());
        }
        if name != "nsb-b0-default-deny" {
            return Ok(None);
        }
        let mut view = ObjectView::default();
        view.metadata.name = name.to_owned();
        view.metadata.namespace = namespace.to_owned();
        view.metadata.labels.insert(
            namespace_baseline_core::identity::BASELINE_LABEL.into(),
            "b0".into(),
        );
        Ok(Some(view))
    }
}

/// Properties that hold for every request, whatever its content.
pub fn check_invariants(payload: &[u8], verdict: &Result<Verdict, String>) {
    let Ok(verdict) = verdict else { return };
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(payload) else { return };
    let Ok(request) = serde_json::from_value::<AdmissionRequest>(value["request"].clone()) else {
        assert_eq!(*verdict, Verdict::Allow, "an unreadable request must be allowed");
        return;
    };
    let user = request.user_info.username.as_str();
    let default_settings = value["settings"].get("reconcilerUsername").is_none();
    if default_settings && user == reconciler_username() {
        assert_eq!(*verdict, Verdict::Allow, "exempt identity {user} was denied");
    }
    // The control plane's controllers are exempt for DELETE only (the namespace controller in
    // a terminating namespace, which the fuzz host never answers with).
    let control_plane = CONTROL_PLANE_USERS.iter().find(|(name, _)| *name == user);
    if let Some((_, exemption)) = control_plane {
        if *exemption == Exemption::Deletes && request.operation == "DELETE" {
            assert_eq!(*verdict, Verdict::Allow, "{user}'s DELETE was denied");
        }
    }
    // A Pod CREATE waits for its namespace's wall only when podsWaitForWall asks for it.
    let pod_waits = request.is_pod()
        && request.operation == "CREATE"
        && value["settings"]["podsWaitForWall"] == true;
    if !request.is_network_policy() && !request.is_namespace() && !pod_waits {
        assert_eq!(*verdict, Verdict::Allow, "a kind the policy does not guard was denied");
    }
    if !verdict.warnings().is_empty() {
        let warns = request.is_network_policy()
            && matches!(request.operation.as_str(), "CREATE" | "UPDATE")
            && value["settings"]["holes"] != "Ignore";
        assert!(warns, "only a NetworkPolicy CREATE or UPDATE may warn, and not with holes: Ignore");
    }
    // A Namespace CREATE is judged by its labels alone (an "every namespace except…"
    // baseline may refuse it, and refuses what it cannot check); anything else that keeps the
    // labels cannot take a namespace out of a baseline.
    if request.is_namespace() && request.operation != "CREATE" {
        let labels = |o: &Option<namespace_baseline_core::admission::ObjectView>| {
            o.as_ref().map(|o| o.metadata.labels.clone())
        };
        if labels(&request.object) == labels(&request.old_object) {
            assert_eq!(*verdict, Verdict::Allow, "a namespace update keeping its labels was denied");
        }
    }
}
