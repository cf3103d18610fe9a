//! The `NamespaceBaseline` custom resource: the seed's two fields (`namespaceLabel`,
//! `allowDNS`) and optional extensions whose defaults keep the seed's behaviour;
//! `namespaceSelector` is the long form of `namespaceLabel` (exactly one of the two).

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    Condition, LabelSelector as KubernetesSelector, Time,
};
use serde::{Deserialize, Serialize};

use crate::vocabulary::selector::{
    LabelSelector, NAMESPACE_NAME_LABEL, SelectorError, is_valid_label_key, is_valid_label_value,
};

/// Where a `namespaceLabel` must match, in the CRD schema itself: one `key=value` or `key`
/// in label syntax. Length limits are checked by [`NamespaceBaselineSpec::validate`].
pub const NAMESPACE_LABEL_PATTERN: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?(=[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$";

/// Why a spec sets both or neither of `namespaceLabel` and `namespaceSelector`: the CRD's
/// validation rule and [`NamespaceBaselineSpec::validate`] say it alike.
pub const ONE_SELECTOR_MESSAGE: &str = "set exactly one of namespaceLabel (key=value or key: the namespaces carrying a label) and namespaceSelector (a Kubernetes label selector, e.g. every namespace except a few)";

/// The CRD's validation rule (CEL) for [`ONE_SELECTOR_MESSAGE`].
pub const ONE_SELECTOR_RULE: &str = "has(self.namespaceLabel) != has(self.namespaceSelector)";

/// Every namespace carrying `namespaceLabel` (or selected by `namespaceSelector`) sits behind a default-deny NetworkPolicy and,
/// unless `allowDNS` is false, a DNS egress door.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[cfg_attr(feature = "crd", derive(kube::CustomResource, schemars::JsonSchema))]
#[cfg_attr(
    feature = "crd",
    kube(
        group = "hedronite.io",
        version = "v1alpha1",
        kind = "NamespaceBaseline",
        plural = "namespacebaselines",
        shortname = "nsb",
        status = "NamespaceBaselineStatus",
        doc = "Puts every namespace carrying a label behind a default-deny network wall.",
        printcolumn = r#"{"name":"Label","type":"string","jsonPath":".spec.namespaceLabel"}"#,
        printcolumn = r#"{"name":"Namespaces","type":"integer","jsonPath":".status.namespaces"}"#,
        printcolumn = r#"{"name":"Mode","type":"string","jsonPath":".spec.mode","priority":1}"#,
        printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
        printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason","priority":1}"#,
        printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
    )
)]
#[cfg_attr(
    feature = "crd",
    schemars(extend("x-kubernetes-validations" = [{"rule": ONE_SELECTOR_RULE, "message": ONE_SELECTOR_MESSAGE}]))
)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceBaselineSpec {
    /// The label that puts a namespace behind the wall: `key=value` (the label has that
    /// value) or `key` (the label exists). The short form of `namespaceSelector`; set
    /// exactly one of the two.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[cfg_attr(feature = "crd", schemars(regex(pattern = NAMESPACE_LABEL_PATTERN), length(min = 1, max = 317)))]
    pub namespace_label: String,

    /// The namespaces behind the wall, as a Kubernetes label selector (`matchLabels`, and
    /// `matchExpressions` with `In`, `NotIn`, `Exists`, `DoesNotExist`): e.g. every namespace
    /// except a few named ones (`kubernetes.io/metadata.name NotIn [...]`) and those carrying
    /// an opt-out label (`DoesNotExist`). Set exactly one of this and `namespaceLabel`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<KubernetesSelector>,

    /// Add the DNS egress door next to the deny-all policy.
    #[serde(rename = "allowDNS", default = "default_true")]
    pub allow_dns: bool,

    /// Where cluster DNS runs; defaults to `k8s-app=kube-dns` pods in `kube-system`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<DnsSpec>,

    /// What happens to the wall when a namespace stops matching or the baseline is deleted.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,

    /// `Enforce` installs and repairs the wall; `Audit` only reports drift.
    #[serde(default)]
    pub mode: Mode,
}

