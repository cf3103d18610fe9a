use super::*;
use rstest::rstest;
use serde_json::{Value, json};

fn slice(value: Value) -> EndpointSlice {
    serde_json::from_value(value).unwrap()
}

/// A slice of `service` with pods `(name, address, ready)` listening on `ports`.
fn pod_slice(namespace: &str, pods: &[(&str, &str, bool)], ports: Value) -> EndpointSlice {
    slice(json!({
        "metadata": {"name": "dns-abc", "namespace": namespace, "labels": {SERVICE_NAME_LABEL: "dns"}},
        "addressType": "IPv4",
        "endpoints": pods.iter().map(|(name, address, ready)| json!({
            "addresses": [address],
            "conditions": {"ready": ready},
            "targetRef": {"kind": "Pod", "namespace": namespace, "name": name},
        })).collect::<Vec<_>>(),
        "ports": ports,
    }))
}

fn dns53() -> Value {
    json!([{"name": "dns", "protocol": "UDP", "port": 53}, {"name": "dns-tcp", "protocol": "TCP", "port": 53}])
}

fn door(value: Value) -> DnsSpec {
    serde_json::from_value(value).unwrap()
}

fn kube_dns_labels(_: &str) -> Option<BTreeMap<String, String>> {
    Some(BTreeMap::from([(
        "k8s-app".to_owned(),
        "kube-dns".to_owned(),
    )]))
}

fn openshift_labels(_: &str) -> Option<BTreeMap<String, String>> {
    Some(BTreeMap::from([(
        "dns.operator.openshift.io/daemonset-dns".to_owned(),
        "default".to_owned(),
    )]))
}

fn no_pod(_: &str) -> Option<BTreeMap<String, String>> {
    None
}

type Labels = fn(&str) -> Option<BTreeMap<String, String>>;

#[rstest]
#[case::kube_dns_as_default(json!({}), pod_slice("kube-system", &[("coredns-a", "10.244.0.5", true), ("coredns-b", "10.244.0.6", true)], dns53()), kube_dns_labels as Labels,
    true, "EndpointsInsideDoor", "2 ready endpoints of kube-system/kube-dns inside the door, on TCP 53, UDP 53")]
#[case::a_not_ready_endpoint_is_not_checked(json!({}), pod_slice("kube-system", &[("coredns-a", "10.244.0.5", true), ("other", "10.244.0.9", false)], dns53()), kube_dns_labels as Labels,
    true, "EndpointsInsideDoor", "1 ready endpoint")]
#[case::openshift_with_the_kube_dns_door(json!({"service": "openshift-dns/dns-default"}), pod_slice("openshift-dns", &[("dns-default-x", "10.128.0.10", true)], json!([{"protocol": "UDP", "port": 5353}, {"protocol": "TCP", "port": 5353}])), openshift_labels as Labels,
    false, "EndpointOutsideDoor", "endpoint 10.128.0.10 is pod openshift-dns/dns-default-x, but the door opens to pods in namespace \"kube-system\"")]
#[case::openshift_labels_fixed_port_not(json!({"service": "openshift-dns/dns-default", "namespace": "openshift-dns", "podLabels": {"dns.operator.openshift.io/daemonset-dns": "default"}}), pod_slice("openshift-dns", &[("dns-default-x", "10.128.0.10", true)], json!([{"protocol": "UDP", "port": 5353}, {"protocol": "TCP", "port": 5353}])), openshift_labels as Labels,
    false, "PortMismatch", "listen on TCP 5353, UDP 5353 but the door opens UDP 53, TCP 53")]
#[case::openshift_fixed(json!({"service": "openshift-dns/dns-default", "namespace": "openshift-dns", "podLabels": {"dns.operator.openshift.io/daemonset-dns": "default"}, "ports": [{"protocol": "UDP", "port": 5353}, {"protocol": "TCP", "port": 5353}]}), pod_slice("openshift-dns", &[("dns-default-x", "10.128.0.10", true)], json!([{"protocol": "UDP", "port": 5353}, {"protocol": "TCP", "port": 5353}])), openshift_labels as Labels,
    true, "EndpointsInsideDoor", "1 ready endpoint of openshift-dns/dns-default inside the door")]
#[case::pods_without_the_doors_labels(json!({}), pod_slice("kube-system", &[("coredns-a", "10.244.0.5", true)], dns53()), openshift_labels as Labels,
    false, "EndpointOutsideDoor", "lacks the door's label k8s-app=kube-dns")]
#[case::a_pod_the_reconciler_cannot_see(json!({}), pod_slice("kube-system", &[("coredns-a", "10.244.0.5", true)], dns53()), no_pod as Labels,
    false, "EndpointOutsideDoor", "which the reconciler cannot see")]
