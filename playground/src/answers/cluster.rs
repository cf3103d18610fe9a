//! The cluster objects pasted into the playground (Namespaces, NetworkPolicies, the DNS
//! Service with its EndpointSlices and Pods), seen as the reconciler sees them: the holes other
//! policies open in the namespaces a baseline walls (the core's [`holes`]), and whether each
//! baseline's DNS door reaches the DNS Service's endpoints (the core's [`check_dns_objects`]).
//! The same Namespaces answer the policy's namespace reads in [`crate::answers::evaluate::evaluate()`].

use std::collections::BTreeMap;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use namespace_baseline_core::LabelSelector;
use namespace_baseline_core::doors::{DnsObjects, check_dns_objects};
use namespace_baseline_core::holes::holes;
use namespace_baseline_core::spec::NamespaceBaselineSpec;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::editors::field::{Field, FieldError};
use crate::editors::objects::{KINDS, baseline_objects, cluster_objects, of_kind};

/// An object's metadata only (what is read of Namespaces, Services and Pods).
#[derive(Deserialize, Default)]
#[serde(default)]
struct Metadata {
    metadata: ObjectMeta,
}

fn read<T: serde::de::DeserializeOwned>(
    (index, object): (usize, &Value),
    errors: &mut Vec<FieldError>,
) -> Option<T> {
    serde_json::from_value(object.clone())
        .map_err(|error| {
            errors.push(FieldError {
                field: Field::Objects,
                message: format!(
                    "item {index} ({}) cannot be read: {error}",
                    object["kind"].as_str().unwrap_or_default()
                ),
            })
        })
        .ok()
}

/// One hole, for the page.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HoleView {
    pub namespace: String,
    /// The NamespaceBaseline that walls the namespace.
    pub baseline: String,
    pub policy: String,
    pub direction: String,
    pub rule: usize,
    pub width: String,
    pub all_ports: bool,
    /// `World` or `Cluster`: the wall is undone (the reconciler's `Sealed=False`).
    pub breach: bool,
    /// The hole in a sentence.
    pub text: String,
}

/// One baseline's DNS door against the pasted DNS Service.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DnsView {
    pub baseline: String,
    /// `namespace/name` of the DNS Service the door is checked against.
    pub service: String,
    pub reachable: bool,
    /// The `DNSReachable` condition's reason.
    pub reason: String,
    pub message: String,
}

#[derive(Serialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterView {
    /// Every hole in a walled namespace, by namespace, policy, direction and rule.
    pub holes: Vec<HoleView>,
    pub dns: Vec<DnsView>,
    pub notes: Vec<String>,
    pub errors: Vec<FieldError>,
}

/// A baseline of the baselines editor the reconciler can act on.
struct Walling {
    name: String,
    selector: LabelSelector,
    spec: NamespaceBaselineSpec,
}

/// The holes and the DNS check for the baselines editor's baselines and the objects editor's
/// objects.
pub fn inspect_cluster(baselines: &str, objects: &str) -> ClusterView {
    let mut view = ClusterView::default();
    let objects = match cluster_objects(objects) {
        Ok(objects) => objects,
        Err(message) => {
            view.errors.push(FieldError {
                field: Field::Objects,
                message,
            });
            return view;
        }
    };
    // Unreadable baselines are reported next to their editor by the evaluation.
    let walls: Vec<Walling> = baseline_objects(baselines)
        .unwrap_or_default()
        .iter()
        .filter_map(|object| {
            let name = object["metadata"]["name"].as_str()?.to_owned();
            let spec: NamespaceBaselineSpec =
                serde_json::from_value(object.get("spec")?.clone()).ok()?;
            let selector = spec.validate().ok()?;
            Some(Walling {
                name,
                selector,
                spec,
            })
        })
        .collect();
    let ignored: Vec<String> = objects
        .iter()
        .filter_map(|object| object["kind"].as_str())
        .filter(|kind| !KINDS.contains(kind))
        .map(str::to_owned)
        .collect();
    if !ignored.is_empty() {
        view.notes.push(format!(
            "ignored: {} (only {} are read here)",
            ignored.join(", "),
            KINDS.join(", ")
        ));
    }
    if walls.is_empty() {
        view.notes.push(
            "No NamespaceBaseline the reconciler can act on in the NamespaceBaselines editor: nothing is walled and there is no DNS door to check."
                .to_owned(),
        );
        return view;
    }
    view.holes = walled_holes(&walls, &objects, &mut view.errors, &mut view.notes);
    view.dns = dns_checks(&walls, &objects, &mut view.errors, &mut view.notes);
    view
}