fn default_true() -> bool {
    true
}

/// Where the DNS door opens egress to: the DNS pods (by namespace and labels) and, where
/// pods resolve through an address no pod selector matches (NodeLocal DNSCache's
/// 169.254.20.10 on every node), those addresses; on the ports the DNS servers listen on.
/// Every default is the seed's door: `k8s-app=kube-dns` pods in `kube-system`, UDP and TCP 53.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "crd", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct DnsSpec {
    /// The namespace of the DNS pods (selected by its `kubernetes.io/metadata.name` label).
    #[serde(default = "default_dns_namespace")]
    pub namespace: String,
    /// The labels of the DNS pods.
    #[serde(default = "default_dns_pod_labels")]
    pub pod_labels: BTreeMap<String, String>,
    /// Open the door to the DNS pods (`namespace`, `podLabels`). `false` leaves a door to
    /// `ipBlocks` only.
    #[serde(default = "default_true", skip_serializing_if = "is_true")]
    pub pods: bool,
    /// The ports the DNS servers listen on, as NetworkPolicy sees them: the pods' own ports,
    /// after a Service's mapping (OpenShift's DNS pods listen on 5353 behind port 53).
    #[serde(
        default = "default_dns_ports",
        skip_serializing_if = "is_default_dns_ports"
    )]
    #[cfg_attr(feature = "crd", schemars(length(min = 1, max = 8)))]
    pub ports: Vec<DnsPort>,
    /// Addresses of DNS servers that no pod selector matches, as CIDRs (IPv4 or IPv6), e.g.
    /// `169.254.20.10/32` for NodeLocal DNSCache. Never the whole internet.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "crd", schemars(length(max = 16), inner(regex(pattern = CIDR_PATTERN))))]
    pub ip_blocks: Vec<String>,
    /// The Service pods resolve through, `namespace/name`: the reconciler checks that its
    /// ready endpoints are inside the door (the `DNSReachable` condition).
    #[serde(
        default = "default_dns_service",
        skip_serializing_if = "is_default_dns_service"
    )]
    #[cfg_attr(feature = "crd", schemars(regex(pattern = SERVICE_PATTERN)))]
    pub service: String,
}

/// One port of the DNS door.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "crd", derive(schemars::JsonSchema))]
pub struct DnsPort {
    pub protocol: DnsProtocol,
    #[cfg_attr(feature = "crd", schemars(range(min = 1, max = 65535), extend("format" = "int32")))]
    pub port: u16,
}

#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "crd", derive(schemars::JsonSchema))]
pub enum DnsProtocol {
    #[serde(rename = "UDP")]
    Udp,
    #[serde(rename = "TCP")]
    Tcp,
}

impl DnsProtocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Udp => "UDP",
            Self::Tcp => "TCP",
        }
    }
}

/// What the CRD schema accepts as an ipBlock: digits, hex, dots and colons, one prefix length.
/// [`NamespaceBaselineSpec::validate`] checks the address and the prefix for real.
pub const CIDR_PATTERN: &str = r"^[0-9A-Fa-f.:]+/[0-9]{1,3}$";
/// `namespace/name`, both DNS labels.
pub const SERVICE_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-a-z0-9]*[a-z0-9])?$";

fn default_dns_namespace() -> String {
    "kube-system".to_owned()
}

fn default_dns_pod_labels() -> BTreeMap<String, String> {
    BTreeMap::from([("k8s-app".to_owned(), "kube-dns".to_owned())])
}

fn default_dns_ports() -> Vec<DnsPort> {
    vec![
        DnsPort {
            protocol: DnsProtocol::Udp,
            port: 53,
        },
        DnsPort {
            protocol: DnsProtocol::Tcp,
            port: 53,
        },
    ]
}

fn is_default_dns_ports(ports: &[DnsPort]) -> bool {
    ports == default_dns_ports()
}

fn default_dns_service() -> String {
    "kube-system/kube-dns".to_owned()
}