#[case::an_address_inside_an_ip_block(json!({"pods": false, "ipBlocks": ["10.244.0.0/24"]}), pod_slice("kube-system", &[("coredns-a", "10.244.0.5", true)], dns53()), no_pod as Labels,
    true, "EndpointsInsideDoor", "1 ready endpoint")]
#[case::ip_blocks_only_missing_the_endpoint(json!({"pods": false, "ipBlocks": ["169.254.20.10/32"]}), pod_slice("kube-system", &[("coredns-a", "10.244.0.5", true)], dns53()), kube_dns_labels as Labels,
    false, "EndpointOutsideDoor", "is in none of spec.dns.ipBlocks, and the door does not open to pods")]
#[case::no_ready_endpoint(json!({}), pod_slice("kube-system", &[("coredns-a", "10.244.0.5", false)], dns53()), kube_dns_labels as Labels,
    false, "NoReadyEndpoints", "no ready endpoint")]
fn the_dns_check_says_exactly_what_does_not_match(
    #[case] spec: Value,
    #[case] slice: EndpointSlice,
    #[case] labels: Labels,
    #[case] reachable: bool,
    #[case] reason: &str,
    #[case] message: &str,
) {
    let door = door(spec);
    let outcome = check_dns_door(
        &door,
        &DnsService {
            exists: true,
            slices: vec![&slice],
            pod_labels: &labels,
        },
    );
    assert_eq!(
        (outcome.reachable, outcome.reason),
        (reachable, reason),
        "{outcome:?}"
    );
    assert!(outcome.message.contains(message), "{}", outcome.message);
}

#[test]
fn a_missing_service_is_named() {
    let outcome = check_dns_door(
        &DnsSpec::default(),
        &DnsService {
            exists: false,
            slices: vec![],
            pod_labels: &kube_dns_labels,
        },
    );
    assert_eq!(outcome.reason, "ServiceNotFound");
    assert!(
        outcome
            .message
            .contains("kube-system/kube-dns does not exist")
    );
}

/// The adapter picks the door's objects out of whatever was read: the Service and its slices
/// in the Service's namespace, the endpoints' pods in the door's namespace.
#[test]
fn the_dns_objects_adapter_picks_the_doors_objects() {
    let meta = |namespace: &str, name: &str, labels: Value| -> ObjectMeta {
        serde_json::from_value(json!({"namespace": namespace, "name": name, "labels": labels}))
            .unwrap()
    };
    let of_service = |mut slice: EndpointSlice, service: &str| {
        slice.metadata.labels = Some(BTreeMap::from([(
            SERVICE_NAME_LABEL.to_owned(),
            service.to_owned(),
        )]));
        slice
    };
    let kube_dns = of_service(
        pod_slice("kube-system", &[("coredns-a", "10.244.0.5", true)], dns53()),
        "kube-dns",
    );
    let other_service = pod_slice("kube-system", &[("x", "10.0.0.1", true)], dns53());
    let elsewhere = of_service(
        pod_slice("default", &[("y", "10.0.0.2", true)], dns53()),
        "kube-dns",
    );
    let services = [
        meta("default", "kube-dns", json!({})),
        meta("kube-system", "kube-dns", json!({})),
    ];
    let pods = [
        meta("default", "coredns-a", json!({})),
        meta("kube-system", "coredns-a", json!({"k8s-app": "kube-dns"})),
    ];
    let mut objects = DnsObjects {
        services: services.iter().collect(),
        slices: vec![&other_service, &kube_dns, &elsewhere],
        pods: pods.iter().collect(),
    };
    let outcome = check_dns_objects(&DnsSpec::default(), &objects);
    assert_eq!(
        outcome.message,
        "1 ready endpoint of kube-system/kube-dns inside the door, on TCP 53, UDP 53"
    );
    objects.pods.pop();
    let outcome = check_dns_objects(&DnsSpec::default(), &objects);
    assert!(
        outcome.message.contains("cannot see"),
        "{}",
        outcome.message
    );
    objects.services.pop();
    let outcome = check_dns_objects(&DnsSpec::default(), &objects);
    assert_eq!(outcome.reason, "ServiceNotFound");
}

fn api_slice(address_type: &str, addresses: &[&str], port: i32) -> EndpointSlice {
    slice(json!({
        "metadata": {"name": "kubernetes", "namespace": "default", "labels": {SERVICE_NAME_LABEL: "kubernetes"}},
        "addressType": address_type,
        "endpoints": addresses.iter().map(|a| json!({"addresses": [a], "conditions": {"ready": true}})).collect::<Vec<_>>(),
        "ports": [{"name": "https", "protocol": "TCP", "port": port}],
    }))
}