fn walled_holes(
    walls: &[Walling],
    objects: &[Value],
    errors: &mut Vec<FieldError>,
    notes: &mut Vec<String>,
) -> Vec<HoleView> {
    // The namespace, and the first baseline that walls it (not while it is terminating, as
    // the reconciler counts them).
    let walled: BTreeMap<String, &str> = of_kind(objects, "Namespace")
        .filter_map(|item| read::<Metadata>(item, errors))
        .filter(|namespace| namespace.metadata.deletion_timestamp.is_none())
        .filter_map(|namespace| {
            let labels = namespace.metadata.labels.unwrap_or_default();
            let wall = walls.iter().find(|wall| wall.selector.matches(&labels))?;
            Some((namespace.metadata.name?, wall.name.as_str()))
        })
        .collect();
    let mut found = Vec::new();
    for policy in
        of_kind(objects, "NetworkPolicy").filter_map(|item| read::<NetworkPolicy>(item, errors))
    {
        let namespace = policy.metadata.namespace.clone().unwrap_or_default();
        let name = policy.metadata.name.clone().unwrap_or_default();
        let Some(baseline) = walled.get(&namespace) else {
            notes.push(format!(
                "NetworkPolicy {name:?} is in namespace {namespace:?}, which no pasted Namespace walled by a baseline is: its rules are no holes in a wall"
            ));
            continue;
        };
        found.extend(holes(&policy).into_iter().map(|hole| HoleView {
            namespace: namespace.clone(),
            baseline: (*baseline).to_owned(),
            policy: hole.policy.clone(),
            direction: hole.direction.as_str().to_owned(),
            rule: hole.rule,
            width: hole.width.as_str().to_owned(),
            all_ports: hole.all_ports,
            breach: hole.width.is_breach(),
            text: hole.to_string(),
        }));
    }
    found.sort_by(|a, b| {
        (&a.namespace, &a.policy, &a.direction, a.rule).cmp(&(
            &b.namespace,
            &b.policy,
            &b.direction,
            b.rule,
        ))
    });
    found
}

fn dns_checks(
    walls: &[Walling],
    objects: &[Value],
    errors: &mut Vec<FieldError>,
    notes: &mut Vec<String>,
) -> Vec<DnsView> {
    let pasted = |kind| of_kind(objects, kind).next().is_some();
    if !(pasted("Service") || pasted("EndpointSlice") || pasted("Pod")) {
        notes.push(
            "Paste the DNS Service, its EndpointSlices and Pods to check each baseline's DNS door against them."
                .to_owned(),
        );
        return Vec::new();
    }
    let services: Vec<ObjectMeta> = of_kind(objects, "Service")
        .filter_map(|item| read::<Metadata>(item, errors))
        .map(|service| service.metadata)
        .collect();
    let slices: Vec<EndpointSlice> = of_kind(objects, "EndpointSlice")
        .filter_map(|item| read::<EndpointSlice>(item, errors))
        .collect();
    let pods: Vec<ObjectMeta> = of_kind(objects, "Pod")
        .filter_map(|item| read::<Metadata>(item, errors))
        .map(|pod| pod.metadata)
        .collect();
    let dns = DnsObjects {
        services: services.iter().collect(),
        slices: slices.iter().collect(),
        pods: pods.iter().collect(),
    };
    let mut checks = Vec::new();
    for wall in walls {
        if !wall.spec.allow_dns {
            notes.push(format!(
                "NamespaceBaseline {:?} has allowDNS: false: no DNS door to check",
                wall.name
            ));
            continue;
        }
        let door = wall.spec.dns.clone().unwrap_or_default();
        let (namespace, name) = door.service_ref();
        let outcome = check_dns_objects(&door, &dns);
        checks.push(DnsView {
            baseline: wall.name.clone(),
            service: format!("{namespace}/{name}"),
            reachable: outcome.reachable,
            reason: outcome.reason.to_owned(),
            message: outcome.message,
        });
    }
    checks
}

#[cfg(test)]
mod tests {
    use super::*;

    const GUARDED: &str = "metadata: {name: guarded}\nspec: {namespaceLabel: baseline=guarded}";

    const OBJECTS: &str = "\
kind: Namespace
apiVersion: v1
metadata: {name: team-a, labels: {baseline: guarded}}
---
kind: Namespace
apiVersion: v1
metadata: {name: team-b, labels: {team: b}}
---
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: open, namespace: team-a}
spec:
  podSelector: {}
  ingress: [{}, {from: [{namespaceSelector: {}}]}, {from: [{podSelector: {matchLabels: {app: lb}}}], ports: [{port: 80}]}]
---
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata: {name: open, namespace: team-b}
spec: {podSelector: {}, ingress: [{}]}
---
kind: NetworkPolicy
apiVersion: networking.k8s.io/v1
metadata:
  name: nsb-guarded-default-deny
  namespace: team-a
  labels: {app.kubernetes.io/managed-by: namespace-baseline, hedronite.io/baseline: guarded}