fn is_default_dns_service(service: &str) -> bool {
    service == default_dns_service()
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_true(value: &bool) -> bool {
    *value
}

impl Default for DnsSpec {
    fn default() -> Self {
        Self {
            namespace: default_dns_namespace(),
            pod_labels: default_dns_pod_labels(),
            pods: true,
            ports: default_dns_ports(),
            ip_blocks: Vec::new(),
            service: default_dns_service(),
        }
    }
}

impl DnsSpec {
    /// The DNS Service's namespace and name.
    pub fn service_ref(&self) -> (&str, &str) {
        self.service.split_once('/').unwrap_or(("", &self.service))
    }
}

/// Fail-closed by default: a wall outlives its baseline unless asked otherwise.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "crd", derive(schemars::JsonSchema))]
pub enum DeletionPolicy {
    /// Leave the NetworkPolicies in place when a namespace stops matching or the baseline
    /// is deleted.
    #[default]
    Orphan,
    /// Remove them (the baseline then carries a finalizer until they are gone).
    Delete,
}

#[derive(Serialize, Deserialize, Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "crd", derive(schemars::JsonSchema))]
pub enum Mode {
    /// Install and repair the wall.
    #[default]
    Enforce,
    /// Report drift in status and events; write no NetworkPolicy.
    Audit,
}

/// The schema of `status.holes`: counts whose format Kubernetes knows (`int32`; schemars
/// would write `uint32`, which the API server warns about on every CRD apply).
#[cfg(feature = "crd")]
fn hole_counts_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "nullable": true,
        "additionalProperties": {"type": "integer", "format": "int32", "minimum": 0},
    })
}

/// What the reconciler reports. Written only through the status subresource.
///
/// Unknown fields are preserved, as in the seed schema, so a status written by an older or
/// newer reconciler is never pruned.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[cfg_attr(feature = "crd", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "crd", schemars(extend("x-kubernetes-preserve-unknown-fields" = true)))]
#[serde(rename_all = "camelCase")]
pub struct NamespaceBaselineStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Namespaces covered: matched by `namespaceLabel` or `namespaceSelector`.
    #[serde(default)]
    #[cfg_attr(feature = "crd", schemars(extend("format" = "int32")))]
    pub namespaces: u32,
    /// Namespaces the selector leaves out (every other live namespace): what "every
    /// namespace except..." excepts in this cluster (`plan` lists them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "crd", schemars(extend("format" = "int32")))]
    pub namespaces_left_out: Option<u32>,
    /// Writes made by the last reconcile (0 when the wall was already in place).
    #[serde(default)]
    #[cfg_attr(feature = "crd", schemars(extend("format" = "int32")))]
    pub objects_applied: u32,
    /// Managed NetworkPolicies that differ from the wall (in `Audit` mode, left as found).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "crd", schemars(extend("format" = "int32")))]
    pub drifted: Option<u32>,
    /// Managed NetworkPolicies repaired since the baseline was created (deleted, or their
    /// spec or labels changed, and put back): what an alert on tampering watches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "crd", schemars(extend("format" = "int64")))]
    pub drift_repairs: Option<u64>,
    /// Rules of other NetworkPolicies that open the wall in the namespaces it covers, by how
    /// far they open it (`World`, `Cluster`, `Namespaces`, `Pods`, `Addresses`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "crd", schemars(schema_with = "hole_counts_schema"))]
    pub holes: Option<BTreeMap<String, u32>>,
    /// `Ready`, `Degraded`, `Sealed` (no hole to the world or the whole cluster) and
    /// `DNSReachable` (the DNS door opens onto the DNS Service's endpoints), in the
    /// metav1.Condition shape.
    #[serde(default)]
    #[cfg_attr(feature = "crd", schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"])))]
    pub conditions: Vec<Condition>,
    /// When the enforcement probe last ended a round for this baseline (the `Enforced`
    /// condition says what it found); absent while the probe is off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_probe_time: Option<Time>,
}

