//! The reconciler's identity is written in four places: the core's default, the policy's
//! default `reconcilerUsername`, the ServiceAccount in deploy/rbac.yaml that the Deployment
//! runs as, and the ClusterAdmissionPolicy's settings. If they drift apart, the gate blocks
//! the installer; this test holds them together.

use namespace_baseline_core::identity::{
    RECONCILER_NAMESPACE, RECONCILER_SERVICE_ACCOUNT, reconciler_username,
};
use namespace_baseline_policy::Settings;
use std::path::Path;

use namespace_baseline_formats::yaml;
use serde_json::Value;

fn documents(path: &str) -> Vec<Value> {
    yaml::read_documents(&Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap_or_else(|e| panic!("{e}"))
}

fn of_kind<'a>(documents: &'a [Value], kind: &str) -> Vec<&'a Value> {
    documents
        .iter()
        .filter(|document| document["kind"].as_str() == Some(kind))
        .collect()
}

#[test]
fn the_policy_default_is_the_core_identity() {
    assert_eq!(
        Settings::default().reconciler_username,
        reconciler_username()
    );
}

#[test]
fn the_deployed_service_account_is_the_core_identity() {
    let rbac = documents("deploy/rbac.yaml");
    let accounts = of_kind(&rbac, "ServiceAccount");
    assert_eq!(accounts.len(), 1, "one ServiceAccount in deploy/rbac.yaml");
    assert_eq!(
        accounts[0]["metadata"]["name"].as_str(),
        Some(RECONCILER_SERVICE_ACCOUNT)
    );
    assert_eq!(
        accounts[0]["metadata"]["namespace"].as_str(),
        Some(RECONCILER_NAMESPACE)
    );
    for binding in of_kind(&rbac, "ClusterRoleBinding")
        .into_iter()
        .chain(of_kind(&rbac, "RoleBinding"))
    {
        let subject = &binding["subjects"][0];
        assert_eq!(subject["name"].as_str(), Some(RECONCILER_SERVICE_ACCOUNT));
        assert_eq!(subject["namespace"].as_str(), Some(RECONCILER_NAMESPACE));
    }

    let deployment = documents("deploy/reconciler.yaml");
    let deployment = of_kind(&deployment, "Deployment");
    assert_eq!(deployment.len(), 1);
    assert_eq!(
        deployment[0]["metadata"]["namespace"].as_str(),
        Some(RECONCILER_NAMESPACE)
    );
    assert_eq!(
        deployment[0]["spec"]["template"]["spec"]["serviceAccountName"].as_str(),
        Some(RECONCILER_SERVICE_ACCOUNT)
    );
}

#[test]
fn the_admission_policy_exempts_the_core_identity() {
    let policies = documents("deploy/admission-policy.yaml");
    assert_eq!(policies.len(), 2, "the rules' policy and the Pod rule's");
    for policy in &policies {
        let settings = &policy["spec"]["settings"];
        assert_eq!(
            settings["reconcilerUsername"].as_str(),
            Some(reconciler_username().as_str())
        );
        let settings: Settings = serde_json::from_value(settings.clone()).expect("valid settings");
        assert_eq!(settings.validate(), Ok(()));
    }
}
