//! Which NamespaceBaselines a Namespace or NetworkPolicy event concerns.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use namespace_baseline_core::identity::{
    BASELINE_LABEL, baseline_label_value, claims_management, deny_all_policy_name, dns_policy_name,
};
use namespace_baseline_core::spec::NamespaceBaseline;

/// What a namespace looked like to us last time: its labels, and whether it was going away.
type Seen = (Labels, bool);

/// Labels as remembered for every namespace: sorted pairs in one boxed slice (a `BTreeMap`
/// node takes about 540 bytes whatever it holds: 2.7 MiB at 5,000 namespaces).
type Labels = Box<[(Box<str>, Box<str>)]>;

fn remembered(labels: &BTreeMap<String, String>) -> Labels {
    labels
        .iter()
        .map(|(key, value)| (key.as_str().into(), value.as_str().into()))
        .collect()
}

fn recalled(labels: &Labels) -> BTreeMap<String, String> {
    labels
        .iter()
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect()
}

/// Maps namespace events to baselines. A watch event carries only the new object, but a
/// namespace that *leaves* a baseline concerns that baseline too (its count changes; with
/// `deletionPolicy: Delete` its wall goes): so the labels each namespace had when last seen
/// are remembered. Matching the new labels plus the baselines with policies in the namespace
/// would miss a namespace leaving an `Audit` baseline or one whose wall is not installed yet.
///
/// Events that change neither the labels nor the terminating state (status, annotations,
/// resyncs) trigger nothing.
#[derive(Debug, Default)]
pub struct NamespaceTriggers {
    seen: Mutex<HashMap<String, Seen>>,
}

impl NamespaceTriggers {
    pub fn baselines_for(
        &self,
        namespace: &ObjectMeta,
        baselines: &[Arc<NamespaceBaseline>],
    ) -> Vec<ObjectRef<NamespaceBaseline>> {
        let name = namespace.name.clone().unwrap_or_default();
        let terminating = namespace.deletion_timestamp.is_some();
        let labels = namespace.labels.clone().unwrap_or_default();
        let now = remembered(&labels);
        let previous = {
            let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
            if terminating {
                // Its last events (the final one is the deletion) all carry the timestamp.
                seen.remove(&name)
            } else {
                seen.insert(name, (now.clone(), false))
            }
        };
        if previous.as_ref() == Some(&(now, terminating)) {
            return Vec::new();
        }
        let old_labels = previous.map(|(old, _)| recalled(&old));
        baselines
            .iter()
            .filter(|baseline| {
                let Ok(selector) = baseline.spec.validate() else {
                    return false;
                };
                selector.matches(&labels)
                    || old_labels
                        .as_ref()
                        .is_some_and(|old_labels| selector.matches(old_labels))
            })
            .map(|baseline| ObjectRef::from_obj(baseline.as_ref()))
            .collect()
    }
}

/// The baselines a NetworkPolicy event concerns. A managed policy belongs to its baseline:
/// by its baseline label, or by its name when that label was tampered with (the policy is
/// then ours to repair). Any other policy may open a hole in the walls of the baselines that
/// cover its namespace (`namespace_labels` reads them from the namespace cache).
pub fn baselines_for_policy(
    policy: &NetworkPolicy,
    baselines: &[Arc<NamespaceBaseline>],
    namespace_labels: impl Fn(&str) -> Option<BTreeMap<String, String>>,
) -> Vec<ObjectRef<NamespaceBaseline>> {
    if !claims_management(policy.labels()) {
        let Some(labels) = policy
            .metadata
            .namespace
            .as_deref()
            .and_then(&namespace_labels)
        else {
            return Vec::new();
        };
        return baselines
            .iter()
            .filter(|baseline| {
                baseline
                    .spec
                    .validate()
                    .is_ok_and(|selector| selector.matches(&labels))
            })
            .map(|baseline| ObjectRef::from_obj(baseline.as_ref()))
            .collect();
    }
    let label = policy.labels().get(BASELINE_LABEL);
    let name = policy.name_any();
    baselines
        .iter()
        .filter(|baseline| {
            let baseline_name = baseline.name_any();
            label == Some(&baseline_label_value(&baseline_name))
                || name == deny_all_policy_name(&baseline_name)
                || name == dns_policy_name(&baseline_name)
        })
        .map(|baseline| ObjectRef::from_obj(baseline.as_ref()))
        .collect()
}

