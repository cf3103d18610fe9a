//! The committed manifests in `deploy/` keep the blast radius and hardening the design asks
//! for.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use yaml_serde::Value;

const RBAC: &str = include_str!("../../deploy/rbac.yaml");
const RECONCILER: &str = include_str!("../../deploy/reconciler.yaml");

fn documents(text: &str) -> Vec<Value> {
    yaml_serde::Deserializer::from_str(text)
        .map(|document| Value::deserialize(document).unwrap())
        .filter(|document| !document.is_null())
        .collect()
}

fn of_kind<'a>(documents: &'a [Value], kind: &str) -> Vec<&'a Value> {
    documents.iter().filter(|d| d["kind"] == kind).collect()
}

/// (apiGroup, resource, verb) triples granted by a role.
fn grants(role: &Value) -> BTreeSet<(String, String, String)> {
    let strings = |value: &Value| -> Vec<String> {
        value
            .as_sequence()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect()
    };
    let mut grants = BTreeSet::new();
    for rule in role["rules"].as_sequence().unwrap() {
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                for verb in strings(&rule["verbs"]) {
                    grants.insert((group.clone(), resource.clone(), verb));
                }
            }
        }
    }
    grants
}

fn expected(rules: &[(&str, &str, &[&str])]) -> BTreeSet<(String, String, String)> {
    rules
        .iter()
        .flat_map(|(group, resource, verbs)| {
            verbs
                .iter()
                .map(move |verb| (group.to_string(), resource.to_string(), verb.to_string()))
        })
        .collect()
}

#[test]
fn the_cluster_role_grants_exactly_the_blast_radius() {
    let rbac = documents(RBAC);
    let roles = of_kind(&rbac, "ClusterRole");
    assert_eq!(roles.len(), 1);
    assert_eq!(
        grants(roles[0]),
        expected(&[
            ("", "namespaces", &["list", "watch"]),
            (
                "networking.k8s.io",
                "networkpolicies",
                &[
                    "get", "list", "watch", "create", "patch", "update", "delete"
                ],
            ),
            (
                "hedronite.io",
                "namespacebaselines",
                &["get", "list", "watch", "patch", "update"],
            ),
            (
                "hedronite.io",
                "namespacebaselines/status",
                &["get", "patch", "update"],
            ),
            (
                "hedronite.io",
                "namespacebaselines/finalizers",
                &["update", "patch"],
            ),
            ("events.k8s.io", "events", &["create", "patch"]),
            ("", "events", &["create", "patch"]),
            (
                "openreports.io",
                "reports",
                &["get", "list", "watch", "create", "patch", "delete"],
            ),
        ])
    );
}

/// The namespaced grants: the Lease in the reconciler's namespace; read-only access to the
/// DNS Service, its EndpointSlices and pods in the DNS namespace; to the API server's
/// EndpointSlices in `default`. Nothing else, nowhere else.
#[test]
fn namespaced_grants_are_the_lease_and_read_only_doors() {
    let rbac = documents(RBAC);
    let roles: BTreeMap<String, BTreeSet<(String, String, String)>> = of_kind(&rbac, "Role")
        .into_iter()
        .map(|role| {
            (
                role["metadata"]["namespace"].as_str().unwrap().to_owned(),
                grants(role),
            )
        })
        .collect();
    let read = &["get", "list", "watch"][..];
    assert_eq!(
        roles,
        BTreeMap::from([
            (
                "namespace-baseline".to_owned(),
                expected(&[(
                    "coordination.k8s.io",
                    "leases",
                    &["get", "create", "update"]
                )])
            ),
            (
                "kube-system".to_owned(),
                expected(&[
                    ("", "services", read),
                    ("", "pods", read),
                    ("discovery.k8s.io", "endpointslices", read)
                ])
            ),
            (
                "default".to_owned(),
                expected(&[("discovery.k8s.io", "endpointslices", read)])
            ),
        ])
    );
}

