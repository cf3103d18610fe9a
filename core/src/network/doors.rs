//! Whether a door opens onto what it is for: the DNS door onto the endpoints of the cluster's
//! DNS Service, the reconciler's API door onto the endpoints of the `kubernetes` Service.
//!
//! NetworkPolicy is enforced after kube-proxy has rewritten a Service address to an endpoint,
//! so a door must name the endpoints themselves (their pods or addresses, and the ports they
//! listen on), never the Service. Both checks read EndpointSlices: what the Service really
//! forwards to.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicyEgressRule, NetworkPolicyPeer, NetworkPolicyPort,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;

use crate::vocabulary::cidr::Cidr;
use crate::vocabulary::spec::DnsSpec;

/// The label an EndpointSlice carries with the name of its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// A port an endpoint listens on: `(protocol, port)`.
pub type ProtocolPort = (String, i32);

/// The outcome of checking a door, as a condition says it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reachability {
    pub reachable: bool,
    /// CamelCase, for the condition's `reason`.
    pub reason: &'static str,
    pub message: String,
}

impl Reachability {
    fn yes(reason: &'static str, message: String) -> Self {
        Self {
            reachable: true,
            reason,
            message,
        }
    }

    fn no(reason: &'static str, message: String) -> Self {
        Self {
            reachable: false,
            reason,
            message,
        }
    }
}

/// A ready endpoint is one the Service forwards to: `ready` unset counts as ready (the API's
/// own rule), `terminating` ones do not.
fn is_ready(endpoint: &Endpoint) -> bool {
    endpoint.conditions.as_ref().is_none_or(|conditions| {
        conditions.ready != Some(false) && conditions.terminating != Some(true)
    })
}

/// The ports the slices' endpoints listen on.
fn slice_ports(slices: &[&EndpointSlice]) -> Vec<ProtocolPort> {
    let mut ports: Vec<ProtocolPort> = slices
        .iter()
        .flat_map(|slice| slice.ports.iter().flatten())
        .filter_map(|port| {
            Some((
                port.protocol.clone().unwrap_or_else(|| "TCP".to_owned()),
                port.port?,
            ))
        })
        .collect();
    ports.sort();
    ports.dedup();
    ports
}

