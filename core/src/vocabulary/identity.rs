//! Names and labels that identify the objects Namespace Baseline manages and the identity
//! it runs as. The policy and the reconciler both read them from here: change one, change both.

use std::collections::BTreeMap;

/// Label stamped on every managed NetworkPolicy, with [`MANAGED_BY_VALUE`].
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY_VALUE: &str = "namespace-baseline";
/// Label naming the baseline a managed NetworkPolicy belongs to (see [`baseline_label_value`]).
pub const BASELINE_LABEL: &str = "hedronite.io/baseline";

/// On a Namespace (any value; `exempt` by convention), keeps its pods away from the Pod
/// rule's webhook: the pod policy's `namespaceSelector` leaves it out (deploy/, the chart).
/// For a network plugin's or a service mesh's namespace; only an exempt identity may set,
/// change or remove it.
pub const POD_GATE_LABEL: &str = "hedronite.io/pod-gate";

/// On a NamespaceBaseline while its deletion must remove its wall (`deletionPolicy: Delete`
/// in `Enforce` mode); never present under `Orphan`.
pub const CLEANUP_FINALIZER: &str = "hedronite.io/cleanup";

/// The server-side apply field manager of the reconciler.
pub const FIELD_MANAGER: &str = "namespace-baseline";

pub const RECONCILER_NAMESPACE: &str = "namespace-baseline";
pub const RECONCILER_SERVICE_ACCOUNT: &str = "namespace-baseline-reconciler";

/// The API group, version and kind of the custom resource.
pub const GROUP: &str = "hedronite.io";
pub const VERSION: &str = "v1alpha1";
pub const KIND: &str = "NamespaceBaseline";

/// The username the API server gives the reconciler's ServiceAccount
/// ([`service_account_username`] of [`RECONCILER_NAMESPACE`] and [`RECONCILER_SERVICE_ACCOUNT`],
/// checked by a test); the policy's default `reconcilerUsername`, so that the gate never
/// blocks the installer. A constant, so that the settings can borrow it.
pub const RECONCILER_USERNAME: &str =
    "system:serviceaccount:namespace-baseline:namespace-baseline-reconciler";

/// [`RECONCILER_USERNAME`], owned.
pub fn reconciler_username() -> String {
    RECONCILER_USERNAME.to_owned()
}

pub fn service_account_username(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// Kubernetes label values are at most 63 characters; a baseline's name may be up to 253.
const MAX_LABEL_VALUE: usize = 63;
/// Object names (DNS subdomains) are at most 253 characters.
const MAX_OBJECT_NAME: usize = 253;

/// The value of [`BASELINE_LABEL`] for a baseline: its name when that is a valid label value,
/// otherwise a readable prefix and a stable hash of the full name, so that long names still
/// map to exactly one baseline.
pub fn baseline_label_value(baseline: &str) -> String {
    if baseline.len() <= MAX_LABEL_VALUE {
        return baseline.to_owned();
    }
    shorten(baseline, MAX_LABEL_VALUE)
}

/// Whether `label_value`, a managed policy's [`BASELINE_LABEL`], names the baseline
/// `baseline`, without copying the name when it is short enough to be its own label value.
pub fn is_labelled_for(baseline: &str, label_value: &str) -> bool {
    if baseline.len() <= MAX_LABEL_VALUE {
        baseline == label_value
    } else {
        baseline_label_value(baseline) == label_value
    }
}

/// The name of the deny-all NetworkPolicy a baseline installs.
pub fn deny_all_policy_name(baseline: &str) -> String {
    policy_name(baseline, "default-deny")
}

/// The name of the DNS egress NetworkPolicy a baseline installs.
pub fn dns_policy_name(baseline: &str) -> String {
    policy_name(baseline, "allow-dns")
}

fn policy_name(baseline: &str, role: &str) -> String {
    let fixed = "nsb-".len() + 1 + role.len();
    let room = MAX_OBJECT_NAME - fixed;
    let middle = if baseline.len() <= room {
        baseline.to_owned()
    } else {
        shorten(baseline, room)
    };
    format!("nsb-{middle}-{role}")
}

/// `prefix-hash`, at most `max` characters, ending in an alphanumeric character.
fn shorten(name: &str, max: usize) -> String {
    let hash = format!("{:016x}", fnv1a(name.as_bytes()));
    let keep = max - hash.len() - 1;
    // Baseline names are DNS subdomains (ASCII), so byte slicing is on a char boundary;
    // trailing separators are trimmed to keep the result a valid name and label value.
    let prefix = name[..keep].trim_end_matches(['-', '.']);
    format!("{prefix}-{hash}")
}

/// FNV-1a: small, dependency-free and stable across releases and platforms, which is all a
/// name suffix needs (it is not a security boundary: the full name is checked on lookup).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The labels every managed NetworkPolicy of `baseline` carries.
pub fn managed_labels(baseline: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_BY_LABEL.to_owned(), MANAGED_BY_VALUE.to_owned()),
        (BASELINE_LABEL.to_owned(), baseline_label_value(baseline)),
    ])
}