#[rstest]
#[case::one_ipv4_endpoint(vec![api_slice("IPv4", &["192.168.49.2"], 8443)],
    json!({"to": [{"ipBlock": {"cidr": "192.168.49.2/32"}}], "ports": [{"protocol": "TCP", "port": 8443}]}))]
#[case::ipv6(vec![api_slice("IPv6", &["fd00:10::1"], 6443)],
    json!({"to": [{"ipBlock": {"cidr": "fd00:10::1/128"}}], "ports": [{"protocol": "TCP", "port": 6443}]}))]
#[case::three_control_plane_nodes(vec![api_slice("IPv4", &["10.0.0.13", "10.0.0.11", "10.0.0.12"], 6443)],
    json!({"to": [{"ipBlock": {"cidr": "10.0.0.11/32"}}, {"ipBlock": {"cidr": "10.0.0.12/32"}}, {"ipBlock": {"cidr": "10.0.0.13/32"}}], "ports": [{"protocol": "TCP", "port": 6443}]}))]
#[case::dual_stack(vec![api_slice("IPv4", &["10.0.0.11"], 443), api_slice("IPv6", &["fd00::11"], 443)],
    json!({"to": [{"ipBlock": {"cidr": "10.0.0.11/32"}}, {"ipBlock": {"cidr": "fd00::11/128"}}], "ports": [{"protocol": "TCP", "port": 443}]}))]
fn the_api_door_is_rendered_from_the_endpoint_slices(
    #[case] slices: Vec<EndpointSlice>,
    #[case] expected: Value,
) {
    let slices: Vec<&EndpointSlice> = slices.iter().collect();
    let api = ApiEndpoints::of(&slices);
    assert_eq!(serde_json::to_value(api.door()).unwrap(), expected);
    // The rendered door opens what it was rendered from.
    assert!(check_api_door(&[api.door()], &api).reachable);
}

/// How `api-door` and the mismatch log name the API server's endpoints.
#[test]
fn the_api_endpoints_read_as_addresses_on_ports() {
    let slices = [api_slice("IPv4", &["10.0.0.12", "10.0.0.11"], 6443)];
    let api = ApiEndpoints::of(&slices.iter().collect::<Vec<_>>());
    assert_eq!(api.to_string(), "10.0.0.11, 10.0.0.12 on TCP 6443");
}

fn rules(value: Value) -> Vec<NetworkPolicyEgressRule> {
    serde_json::from_value(value).unwrap()
}

#[rstest]
#[case::the_old_door_of_443_and_6443_to_anywhere(json!([{"ports": [{"protocol": "TCP", "port": 443}, {"protocol": "TCP", "port": 6443}]}]), 6443, true)]
#[case::the_old_door_on_minikube(json!([{"ports": [{"protocol": "TCP", "port": 443}, {"protocol": "TCP", "port": 6443}]}]), 8443, false)]
#[case::an_exact_door(json!([{"to": [{"ipBlock": {"cidr": "10.0.0.11/32"}}], "ports": [{"protocol": "TCP", "port": 6443}]}]), 6443, true)]
#[case::another_address(json!([{"to": [{"ipBlock": {"cidr": "10.0.0.12/32"}}], "ports": [{"protocol": "TCP", "port": 6443}]}]), 6443, false)]
#[case::excepted(json!([{"to": [{"ipBlock": {"cidr": "10.0.0.0/24", "except": ["10.0.0.11/32"]}}]}]), 6443, false)]
#[case::a_port_range(json!([{"to": [{"ipBlock": {"cidr": "10.0.0.0/24"}}], "ports": [{"protocol": "TCP", "port": 6000, "endPort": 7000}]}]), 6443, true)]
#[case::udp_only(json!([{"ports": [{"protocol": "UDP", "port": 6443}]}]), 6443, false)]
#[case::a_pod_peer_is_no_door_to_the_api_server(json!([{"to": [{"podSelector": {}}], "ports": [{"port": 6443}]}]), 6443, false)]
fn the_api_door_check_reads_rules_as_network_policy_does(
    #[case] door: Value,
    #[case] port: i32,
    #[case] reachable: bool,
) {
    let slices = [api_slice("IPv4", &["10.0.0.11"], port)];
    let api = ApiEndpoints::of(&slices.iter().collect::<Vec<_>>());
    let outcome = check_api_door(&rules(door), &api);
    assert_eq!(outcome.reachable, reachable, "{outcome:?}");
}
