//! n10: our ClusterAdmissionPolicies through Kubewarden's own controller, as users run them
//! (issue 51). Why: every other chain in the tests is rendered by `testkit` "as the controller
//! would"; only the real controller shows that the CRD takes our policies as written, that the
//! policy-server pulls the module from a registry, and that the renderer has not drifted.
//!
//! With Kubewarden installed on the node from its charts (`e2e-tests/node/kubewarden.sh`) and the
//! module pushed to the node's registry by `make push-policy`:
//! 1. the ClusterAdmissionPolicies of deploy/admission-policy.yaml, only their module changed to
//!    the pushed reference, reach `policyStatus: active`; the policy-server's log shows the pull
//!    from the registry;
//! 2. the webhook configurations and the policies ConfigMap the controller made are compared,
//!    field by field, with what `testkit::kubewarden` renders for the same policies (the
//!    renderer the cluster tests use where there is no kubelet): the same, but for where the
//!    webhook calls (the controller's Service, the tests' URL);
//! 3. the same for the chart's ClusterAdmissionPolicies (`helm template` of
//!    templates/admission-policy.yaml, only `admissionPolicy.module` set).

use anyhow::Context as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DynamicObject, PostParams};
use namespace_baseline_cluster_tests::Cluster;
use namespace_baseline_cluster_tests::admission::ChainOptions;
use namespace_baseline_cluster_tests::kubewarden_stack::{
    ControllerChain, ENV_REGISTRY, as_applied, deployment_name, pushed_module,
};
use namespace_baseline_testkit::kubewarden::{
    self, CONTROLLER_NAMESPACE, ClusterAdmissionPolicy, DEFAULT_POLICY_SERVER,
};
use namespace_baseline_testkit::manifests::differences;
use serde_json::{Value, json};

use crate::chart;
use crate::common::{self, figure};

#[tokio::test]
async fn n10_the_controller_runs_our_policies_pulled_from_the_registry_as_testkit_renders_them() {
    let (cluster, _names, _) = common::start("n10").await;
    let module = pushed_module().unwrap_or_else(|error| panic!("{error:#}"));
    let shipped = Cluster::shipped_as_applied(&ChainOptions::default())
        .unwrap_or_else(|error| panic!("{error:#}"));
    cluster
        .with_policies(shipped, async |chain| {
            report_status("deploy/admission-policy.yaml", chain).await;
            report_pull(chain, &module).await;
            compare_with_testkit(&cluster, "deploy/admission-policy.yaml", chain, &module).await;
        })
        .await
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic));

    let from_chart = chart_policies(&module);
    cluster
        .with_policies(from_chart, async |chain| {
            report_status("the chart", chain).await;
            compare_with_testkit(&cluster, "the chart", chain, &module).await;
        })
        .await
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
}

/// The chart's ClusterAdmissionPolicies, rendered with only the module set (and the policy
/// enabled, which the node's chart installs leave out).
fn chart_policies(module: &str) -> Vec<ClusterAdmissionPolicy> {
    let rendered = chart::template(
        &[
            chart::set("admissionPolicy.enabled", "true"),
            chart::set("admissionPolicy.module", module),
        ]
        .concat(),
        "templates/admission-policy.yaml",
    );
    let documents = namespace_baseline_formats::yaml::documents(&rendered)
        .expect("the chart's admission-policy.yaml renders YAML");
    let policies: Vec<ClusterAdmissionPolicy> = documents
        .iter()
        .filter(|document| document["kind"] == "ClusterAdmissionPolicy")
        .map(|document| {
            ClusterAdmissionPolicy::from_document(document)
                .and_then(|policy| as_applied(policy, module, &ChainOptions::default()))
        })
        .collect::<anyhow::Result<_>>()
        .unwrap_or_else(|error| panic!("the chart's ClusterAdmissionPolicies: {error:#}"));
    assert_eq!(
        policies.len(),
        2,
        "the chart renders two ClusterAdmissionPolicies"
    );
    policies
}

/// What `kubectl get clusteradmissionpolicies` shows a user.
async fn report_status(source: &str, chain: &ControllerChain) {
    for policy in &chain.policies {
        let status = chain
            .status_of(&policy.name)
            .await
            .unwrap_or_else(|error| panic!("{error:#}"));
        assert_eq!(
            status["policyStatus"], "active",
            "{}: {status}",
            policy.name
        );
        let conditions: Vec<String> = status["conditions"]
            .as_array()
            .map(|conditions| {
                conditions
                    .iter()
                    .map(|c| format!("{}={} {}", c["type"], c["status"], c["reason"]))
                    .collect()
            })
            .unwrap_or_default();
        figure(
            "n10",
            format!(
                "{source}: ClusterAdmissionPolicy {} policyStatus {} mode {}; conditions {}",
                policy.name,
                status["policyStatus"],
                status["mode"],
                conditions.join(", ").replace('"', "")
            ),
        );
    }
}