/// Whether an object's labels claim it is managed by Namespace Baseline. Either label is a
/// claim: a policy carrying only one of them is still treated as ours.
pub fn claims_management(labels: &BTreeMap<String, String>) -> bool {
    labels.get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY_VALUE)
        || labels.contains_key(BASELINE_LABEL)
}

/// The label selector matching every managed NetworkPolicy, for watches and lists.
pub fn managed_selector() -> String {
    format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocabulary::selector::{is_valid_label_value, is_valid_subdomain};
    use rstest::rstest;

    #[test]
    fn reconciler_username_names_the_deployed_service_account() {
        assert_eq!(
            RECONCILER_USERNAME,
            service_account_username(RECONCILER_NAMESPACE, RECONCILER_SERVICE_ACCOUNT)
        );
        assert_eq!(
            reconciler_username(),
            "system:serviceaccount:namespace-baseline:namespace-baseline-reconciler"
        );
    }

    #[rstest]
    #[case("guarded", "nsb-guarded-default-deny", "nsb-guarded-allow-dns")]
    #[case("a.b", "nsb-a.b-default-deny", "nsb-a.b-allow-dns")]
    fn short_names_are_kept_readable(
        #[case] baseline: &str,
        #[case] deny: &str,
        #[case] dns: &str,
    ) {
        assert_eq!(deny_all_policy_name(baseline), deny);
        assert_eq!(dns_policy_name(baseline), dns);
        assert_eq!(baseline_label_value(baseline), baseline);
    }

    #[rstest]
    #[case(64)]
    #[case(200)]
    #[case(253)]
    fn long_names_stay_valid_and_distinct(#[case] len: usize) {
        let long = "a".repeat(len - 2) + "-b";
        let other = "a".repeat(len - 2) + "-c";
        for name in [deny_all_policy_name(&long), dns_policy_name(&long)] {
            assert!(name.len() <= 253, "{name} too long");
            assert!(is_valid_subdomain(&name), "{name} invalid");
        }
        let value = baseline_label_value(&long);
        assert!(is_valid_label_value(&value), "{value} invalid");
        assert_ne!(value, baseline_label_value(&other));
        assert_ne!(deny_all_policy_name(&long), deny_all_policy_name(&other));
    }

    #[test]
    fn shortening_trims_separators_before_the_hash() {
        // 46 characters are kept before the hash; make the 46th a dot.
        let name = format!("{}.{}", "a".repeat(45), "b".repeat(30));
        let value = baseline_label_value(&name);
        assert!(is_valid_label_value(&value), "{value}");
        assert!(!value.contains(".-"));
    }

    #[rstest]
    #[case(&[(MANAGED_BY_LABEL, MANAGED_BY_VALUE)], true)]
    #[case(&[(BASELINE_LABEL, "x")], true)]
    #[case(&[(MANAGED_BY_LABEL, "helm")], false)]
    #[case(&[("app", "web")], false)]
    fn management_claims(#[case] labels: &[(&str, &str)], #[case] claimed: bool) {
        let labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(claims_management(&labels), claimed);
    }
}