#[test]
fn the_deployment_is_hardened_and_leader_elected() {
    let manifests = documents(RECONCILER);
    let deployment = of_kind(&manifests, "Deployment")[0];
    assert_eq!(deployment["spec"]["replicas"], 2);
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "namespace-baseline-reconciler");
    let container = &pod["containers"][0];
    let security = &container["securityContext"];
    assert_eq!(security["runAsNonRoot"], true);
    assert_eq!(security["runAsUser"], 65532);
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["capabilities"]["drop"][0], "ALL");
    assert_eq!(security["seccompProfile"]["type"], "RuntimeDefault");
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    let env: Vec<_> = container["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert!(env.contains(&"POD_NAME") && env.contains(&"POD_NAMESPACE"));
    // The flags it is started with parse.
    let args: Vec<&str> = container["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let cli = <crate::runtime::cli::Cli as clap::Parser>::try_parse_from(
        std::iter::once("reconciler").chain(args.iter().copied()),
    )
    .unwrap();
    assert!(cli.run.leader_election);
}

#[test]
fn the_own_namespace_is_guarded_and_its_api_door_is_checked() {
    let manifests = documents(RECONCILER);
    let namespace = of_kind(&manifests, "Namespace")[0];
    let system: Value =
        yaml_serde::from_str(include_str!("../../deploy/system-baseline.yaml")).unwrap();
    let selector = namespace_baseline_core::LabelSelector::parse(
        system["spec"]["namespaceLabel"].as_str().unwrap(),
    )
    .unwrap();
    let labels = yaml_serde::from_value(namespace["metadata"]["labels"].clone()).unwrap();
    assert!(selector.matches(&labels));
    // deploy/ opens ingress for probes and scraping only; the API door is made per cluster
    // (`api-door -o manifest`), named by --api-door-policy.
    let policy = of_kind(&manifests, "NetworkPolicy")[0];
    assert_eq!(policy["spec"]["policyTypes"][0], "Ingress");
    assert!(
        policy["spec"].get("egress").is_none(),
        "no door to anywhere"
    );
    assert_eq!(policy["spec"]["ingress"][0]["ports"][0]["port"], 8080);
    let deployment = of_kind(&manifests, "Deployment")[0];
    let args: Vec<&str> = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|arg| arg.as_str().unwrap())
        .collect();
    assert!(
        args.contains(&"--api-door-policy=namespace-baseline-reconciler-api-door"),
        "{args:?}"
    );
}

/// Every example baseline is a valid spec, and the DNS examples open the doors their
/// comments describe.
#[test]
fn the_example_baselines_are_valid_and_their_doors_fit_their_clusters() {
    use namespace_baseline_core::NamespaceBaselineSpec;
    use namespace_baseline_core::wall::desired_wall;
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/examples");
    let mut doors = BTreeMap::new();
    for entry in std::fs::read_dir(&examples).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        for document in documents(&text) {
            let spec: NamespaceBaselineSpec =
                yaml_serde::from_value(document["spec"].clone()).unwrap();
            spec.validate()
                .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
            if spec.allow_dns {
                let wall = desired_wall("example", "team-a", &spec);
                let egress = serde_json::to_value(&wall[1]).unwrap()["spec"]["egress"][0].clone();
                doors.insert(
                    path.file_name().unwrap().to_string_lossy().into_owned(),
                    egress,
                );
            }
        }
    }
    let ports = |port: u16| serde_json::json!([{"protocol": "UDP", "port": port}, {"protocol": "TCP", "port": port}]);
    assert_eq!(
        doors["dns-kube-dns.yaml"], doors["seed.yaml"],
        "the kube-dns example spells out the defaults"
    );
    assert_eq!(doors["dns-openshift.yaml"]["ports"], ports(5353));
    assert_eq!(
        doors["dns-nodelocal.yaml"]["to"][1],
        serde_json::json!({"ipBlock": {"cidr": "169.254.20.10/32"}})
    );
    assert_eq!(doors["dns-nodelocal.yaml"]["ports"], ports(53));
}