fn describe_ports(ports: &[ProtocolPort]) -> String {
    ports
        .iter()
        .map(|(protocol, port)| format!("{protocol} {port}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The DNS Service, as the reconciler's caches see it.
pub struct DnsService<'a> {
    /// Whether the Service object exists.
    pub exists: bool,
    /// Its EndpointSlices.
    pub slices: Vec<&'a EndpointSlice>,
    /// The labels of the pods in the door's namespace, by pod name.
    pub pod_labels: &'a dyn Fn(&str) -> Option<BTreeMap<String, String>>,
}

/// Whether every ready endpoint of the DNS Service is inside `door`: its pod carries the
/// door's labels in the door's namespace, or its address is in one of the door's ipBlocks;
/// and whether the door opens every port those endpoints listen on.
pub fn check_dns_door(door: &DnsSpec, service: &DnsService<'_>) -> Reachability {
    let (namespace, name) = door.service_ref();
    if !service.exists {
        return Reachability::no(
            "ServiceNotFound",
            format!(
                "the DNS Service {namespace}/{name} does not exist: set spec.dns.service to the Service the pods resolve through"
            ),
        );
    }
    let ready: Vec<&Endpoint> = service
        .slices
        .iter()
        .flat_map(|slice| slice.endpoints.iter().flatten())
        .filter(|endpoint| is_ready(endpoint))
        .collect();
    if ready.is_empty() {
        return Reachability::no(
            "NoReadyEndpoints",
            format!(
                "the DNS Service {namespace}/{name} has no ready endpoint to check the door against"
            ),
        );
    }
    let blocks: Vec<Cidr> = door
        .ip_blocks
        .iter()
        .filter_map(|cidr| Cidr::parse(cidr).ok())
        .collect();
    for endpoint in &ready {
        if let Some(why) = outside(door, &blocks, endpoint, service) {
            return Reachability::no("EndpointOutsideDoor", why);
        }
    }
    let listening = slice_ports(&service.slices);
    let open: Vec<ProtocolPort> = door
        .ports
        .iter()
        .map(|port| (port.protocol.as_str().to_owned(), i32::from(port.port)))
        .collect();
    let closed: Vec<ProtocolPort> = listening
        .iter()
        .filter(|port| !open.contains(port))
        .cloned()
        .collect();
    if !closed.is_empty() {
        return Reachability::no(
            "PortMismatch",
            format!(
                "the endpoints of {namespace}/{name} listen on {} but the door opens {}: set spec.dns.ports to the endpoints' ports (NetworkPolicy sees them after the Service's mapping)",
                describe_ports(&listening),
                describe_ports(&open)
            ),
        );
    }
    Reachability::yes(
        "EndpointsInsideDoor",
        format!(
            "{} ready endpoint{} of {namespace}/{name} inside the door, on {}",
            ready.len(),
            if ready.len() == 1 { "" } else { "s" },
            describe_ports(&listening)
        ),
    )
}

/// The objects a caller read of the cluster's DNS (the reconciler's caches of the DNS
/// namespace, `plan`'s files, the playground's editor): Services and Pods by their metadata,
/// and EndpointSlices. Objects of other namespaces and Services may be among them.
pub struct DnsObjects<'a> {
    pub services: Vec<&'a ObjectMeta>,
    pub slices: Vec<&'a EndpointSlice>,
    pub pods: Vec<&'a ObjectMeta>,
}

/// [`check_dns_door`] against the objects read: the door's Service (`spec.dns.service`) exists
/// among them, its EndpointSlices are those in its namespace labelled with its name
/// ([`SERVICE_NAME_LABEL`]), and an endpoint's pod is looked up by its name in the door's
/// namespace (`spec.dns.namespace`). The one adapter of the reconciler, `plan` and the
/// playground.
pub fn check_dns_objects(door: &DnsSpec, objects: &DnsObjects<'_>) -> Reachability {
    let (namespace, name) = door.service_ref();
    let is = |meta: &ObjectMeta, in_namespace: &str, named: &str| {
        meta.namespace.as_deref() == Some(in_namespace) && meta.name.as_deref() == Some(named)
    };
    let pod_labels = |pod: &str| {
        (objects.pods.iter())
            .find(|meta| is(meta, &door.namespace, pod))
            .map(|meta| meta.labels.clone().unwrap_or_default())
    };
    let of_service = |slice: &&EndpointSlice| {
        slice.metadata.namespace.as_deref() == Some(namespace)
            && (slice.metadata.labels.as_ref())
                .and_then(|labels| labels.get(SERVICE_NAME_LABEL))
                .is_some_and(|service| service == name)
    };
    check_dns_door(
        door,
        &DnsService {
            exists: objects
                .services
                .iter()
                .any(|meta| is(meta, namespace, name)),
            slices: objects.slices.iter().copied().filter(of_service).collect(),
            pod_labels: &pod_labels,
        },
    )
}

/// Why a ready endpoint is outside the door, if it is.
fn outside(
    door: &DnsSpec,
    blocks: &[Cidr],
    endpoint: &Endpoint,
    service: &DnsService<'_>,
) -> Option<String> {
    let addresses: Vec<IpAddr> = endpoint
        .addresses
        .iter()
        .filter_map(|address| address.parse().ok())
        .collect();
    if addresses
        .iter()
        .any(|address| blocks.iter().any(|block| block.contains(*address)))
    {
        return None;
    }
    let shown = endpoint.addresses.join(", ");
    let pod = endpoint
        .target_ref
        .as_ref()
        .filter(|target| target.kind.as_deref() == Some("Pod"));
    let Some(pod) = pod else {
        return Some(format!(
            "endpoint {shown} is no pod and is in none of spec.dns.ipBlocks"
        ));
    };
    let pod_namespace = pod.namespace.as_deref().unwrap_or_default();
    let pod_name = pod.name.as_deref().unwrap_or_default();
    if !door.pods {
        return Some(format!(
            "endpoint {shown} (pod {pod_namespace}/{pod_name}) is in none of spec.dns.ipBlocks, and the door does not open to pods (spec.dns.pods: false)"
        ));
    }
    if pod_namespace != door.namespace {
        return Some(format!(
            "endpoint {shown} is pod {pod_namespace}/{pod_name}, but the door opens to pods in namespace {:?} (spec.dns.namespace)",
            door.namespace
        ));
    }
    let Some(labels) = (service.pod_labels)(pod_name) else {
        return Some(format!(
            "endpoint {shown} is pod {pod_namespace}/{pod_name}, which the reconciler cannot see (not found)"
        ));
    };
    let missing: Vec<String> = door
        .pod_labels
        .iter()
        .filter(|(key, value)| labels.get(*key) != Some(*value))
        .map(|(key, value)| format!("{key}={value}"))
        .collect();
    (!missing.is_empty()).then(|| {
        format!(
            "endpoint {shown} is pod {pod_namespace}/{pod_name}, which lacks the door's label{} {} (spec.dns.podLabels)",
            if missing.len() == 1 { "" } else { "s" },
            missing.join(", ")
        )
    })
}

/// The API server's endpoints: every address of the `default/kubernetes` EndpointSlices and
/// the ports they listen on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApiEndpoints {
    pub addresses: Vec<IpAddr>,
    pub ports: Vec<ProtocolPort>,
}