spec: {podSelector: {}, policyTypes: [Ingress, Egress], egress: [{}]}
";

    #[test]
    fn holes_in_walled_namespaces_only() {
        let view = inspect_cluster(GUARDED, OBJECTS);
        assert!(view.errors.is_empty(), "{:?}", view.errors);
        let shown: Vec<(&str, &str, bool)> = view
            .holes
            .iter()
            .map(|hole| (hole.text.as_str(), hole.width.as_str(), hole.breach))
            .collect();
        assert_eq!(
            shown,
            [
                (
                    "NetworkPolicy open ingress rule 0 opens every port to the whole internet",
                    "World",
                    true
                ),
                (
                    "NetworkPolicy open ingress rule 1 opens every port to every pod of the cluster",
                    "Cluster",
                    true
                ),
                (
                    "NetworkPolicy open ingress rule 2 opens some ports to some pods",
                    "Pods",
                    false
                ),
            ]
        );
        assert!(
            view.holes
                .iter()
                .all(|hole| hole.namespace == "team-a" && hole.baseline == "guarded")
        );
        assert!(
            view.notes
                .iter()
                .any(|note| note.contains("\"team-b\", which no pasted Namespace walled")),
            "{:?}",
            view.notes
        );
        assert!(view.dns.is_empty());
    }

    const OPENSHIFT: &str = "\
kind: Service
apiVersion: v1
metadata: {name: dns-default, namespace: openshift-dns}
---
kind: EndpointSlice
apiVersion: discovery.k8s.io/v1
metadata: {name: dns-default-x1, namespace: openshift-dns, labels: {kubernetes.io/service-name: dns-default}}
addressType: IPv4
endpoints:
- addresses: [10.128.0.10]
  conditions: {ready: true}
  targetRef: {kind: Pod, namespace: openshift-dns, name: dns-default-abcde}
ports:
- {name: dns, protocol: UDP, port: 5353}
- {name: dns-tcp, protocol: TCP, port: 5353}
---
kind: Pod
apiVersion: v1
metadata: {name: dns-default-abcde, namespace: openshift-dns, labels: {dns.operator.openshift.io/daemonset-dns: default}}
";

    fn openshift_baseline(ports: &str) -> String {
        format!(
            "metadata: {{name: openshift}}\nspec:\n  namespaceLabel: baseline=guarded\n  dns:\n    service: openshift-dns/dns-default\n    namespace: openshift-dns\n    podLabels: {{dns.operator.openshift.io/daemonset-dns: default}}\n{ports}"
        )
    }

    #[test]
    fn the_dns_door_against_the_pasted_service() {
        let wrong = inspect_cluster(&openshift_baseline(""), OPENSHIFT);
        assert!(wrong.errors.is_empty(), "{:?}", wrong.errors);
        assert_eq!(wrong.dns.len(), 1);
        assert_eq!(wrong.dns[0].service, "openshift-dns/dns-default");
        assert!(!wrong.dns[0].reachable);
        assert_eq!(wrong.dns[0].reason, "PortMismatch");
        assert!(
            wrong.dns[0]
                .message
                .contains("listen on TCP 5353, UDP 5353"),
            "{:?}",
            wrong.dns
        );
        let fixed = inspect_cluster(
            &openshift_baseline(
                "    ports: [{protocol: UDP, port: 5353}, {protocol: TCP, port: 5353}]\n",
            ),
            OPENSHIFT,
        );
        assert!(fixed.dns[0].reachable, "{:?}", fixed.dns);
        assert_eq!(fixed.dns[0].reason, "EndpointsInsideDoor");
        // The default door looks for kube-system/kube-dns, which was not pasted.
        let default = inspect_cluster(GUARDED, OPENSHIFT);
        assert_eq!(default.dns[0].reason, "ServiceNotFound");
    }

    #[test]
    fn problems_are_the_objects_editors() {
        let field = |view: ClusterView| {
            view.errors
                .into_iter()
                .next()
                .map(|error| (error.field, error.message))
        };
        assert_eq!(
            field(inspect_cluster(GUARDED, "kind: [")).map(|(field, _)| field),
            Some(Field::Objects)
        );
        let (_, message) = field(inspect_cluster(GUARDED, "metadata: {name: a}")).unwrap();
        assert!(message.contains("item 1 has no kind"), "{message}");
        let (_, message) = field(inspect_cluster(
            GUARDED,
            "kind: Namespace\nmetadata: {name: a}\n---\nkind: NetworkPolicy\nmetadata: {name: p, namespace: a}\nspec: {ingress: 5}",
        ))
        .unwrap();
        assert!(
            message.starts_with("item 2 (NetworkPolicy) cannot be read"),
            "{message}"
        );
        let other = inspect_cluster(GUARDED, "kind: ConfigMap\nmetadata: {name: a}");
        assert!(other.errors.is_empty());
        assert!(
            other.notes[0].starts_with("ignored: ConfigMap"),
            "{:?}",
            other.notes
        );
        let nothing = inspect_cluster("", OBJECTS);
        assert!(nothing.holes.is_empty());
        assert!(
            nothing.notes[0].starts_with("No NamespaceBaseline"),
            "{:?}",
            nothing.notes
        );
    }
}