/// The baselines whose DNS door is checked against the DNS namespace's objects: those with
/// a door whose Service is in `namespace`.
pub fn baselines_for_dns(
    namespace: &str,
    baselines: &[Arc<NamespaceBaseline>],
) -> Vec<ObjectRef<NamespaceBaseline>> {
    baselines
        .iter()
        .filter(|baseline| {
            baseline.spec.allow_dns && baseline.spec.dns_target().service_ref().0 == namespace
        })
        .map(|baseline| ObjectRef::from_obj(baseline.as_ref()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{baseline, namespace, stored_wall};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;
    use namespace_baseline_core::NamespaceBaselineSpec;

    fn no_namespaces(_: &str) -> Option<BTreeMap<String, String>> {
        None
    }

    fn names(refs: Vec<ObjectRef<NamespaceBaseline>>) -> Vec<String> {
        let mut names: Vec<_> = refs.into_iter().map(|r| r.name).collect();
        names.sort();
        names
    }

    fn baselines() -> Vec<Arc<NamespaceBaseline>> {
        vec![
            Arc::new(baseline(
                "guarded",
                NamespaceBaselineSpec::new("baseline=guarded"),
            )),
            Arc::new(baseline("tiered", NamespaceBaselineSpec::new("tier"))),
            Arc::new(baseline("broken", NamespaceBaselineSpec::new("a!=b"))),
        ]
    }

    #[test]
    fn a_new_namespace_triggers_the_baselines_matching_it() {
        let triggers = NamespaceTriggers::default();
        let ns = namespace("team-a", &[("baseline", "guarded"), ("tier", "1")]);
        assert_eq!(
            names(triggers.baselines_for(&ns.metadata, &baselines())),
            ["guarded", "tiered"]
        );
        let other = namespace("other", &[("a", "c")]);
        assert!(
            triggers
                .baselines_for(&other.metadata, &baselines())
                .is_empty()
        );
    }

    #[test]
    fn a_namespace_leaving_a_baseline_triggers_it() {
        let triggers = NamespaceTriggers::default();
        triggers.baselines_for(
            &namespace("team-a", &[("baseline", "guarded")]).metadata,
            &baselines(),
        );
        let left = namespace("team-a", &[("baseline", "open")]);
        assert_eq!(
            names(triggers.baselines_for(&left.metadata, &baselines())),
            ["guarded"]
        );
        // ... and once it has left, it concerns that baseline no more.
        let moved = namespace("team-a", &[("tier", "2")]);
        assert_eq!(
            names(triggers.baselines_for(&moved.metadata, &baselines())),
            ["tiered"]
        );
    }

    #[test]
    fn events_that_change_no_label_trigger_nothing() {
        let triggers = NamespaceTriggers::default();
        let mut ns = namespace("team-a", &[("baseline", "guarded")]);
        triggers.baselines_for(&ns.metadata, &baselines());
        ns.metadata.annotations = Some(BTreeMap::from([("note".into(), "x".into())]));
        assert!(
            triggers
                .baselines_for(&ns.metadata, &baselines())
                .is_empty()
        );
    }

    #[test]
    fn a_namespace_going_away_triggers_its_baselines_and_is_forgotten() {
        let triggers = NamespaceTriggers::default();
        let mut ns = namespace("team-a", &[("baseline", "guarded")]);
        triggers.baselines_for(&ns.metadata, &baselines());
        ns.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
        assert_eq!(
            names(triggers.baselines_for(&ns.metadata, &baselines())),
            ["guarded"]
        );
        assert!(triggers.seen.lock().unwrap().is_empty());
    }

    #[test]
    fn a_policy_maps_to_its_baseline_by_label() {
        let policies = stored_wall(
            "guarded",
            "team-a",
            &NamespaceBaselineSpec::new("baseline=guarded"),
        );
        for policy in &policies {
            assert_eq!(
                names(baselines_for_policy(policy, &baselines(), no_namespaces)),
                ["guarded"]
            );
        }
    }

    #[test]
    fn a_policy_with_a_tampered_label_maps_by_name() {
        let mut policy = stored_wall(
            "guarded",
            "team-a",
            &NamespaceBaselineSpec::new("baseline=guarded"),
        )
        .remove(0);
        policy
            .labels_mut()
            .insert(BASELINE_LABEL.into(), "someone-else".into());
        assert_eq!(
            names(baselines_for_policy(&policy, &baselines(), no_namespaces)),
            ["guarded"]
        );
    }

    #[test]
    fn a_long_baseline_name_maps_through_its_hashed_label() {
        let long = format!("{}-x", "a".repeat(80));
        let spec = NamespaceBaselineSpec::new("baseline=guarded");
        let baselines = vec![
            Arc::new(baseline(&long, spec.clone())),
            Arc::new(baseline(&format!("{}-y", "a".repeat(80)), spec.clone())),
        ];
        let mut policy = stored_wall(&long, "team-a", &spec).remove(0);
        policy.metadata.name = Some("renamed".into());
        assert_eq!(
            names(baselines_for_policy(&policy, &baselines, no_namespaces)),
            [long]
        );
    }

    #[test]
    fn a_policy_of_a_deleted_baseline_maps_to_nothing() {
        let policy = stored_wall("gone", "team-a", &NamespaceBaselineSpec::new("x")).remove(0);
        assert!(baselines_for_policy(&policy, &baselines(), no_namespaces).is_empty());
    }

    #[test]
    fn another_policy_triggers_the_baselines_covering_its_namespace() {
        let policy: NetworkPolicy = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "team-open", "namespace": "team-a"},
            "spec": {"podSelector": {}, "ingress": [{}]},
        }))
        .unwrap();
        let labels = |name: &str| {
            (name == "team-a").then(|| {
                BTreeMap::from([
                    ("baseline".to_owned(), "guarded".to_owned()),
                    ("tier".to_owned(), "1".to_owned()),
                ])
            })
        };
        assert_eq!(
            names(baselines_for_policy(&policy, &baselines(), labels)),
            ["guarded", "tiered"]
        );
        let elsewhere = |_: &str| Some(BTreeMap::from([("x".to_owned(), "y".to_owned())]));
        assert!(baselines_for_policy(&policy, &baselines(), elsewhere).is_empty());
        // An unknown namespace (not cached yet) concerns nobody.
        assert!(baselines_for_policy(&policy, &baselines(), no_namespaces).is_empty());
    }

    #[test]
    fn dns_objects_trigger_the_baselines_whose_door_they_serve() {
        let mut openshift = NamespaceBaselineSpec::new("os");
        openshift.dns = Some(
            serde_json::from_value(serde_json::json!({"service": "openshift-dns/dns-default"}))
                .unwrap(),
        );
        let mut no_door = NamespaceBaselineSpec::new("closed");
        no_door.allow_dns = false;
        let all = vec![
            Arc::new(baseline(
                "guarded",
                NamespaceBaselineSpec::new("baseline=guarded"),
            )),
            Arc::new(baseline("openshift", openshift)),
            Arc::new(baseline("closed", no_door)),
        ];
        assert_eq!(names(baselines_for_dns("kube-system", &all)), ["guarded"]);
        assert_eq!(
            names(baselines_for_dns("openshift-dns", &all)),
            ["openshift"]
        );
        assert!(baselines_for_dns("default", &all).is_empty());
    }
}