/// Why a spec cannot be acted on. Permanent: nothing changes until the spec does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpecError {
    /// Both or neither of `namespaceLabel` and `namespaceSelector` ([`ONE_SELECTOR_MESSAGE`]).
    OneSelector,
    NamespaceLabel(SelectorError),
    NamespaceSelector(SelectorError),
    /// The selector covers the DNS namespace: its wall would cut every pod off DNS.
    SelectsDnsNamespace(String),
    DnsNamespace(String),
    DnsPodLabels(String),
    DnsPorts(String),
    DnsIpBlocks(String),
    DnsService(String),
    /// Neither the DNS pods nor an ipBlock: a door to nothing.
    DnsNowhere,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OneSelector => write!(f, "spec: {ONE_SELECTOR_MESSAGE}"),
            Self::NamespaceLabel(error) => write!(f, "spec.namespaceLabel: {error}"),
            Self::NamespaceSelector(error) => write!(f, "spec.namespaceSelector: {error}"),
            Self::SelectsDnsNamespace(namespace) => write!(
                f,
                "spec.namespaceSelector selects the DNS namespace {namespace:?}: its wall would cut every pod of the cluster off DNS; exclude it (matchExpressions: {{key: {NAMESPACE_NAME_LABEL}, operator: NotIn, values: [{namespace}, ...]}})"
            ),
            Self::DnsNamespace(namespace) => write!(
                f,
                "spec.dns.namespace {namespace:?} is not a namespace name (lowercase letters, digits and '-', at most 63 characters)"
            ),
            Self::DnsPodLabels(reason) => write!(f, "spec.dns.podLabels: {reason}"),
            Self::DnsPorts(reason) => write!(f, "spec.dns.ports: {reason}"),
            Self::DnsIpBlocks(reason) => write!(f, "spec.dns.ipBlocks: {reason}"),
            Self::DnsService(service) => write!(
                f,
                "spec.dns.service {service:?} is not namespace/name (two namespace-style names)"
            ),
            Self::DnsNowhere => f.write_str(
                "spec.dns: pods is false and ipBlocks is empty: the door would open to nothing (set allowDNS: false for no door)",
            ),
        }
    }
}

impl std::error::Error for SpecError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::NamespaceLabel(error) | Self::NamespaceSelector(error) => Some(error),
            _ => None,
        }
    }
}

impl NamespaceBaselineSpec {
    /// The seed's spec: guard `namespace_label` with the deny-all and DNS door.
    pub fn new(namespace_label: impl Into<String>) -> Self {
        Self {
            namespace_label: namespace_label.into(),
            namespace_selector: None,
            allow_dns: true,
            dns: None,
            deletion_policy: DeletionPolicy::default(),
            mode: Mode::default(),
        }
    }

    /// A spec covering the namespaces `selector` selects, with the seed's defaults.
    pub fn selecting(selector: KubernetesSelector) -> Self {
        Self {
            namespace_selector: Some(selector),
            ..Self::new("")
        }
    }

    /// The namespaces this baseline covers, or why the spec cannot be acted on.
    pub fn validate(&self) -> Result<LabelSelector, SpecError> {
        let selector = self.selector()?;
        if self.namespace_selector.is_some() {
            let dns_namespace = self
                .dns
                .as_ref()
                .map_or_else(default_dns_namespace, |dns| dns.namespace.clone());
            let name = dns_namespace.as_str();
            if selector.matches_with(|key| (key == NAMESPACE_NAME_LABEL).then_some(name)) {
                return Err(SpecError::SelectsDnsNamespace(dns_namespace));
            }
        }
        if let Some(dns) = &self.dns {
            if !is_dns_label(&dns.namespace) {
                return Err(SpecError::DnsNamespace(dns.namespace.clone()));
            }
            if dns.pods && dns.pod_labels.is_empty() {
                return Err(SpecError::DnsPodLabels(
                    "give at least one label: an empty selector would open DNS egress to every pod of the namespace".to_owned(),
                ));
            }
            for (key, value) in &dns.pod_labels {
                if !is_valid_label_key(key) {
                    return Err(SpecError::DnsPodLabels(format!(
                        "invalid label key {key:?}"
                    )));
                }
                if !is_valid_label_value(value) {
                    return Err(SpecError::DnsPodLabels(format!(
                        "invalid label value {value:?} for {key:?}"
                    )));
                }
            }
            validate_dns_door(dns)?;
        }
        Ok(selector)
    }