/// The policy-server's log lines about fetching the module: it pulled it from the registry.
async fn report_pull(chain: &ControllerChain, module: &str) {
    let registry = std::env::var(ENV_REGISTRY).expect("NSB_NODE_REGISTRY");
    let text = chain
        .policy_server_log_text()
        .await
        .unwrap_or_else(|error| panic!("{error:#}"));
    let digest = module.rsplit_once('@').map_or(module, |(_, digest)| digest);
    // policy-server's own account of the pull (info level): the policy, where it stored the
    // module fetched from the registry, and its digest.
    let pulled: Vec<&str> = text
        .lines()
        .filter(|line| {
            line.contains("\"message\":\"policy download\"")
                && line.contains(&registry)
                && line.contains(digest)
        })
        .collect();
    assert!(
        !pulled.is_empty(),
        "the policy-server's log has no \"policy download\" from {registry} of {digest}:\n{}",
        text.lines().take(40).collect::<Vec<_>>().join("\n")
    );
    for line in pulled.iter().take(4) {
        figure("n10", format!("policy-server log: {line}"));
    }
}

/// Field by field, the controller's objects against testkit's rendering of the same policies.
async fn compare_with_testkit(
    cluster: &Cluster,
    source: &str,
    chain: &ControllerChain,
    module: &str,
) {
    // The policies file: the PolicyServer's ConfigMap, `policies.yml` (JSON).
    let config_maps: Api<ConfigMap> = Api::namespaced(cluster.admin.clone(), CONTROLLER_NAMESPACE);
    let name = deployment_name(DEFAULT_POLICY_SERVER);
    let config_map = config_maps
        .get(&name)
        .await
        .unwrap_or_else(|error| panic!("reading ConfigMap {name}: {error}"));
    let text = config_map
        .data
        .as_ref()
        .and_then(|data| data.get("policies.yml"))
        .unwrap_or_else(|| {
            panic!(
                "ConfigMap {name} has no policies.yml: {:?}",
                config_map.data
            )
        });
    let controller_file: Value =
        serde_json::from_str(text).unwrap_or_else(|error| panic!("policies.yml: {error}: {text}"));
    let testkit_file = kubewarden::policies_file(&chain.policies, module)
        .unwrap_or_else(|error| panic!("{error:#}"));
    let differ = differences(&controller_file, &testkit_file, 20);
    assert!(
        differ.is_empty(),
        "{source}: the controller's policies.yml (left) and testkit's (right) differ:\n{}",
        differ.join("\n")
    );
    figure(
        "n10",
        format!(
            "{source}: ConfigMap {CONTROLLER_NAMESPACE}/{name} policies.yml equals testkit's policies_file ({} policies)",
            chain.policies.len()
        ),
    );

    // The webhook configurations: testkit's, defaulted by the API server (a dry-run create under
    // another name), against the controller's, but for where each calls.
    let api = kubewarden::webhook_configurations(&cluster.admin);
    for policy in &chain.policies {
        let controller = chain
            .webhook_configuration(policy)
            .await
            .unwrap_or_else(|error| panic!("{error:#}"))
            .unwrap_or_else(|| panic!("no webhook configuration for {}", policy.name));
        let mut rendered = kubewarden::webhook_configuration(policy, "https://127.0.0.1:1", "");
        rendered["metadata"]["name"] = json!(format!("{}-testkit", policy.unique_name()));
        let rendered: DynamicObject = serde_json::from_value(rendered).expect("an object");
        let defaulted = api
            .create(
                &PostParams {
                    dry_run: true,
                    ..PostParams::default()
                },
                &rendered,
            )
            .await
            .context("a dry-run create of testkit's webhook configuration")
            .unwrap_or_else(|error| panic!("{error:#}"));
        let defaulted = serde_json::to_value(defaulted).expect("an object");
        let (controller_call, controller) = comparable(&controller);
        let (_, testkit) = comparable(&defaulted);
        let differ = differences(&controller, &testkit, 20);
        assert!(
            differ.is_empty(),
            "{source}: {}: the controller's webhook configuration (left) and testkit's (right) differ:\n{}",
            policy.unique_name(),
            differ.join("\n")
        );
        assert_eq!(
            controller_call["service"]["path"],
            json!(policy.validate_path()),
            "{}: {controller_call}",
            policy.name
        );
        figure(
            "n10",
            format!(
                "{source}: ValidatingWebhookConfiguration {} equals testkit's rendering but for where it calls: the controller's {}",
                policy.unique_name(),
                controller_call
            ),
        );
    }
}

/// A webhook configuration without what only says where and when it was stored (name,
/// uid, resourceVersion, ...) and without where its webhook calls: that call (clientConfig,
/// its caBundle left out), and the rest.
fn comparable(configuration: &Value) -> (Value, Value) {
    let mut configuration = configuration.clone();
    let metadata = configuration["metadata"].as_object_mut().expect("metadata");
    for field in [
        "name",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "managedFields",
        "ownerReferences",
    ] {
        metadata.remove(field);
    }
    let mut call = Value::Null;
    if let Some(webhooks) = configuration["webhooks"].as_array_mut() {
        for webhook in webhooks {
            if let Some(mut client_config) = webhook
                .as_object_mut()
                .and_then(|w| w.remove("clientConfig"))
            {
                client_config.as_object_mut().map(|c| c.remove("caBundle"));
                call = client_config;
            }
        }
    }
    (call, configuration)
}