impl ApiEndpoints {
    pub fn of(slices: &[&EndpointSlice]) -> Self {
        let mut addresses: Vec<IpAddr> = slices
            .iter()
            .flat_map(|slice| slice.endpoints.iter().flatten())
            .filter(|endpoint| is_ready(endpoint))
            .flat_map(|endpoint| endpoint.addresses.iter())
            .filter_map(|address| address.parse().ok())
            .collect();
        addresses.sort();
        addresses.dedup();
        Self {
            addresses,
            ports: slice_ports(slices),
        }
    }

    /// The egress rule that opens exactly these endpoints: one `/32` (`/128`) ipBlock per
    /// address, their ports.
    pub fn door(&self) -> NetworkPolicyEgressRule {
        NetworkPolicyEgressRule {
            to: Some(
                self.addresses
                    .iter()
                    .map(|address| NetworkPolicyPeer {
                        ip_block: Some(IPBlock {
                            cidr: Cidr::host(*address).to_string(),
                            except: None,
                        }),
                        ..NetworkPolicyPeer::default()
                    })
                    .collect(),
            ),
            ports: Some(
                self.ports
                    .iter()
                    .map(|(protocol, port)| NetworkPolicyPort {
                        protocol: Some(protocol.clone()),
                        port: Some(IntOrString::Int(*port)),
                        end_port: None,
                    })
                    .collect(),
            ),
        }
    }
}

impl fmt::Display for ApiEndpoints {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let addresses: Vec<String> = self.addresses.iter().map(ToString::to_string).collect();
        write!(
            f,
            "{} on {}",
            addresses.join(", "),
            describe_ports(&self.ports)
        )
    }
}

/// Whether the egress rules of the reconciler's own NetworkPolicy open every API endpoint on
/// every port it listens on. The rules are read as NetworkPolicy reads them: a rule opens a
/// destination when one of its peers is an ipBlock containing it (pod and namespace peers
/// never match an API server outside the pod network), or it has no peers; and a port when
/// the rule names it or names no port.
pub fn check_api_door(rules: &[NetworkPolicyEgressRule], api: &ApiEndpoints) -> Reachability {
    if api.addresses.is_empty() {
        return Reachability::no(
            "NoEndpoints",
            "the EndpointSlices of default/kubernetes list no ready endpoint".to_owned(),
        );
    }
    for address in &api.addresses {
        for (protocol, port) in &api.ports {
            let open = rules
                .iter()
                .any(|rule| rule_opens(rule, *address, protocol, *port));
            if !open {
                return Reachability::no(
                    "ApiServerOutsideDoor",
                    format!(
                        "the API server listens on {address} {protocol} {port} (EndpointSlice default/kubernetes), which the reconciler's egress door does not open: render the door with `namespace-baseline-reconciler api-door` and update the chart's reconciler.networkPolicy.apiServer values"
                    ),
                );
            }
        }
    }
    Reachability::yes(
        "ApiServerInsideDoor",
        format!("the door opens the API server's endpoints: {api}"),
    )
}

fn rule_opens(rule: &NetworkPolicyEgressRule, address: IpAddr, protocol: &str, port: i32) -> bool {
    let to =
        match rule.to.as_deref() {
            None | Some([]) => true,
            Some(peers) => peers.iter().any(|peer| {
                peer.ip_block.as_ref().is_some_and(|block| {
                    Cidr::parse(&block.cidr).is_ok_and(|cidr| cidr.contains(address))
                        && !block.except.iter().flatten().any(|except| {
                            Cidr::parse(except).is_ok_and(|cidr| cidr.contains(address))
                        })
                })
            }),
        };
    let ports = match rule.ports.as_deref() {
        None | Some([]) => true,
        Some(ports) => ports.iter().any(|open| {
            open.protocol.as_deref().unwrap_or("TCP") == protocol
                && match &open.port {
                    None => true,
                    Some(IntOrString::Int(first)) => {
                        let last = open.end_port.unwrap_or(*first);
                        (*first..=last).contains(&port)
                    }
                    // A named port is the pod's, never the API server's.
                    Some(IntOrString::String(_)) => false,
                }
        }),
    };
    to && ports
}

#[cfg(test)]
#[path = "doors_tests.rs"]
mod tests;