    /// The namespace selector, from whichever of `namespaceLabel` and `namespaceSelector` is
    /// set (exactly one must be).
    fn selector(&self) -> Result<LabelSelector, SpecError> {
        match (self.namespace_label.as_str(), &self.namespace_selector) {
            (label, None) if !label.is_empty() => {
                LabelSelector::parse(label).map_err(SpecError::NamespaceLabel)
            }
            ("", Some(selector)) => {
                LabelSelector::from_kubernetes(selector).map_err(SpecError::NamespaceSelector)
            }
            _ => Err(SpecError::OneSelector),
        }
    }

    /// How the spec selects its namespaces, for people: `namespaceLabel key=value` or
    /// `namespaceSelector <the Kubernetes label-selector string>` (as written when it does
    /// not read).
    pub fn selector_words(&self) -> String {
        match &self.namespace_selector {
            None => format!("namespaceLabel {}", self.namespace_label),
            Some(selector) => match LabelSelector::from_kubernetes(selector) {
                Ok(selector) => format!("namespaceSelector {selector}"),
                Err(_) => format!(
                    "namespaceSelector {}",
                    serde_json::to_string(selector).unwrap_or_default()
                ),
            },
        }
    }

    /// The DNS target in effect (the default when `dns` is not set).
    pub fn dns_target(&self) -> DnsSpec {
        self.dns.clone().unwrap_or_default()
    }
}

fn validate_dns_door(dns: &DnsSpec) -> Result<(), SpecError> {
    if dns.ports.is_empty() {
        return Err(SpecError::DnsPorts("give at least one port".to_owned()));
    }
    for (index, port) in dns.ports.iter().enumerate() {
        if port.port == 0 {
            return Err(SpecError::DnsPorts("port 0 is not a port".to_owned()));
        }
        if dns.ports[..index].contains(port) {
            return Err(SpecError::DnsPorts(format!(
                "{} {} is listed twice",
                port.protocol.as_str(),
                port.port
            )));
        }
    }
    for cidr in &dns.ip_blocks {
        let network = crate::vocabulary::cidr::Cidr::parse(cidr).map_err(SpecError::DnsIpBlocks)?;
        if network.prefix == 0 {
            return Err(SpecError::DnsIpBlocks(format!(
                "{cidr:?} is the whole internet: a DNS door must name the DNS servers' addresses"
            )));
        }
    }
    let (namespace, name) = dns.service_ref();
    if !is_dns_label(namespace) || !is_dns_label(name) {
        return Err(SpecError::DnsService(dns.service.clone()));
    }
    if !dns.pods && dns.ip_blocks.is_empty() {
        return Err(SpecError::DnsNowhere);
    }
    Ok(())
}

/// A DNS-1123 label, the syntax of namespace names.
pub fn is_dns_label(text: &str) -> bool {
    text.len() <= 63 && !text.contains('.') && crate::vocabulary::selector::is_valid_subdomain(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use serde_json::json;

    #[test]
    fn the_seed_spec_reads_with_its_defaults() {
        let spec: NamespaceBaselineSpec =
            serde_json::from_value(json!({"namespaceLabel": "baseline=guarded"})).unwrap();
        assert_eq!(spec, NamespaceBaselineSpec::new("baseline=guarded"));
        assert!(spec.allow_dns);
        assert_eq!(spec.deletion_policy, DeletionPolicy::Orphan);
        assert_eq!(spec.mode, Mode::Enforce);
        assert_eq!(spec.dns_target(), DnsSpec::default());
    }

    #[test]
    fn extensions_round_trip_with_seed_field_names() {
        let value = json!({
            "namespaceLabel": "tier",
            "allowDNS": false,
            "dns": {"namespace": "dns", "podLabels": {"app": "coredns"}},
            "deletionPolicy": "Delete",
            "mode": "Audit",
        });
        let spec: NamespaceBaselineSpec = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(serde_json::to_value(&spec).unwrap(), value);
    }

    #[rstest]
    #[case::neither(json!({"allowDNS": true}))]
    #[case::both(json!({"namespaceLabel": "a", "namespaceSelector": {}}))]
    fn exactly_one_selector_is_required(#[case] spec: serde_json::Value) {
        let spec: NamespaceBaselineSpec = serde_json::from_value(spec).unwrap();
        assert_eq!(spec.validate(), Err(SpecError::OneSelector));
        assert_eq!(
            SpecError::OneSelector.to_string(),
            format!("spec: {ONE_SELECTOR_MESSAGE}")
        );
    }

    #[test]
    fn a_namespace_selector_round_trips_and_selects() {
        let value = json!({
            "namespaceSelector": {"matchExpressions": [
                {"key": NAMESPACE_NAME_LABEL, "operator": "NotIn", "values": ["kube-system"]},
                {"key": "hedronite.io/baseline-opt-out", "operator": "DoesNotExist"},
            ]},
            "allowDNS": true,
            "deletionPolicy": "Orphan",
            "mode": "Enforce",
        });
        let spec: NamespaceBaselineSpec = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(serde_json::to_value(&spec).unwrap(), value);
        let selector = spec.validate().unwrap();
        assert!(selector.matches_with(|key| (key == NAMESPACE_NAME_LABEL).then_some("team-a")));
        assert!(selector.selects_new_namespaces());
        assert_eq!(
            spec.selector_words(),
            "namespaceSelector kubernetes.io/metadata.name notin (kube-system),!hedronite.io/baseline-opt-out"
        );
    }

    #[rstest]
    #[case(json!({"namespaceLabel": "a!=b"}), "spec.namespaceLabel")]
    #[case(json!({"namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}}), "spec.namespaceSelector: matchExpressions: \"a\" has operator \"Gt\"")]
    #[case(json!({"namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}), "spec.namespaceSelector: matchExpressions: \"a\" In needs at least one value")]
    #[case(json!({"namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}}), "spec.namespaceSelector: matchExpressions: \"a\" Exists takes no values")]
    #[case(json!({"namespaceSelector": {"matchLabels": {"a/b/c": "x"}}}), "spec.namespaceSelector: invalid label key")]
    #[case(json!({"namespaceSelector": {"matchLabels": {"a": "-x"}}}), "spec.namespaceSelector: invalid label value")]
    #[case(json!({"namespaceSelector": {}}), "spec.namespaceSelector selects the DNS namespace \"kube-system\"")]
    #[case(json!({"namespaceSelector": {"matchExpressions": [{"key": "opt-out", "operator": "DoesNotExist"}]}}), "spec.namespaceSelector selects the DNS namespace \"kube-system\"")]
    #[case(json!({"namespaceSelector": {"matchExpressions": [{"key": NAMESPACE_NAME_LABEL, "operator": "NotIn", "values": ["kube-system"]}]}, "dns": {"namespace": "dns"}}), "spec.namespaceSelector selects the DNS namespace \"dns\"")]
    #[case(json!({"namespaceLabel": "a", "dns": {"namespace": "Kube_System"}}), "spec.dns.namespace")]
    #[case(json!({"namespaceLabel": "a", "dns": {"podLabels": {}}}), "spec.dns.podLabels")]
    #[case(json!({"namespaceLabel": "a", "dns": {"podLabels": {"app": "-x"}}}), "spec.dns.podLabels")]
    #[case(json!({"namespaceLabel": "a", "dns": {"podLabels": {"a=b": "x"}}}), "spec.dns.podLabels")]
    #[case(json!({"namespaceLabel": "a", "dns": {"ports": []}}), "spec.dns.ports: give at least one port")]
    #[case(json!({"namespaceLabel": "a", "dns": {"ports": [{"protocol": "UDP", "port": 0}]}}), "spec.dns.ports: port 0")]
    #[case(json!({"namespaceLabel": "a", "dns": {"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "UDP", "port": 53}]}}), "spec.dns.ports: UDP 53 is listed twice")]
    #[case(json!({"namespaceLabel": "a", "dns": {"ipBlocks": ["0.0.0.0/0"]}}), "spec.dns.ipBlocks: \"0.0.0.0/0\" is the whole internet")]
    #[case(json!({"namespaceLabel": "a", "dns": {"ipBlocks": ["::/0"]}}), "spec.dns.ipBlocks: \"::/0\" is the whole internet")]
    #[case(json!({"namespaceLabel": "a", "dns": {"ipBlocks": ["169.254.20.10"]}}), "spec.dns.ipBlocks: \"169.254.20.10\" is not a CIDR")]
    #[case(json!({"namespaceLabel": "a", "dns": {"ipBlocks": ["10.0.0.1/8"]}}), "spec.dns.ipBlocks: \"10.0.0.1/8\" has host bits set")]
    #[case(json!({"namespaceLabel": "a", "dns": {"service": "kube-dns"}}), "spec.dns.service")]
    #[case(json!({"namespaceLabel": "a", "dns": {"service": "Kube/DNS"}}), "spec.dns.service")]
    #[case(json!({"namespaceLabel": "a", "dns": {"pods": false}}), "spec.dns: pods is false and ipBlocks is empty")]
    fn invalid_specs_say_which_field(#[case] spec: serde_json::Value, #[case] field: &str) {
        let spec: NamespaceBaselineSpec = serde_json::from_value(spec).unwrap();
        let error = spec.validate().unwrap_err().to_string();
        assert!(error.starts_with(field), "{error}");
    }

    #[rstest]
    #[case(json!({"ports": [{"protocol": "SCTP", "port": 53}]}))]
    #[case(json!({"ports": [{"protocol": "UDP", "port": 70000}]}))]
    #[case(json!({"ports": [{"protocol": "UDP", "port": -1}]}))]
    #[case(json!({"ipBlocks": "10.0.0.0/8"}))]
    fn malformed_door_fields_are_refused_when_read(#[case] dns: serde_json::Value) {
        let read = serde_json::from_value::<NamespaceBaselineSpec>(
            json!({"namespaceLabel": "a", "dns": dns}),
        );
        assert!(read.is_err());
    }

    #[rstest]
    #[case("169.254.20.10/32", true)]
    #[case("fd00::53/128", true)]
    #[case("10.0.0.0/8", true)]
    #[case("kube-dns", false)]
    #[case("10.0.0.0", false)]
    #[case("10.0.0.0/8 ", false)]
    fn the_cidr_pattern_lets_through_what_the_parser_may_accept(
        #[case] text: &str,
        #[case] passes: bool,
    ) {
        assert_eq!(
            regex::Regex::new(CIDR_PATTERN).unwrap().is_match(text),
            passes
        );
    }

    #[rstest]
    #[case("kube-system/kube-dns", true)]
    #[case("openshift-dns/dns-default", true)]
    #[case("kube-dns", false)]
    #[case("a/b/c", false)]
    #[case("Kube/dns", false)]
    fn the_service_pattern_is_namespace_slash_name(#[case] text: &str, #[case] passes: bool) {
        assert_eq!(
            regex::Regex::new(SERVICE_PATTERN).unwrap().is_match(text),
            passes
        );
    }

    #[rstest]
    #[case("baseline=guarded", true)]
    #[case("hedronite.io/zone=a-1", true)]
    #[case("baseline", true)]
    #[case("baseline!=guarded", false)]
    #[case("a=b=c", false)]
    #[case("=x", false)]
    #[case("a=", false)]
    #[case("a b", false)]
    fn the_schema_pattern_agrees_with_the_parser_on_syntax(
        #[case] text: &str,
        #[case] valid: bool,
    ) {
        // The API server enforces the pattern; this keeps it and the parser in step for
        // inputs within the length limits (which only the parser checks).
        assert_eq!(LabelSelector::parse(text).is_ok(), valid);
        assert_eq!(pattern_matches(text), valid, "{text}");
    }

    fn pattern_matches(text: &str) -> bool {
        regex::Regex::new(NAMESPACE_LABEL_PATTERN)
            .unwrap()
            .is_match(text)
    }
}
