//! The policy's settings, as written in the ClusterAdmissionPolicy, and their validation.

use std::collections::HashSet;

use serde::{Deserialize, Deserializer, Serialize};

use super::baselines::Guard;
pub use super::borrowed::PolicySettings as SettingsRef;
use super::holes_setting::HolesSetting;
use super::request::UserInfo;
use super::view::GuardRef;
use crate::vocabulary::identity::{
    RECONCILER_USERNAME, reconciler_username, service_account_username,
};
use crate::vocabulary::json::Text;
use crate::vocabulary::selector::{LabelSelector, SelectorError, is_valid_subdomain};

#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PolicySettings {
    /// `namespaceLabel`s whose namespaces are guarded, in the NamespaceBaseline syntax.
    pub guard_selectors: Vec<String>,
    /// Also guard the `namespaceLabel` of every live NamespaceBaseline, read through the
    /// policy-server's host capabilities.
    pub context_aware: bool,
    /// The reconciler's identity, always allowed.
    pub reconciler_username: String,
    /// Break-glass identities, always allowed.
    pub exempt_users: Vec<String>,
    pub exempt_groups: Vec<String>,
    /// `namespace:name` of ServiceAccounts.
    pub exempt_service_accounts: Vec<String>,
    /// What to do with a CREATE or UPDATE of a NetworkPolicy that opens a `World` or
    /// `Cluster` hole in a walled namespace: `Warn`, `Deny` or `Ignore` ([`HolesSetting`]).
    pub holes: String,
    /// Refuse a Pod CREATE in a namespace a live `Enforce` NamespaceBaseline guards until
    /// that baseline's wall (its deny-all, and its DNS door when `allowDNS`) exists: the
    /// pod's controller retries. Needs `contextAware` (the wall is named after the baseline).
    pub pods_wait_for_wall: bool,
}

/// Read through [`SettingsRef`]: one reader, so that the settings `validate_settings` checks
/// and those each `validate` call reads are read alike (unknown fields refused, the same
/// defaults, the same messages).
impl<'de> Deserialize<'de> for PolicySettings {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        SettingsRef::deserialize(deserializer).map(|settings| settings.to_owned())
    }
}

impl Default for PolicySettings {
    fn default() -> Self {
        Self {
            guard_selectors: Vec::new(),
            context_aware: false,
            reconciler_username: reconciler_username(),
            exempt_users: Vec::new(),
            exempt_groups: Vec::new(),
            exempt_service_accounts: Vec::new(),
            holes: HolesSetting::Warn.as_str().to_owned(),
            pods_wait_for_wall: false,
        }
    }
}

/// The control plane's own controllers, which the policy must not block from what they need
/// (blocking them leaves namespaces stuck in Terminating), and only from that: each is
/// exempt for DELETE alone ([`Exemption`]), since any other write of theirs could be turned
/// into a way around the guard (an `ownerReferences` entry on a managed policy, say, which the
/// garbage collector would then act on).
///
/// - the namespace controller deletes what a terminating namespace holds: DELETE in a
///   namespace that is being deleted (read through the host: [`Exemption::DeletesInTerminatingNamespace`]);
/// - the garbage collector deletes objects whose owners are gone: DELETE;
/// - `system:kube-controller-manager` is every controller at once when the controller
///   manager runs without per-controller credentials (`--use-service-account-credentials=false`):
///   the union of the two, DELETE.
pub const CONTROL_PLANE_USERS: [(&str, Exemption); 3] = [
    (
        "system:serviceaccount:kube-system:namespace-controller",
        Exemption::DeletesInTerminatingNamespace,
    ),
    (
        "system:serviceaccount:kube-system:generic-garbage-collector",
        Exemption::Deletes,
    ),
    ("system:kube-controller-manager", Exemption::Deletes),
];

/// Groups every requester (or every requester of a kind) belongs to: exempting one would
/// turn the guard off for everybody, so the settings refuse them.
pub const EVERYONE_GROUPS: [(&str, &str); 3] = [
    ("system:authenticated", "every authenticated user"),
    ("system:unauthenticated", "every anonymous request"),
    (
        "system:serviceaccounts",
        "every ServiceAccount of every namespace",
    ),
];

/// The user every anonymous request carries: exempting it exempts everyone who can reach
/// the API server without credentials.
pub const ANONYMOUS_USER: &str = "system:anonymous";

/// How far the settings exempt a requester from the rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exemption {
    /// Not exempt: every rule applies.
    None,
    /// Every request is allowed: the reconciler and the break-glass identities.
    Everything,
    /// DELETE is allowed; every other request goes through the rules.
    Deletes,
    /// DELETE is allowed in a namespace that is being deleted; every other request goes
    /// through the rules.
    DeletesInTerminatingNamespace,
}

impl Exemption {
    /// The exemption of a control-plane controller named `username`, if it is one.
    fn of_control_plane(username: &str) -> Option<Self> {
        CONTROL_PLANE_USERS
            .iter()
            .find(|(user, _)| *user == username)
            .map(|(_, exemption)| *exemption)
    }
}

impl PolicySettings {
    /// Checks everything a request will rely on, with a message a person can act on.
    pub fn validate(&self) -> Result<(), String> {
        self.borrowed().validate()
    }

    fn borrowed(&self) -> SettingsRef<'_> {
        fn texts(values: &[String]) -> Vec<Text<'_>> {
            values
                .iter()
                .map(|value| Text::from(value.as_str()))
                .collect()
        }
        SettingsRef {
            guard_selectors: texts(&self.guard_selectors),
            context_aware: self.context_aware,
            reconciler_username: Text::from(self.reconciler_username.as_str()),
            exempt_users: texts(&self.exempt_users),
            exempt_groups: texts(&self.exempt_groups),
            exempt_service_accounts: texts(&self.exempt_service_accounts),
            holes: Text::from(self.holes.as_str()),
            pods_wait_for_wall: self.pods_wait_for_wall,
        }
    }

    /// The settings in the form the rules use. Invalid entries (which `validate` refuses
    /// before the policy is ever loaded) are left out rather than guessed at.
    pub fn gate(&self) -> Gate {
        let mut exempt_users: HashSet<String> = HashSet::from([self.reconciler_username.clone()]);
        exempt_users.extend(self.exempt_users.iter().cloned());
        exempt_users.extend(
            self.exempt_service_accounts
                .iter()
                .filter_map(|account| parse_service_account(account).ok())
                .map(|(namespace, name)| service_account_username(namespace, name)),
        );
        Gate {
            guards: self
                .guard_selectors
                .iter()
                .filter_map(|text| LabelSelector::parse(text).ok())
                .map(|selector| Guard {
                    selector,
                    baseline: None,
                    namespace_selector: false,
                })
                .collect(),
            context_aware: self.context_aware,
            // `validate` refuses anything else; the default is what an unreadable value
            // would have meant had it been left out.
            holes: HolesSetting::named(&self.holes),
            pods_wait_for_wall: self.pods_wait_for_wall,
            reconciler_username: self.reconciler_username.clone(),
            exempt_users,
            exempt_groups: self.exempt_groups.iter().cloned().collect(),
        }
    }
}

impl SettingsRef<'_> {
    /// Checks everything a request will rely on, with a message a person can act on.
    pub fn validate(&self) -> Result<(), String> {
        let mut problems = Vec::new();
        if self.guard_selectors.is_empty() && !self.context_aware {
            problems.push(
                "guardSelectors is empty and contextAware is false, so no namespace would be guarded: list the baselines' namespaceLabel values in guardSelectors (e.g. [\"baseline=guarded\"]) or set contextAware: true".to_owned(),
            );
        }
        for (index, selector) in self.guard_selectors.iter().enumerate() {
            if let Err(error) = LabelSelector::split(selector) {
                // guardSelectors takes the short form only; a selector's guard comes from
                // its live baseline.
                let selector_hint = match error {
                    SelectorError::NotEqual | SelectorError::SetOrList => {
                        " (guardSelectors takes namespaceLabel values only: a namespaceSelector baseline is guarded with contextAware: true)"
                    }
                    _ => "",
                };
                problems.push(format!(
                    "guardSelectors[{index}] {:?}: {error}{selector_hint}",
                    &**selector
                ));
            }
        }
        if self.reconciler_username.trim().is_empty() {
            problems.push(format!(
                "reconcilerUsername is empty: the reconciler would be blocked from installing the wall; the default is {RECONCILER_USERNAME:?}"
            ));
        }
        for (field, values) in [
            ("exemptUsers", &self.exempt_users),
            ("exemptGroups", &self.exempt_groups),
        ] {
            for (index, value) in values.iter().enumerate() {
                if value.trim().is_empty() {
                    problems.push(format!("{field}[{index}] is empty"));
                }
            }
        }
        for (index, group) in self.exempt_groups.iter().enumerate() {
            if let Some((_, who)) = EVERYONE_GROUPS.iter().find(|(name, _)| **group == **name) {
                problems.push(format!(
                    "exemptGroups[{index}] {:?} is {who}: exempting it would turn the guard off for all of them; name a break-glass group of your own",
                    &**group
                ));
            }
        }
        for (index, user) in self.exempt_users.iter().enumerate() {
            if **user == *ANONYMOUS_USER {
                problems.push(format!(
                    "exemptUsers[{index}] {ANONYMOUS_USER:?} is every anonymous request: exempting it would turn the guard off for anyone without credentials; name a break-glass user of your own"
                ));
            }
        }
        for (index, account) in self.exempt_service_accounts.iter().enumerate() {
            if let Err(reason) = parse_service_account(account) {
                problems.push(format!(
                    "exemptServiceAccounts[{index}] {:?}: {reason}",
                    &**account
                ));
            }
        }
        if let Err(problem) = HolesSetting::parse(&self.holes) {
            problems.push(problem);
        }
        if self.pods_wait_for_wall && !self.context_aware {
            problems.push(
                "podsWaitForWall needs contextAware: true: a namespace's wall is named after the live NamespaceBaseline that guards it, and whether it has a DNS door is that baseline's allowDNS, which only the live baselines say; set contextAware: true, or podsWaitForWall: false".to_owned(),
            );
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }

    /// A copy that owns its text.
    pub fn to_owned(&self) -> PolicySettings {
        let strings = |values: &[Text<'_>]| values.iter().map(|value| value.to_string()).collect();
        PolicySettings {
            guard_selectors: strings(&self.guard_selectors),
            context_aware: self.context_aware,
            reconciler_username: self.reconciler_username.to_string(),
            exempt_users: strings(&self.exempt_users),
            exempt_groups: strings(&self.exempt_groups),
            exempt_service_accounts: strings(&self.exempt_service_accounts),
            holes: self.holes.to_string(),
            pods_wait_for_wall: self.pods_wait_for_wall,
        }
    }

    /// How far this requester is exempt, as [`Gate::exemption`] decides it, without building
    /// the gate's sets: the reconciler and break-glass identities from everything, the
    /// control plane's controllers from what they need ([`CONTROL_PLANE_USERS`]).
    pub(crate) fn exemption(&self, username: &str, groups: &[Text<'_>]) -> Exemption {
        let everything = *self.reconciler_username == *username
            || self.exempt_users.iter().any(|user| **user == *username)
            || username
                .strip_prefix(SERVICE_ACCOUNT_PREFIX)
                .is_some_and(|account| {
                    self.exempt_service_accounts
                        .iter()
                        .any(|exempt| **exempt == *account && parse_service_account(exempt).is_ok())
                })
            || groups
                .iter()
                .any(|group| self.exempt_groups.iter().any(|exempt| exempt == group));
        if everything {
            Exemption::Everything
        } else {
            Exemption::of_control_plane(username).unwrap_or(Exemption::None)
        }
    }

    /// The guards of `guardSelectors` (those that parse; `validate` refuses the others).
    pub(crate) fn guards(&self) -> Vec<GuardRef<'_>> {
        self.guard_selectors
            .iter()
            .filter_map(|text| GuardRef::parse(text, None))
            .collect()
    }

    pub(crate) fn holes(&self) -> HolesSetting {
        HolesSetting::named(&self.holes)
    }
}

/// What [`service_account_username`] puts before `namespace:name`.
const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";

fn parse_service_account(account: &str) -> Result<(&str, &str), String> {
    let Some((namespace, name)) = account.split_once(':') else {
        return Err("write it as namespace:name".to_owned());
    };
    if namespace.len() > 63 || namespace.contains('.') || !is_valid_subdomain(namespace) {
        return Err(format!("{namespace:?} is not a namespace name"));
    }
    if !is_valid_subdomain(name) {
        return Err(format!("{name:?} is not a ServiceAccount name"));
    }
    Ok((namespace, name))
}

/// Settings compiled for evaluation.
#[derive(Debug, Clone, PartialEq)]
pub struct Gate {
    pub guards: Vec<Guard>,
    pub context_aware: bool,
    pub holes: HolesSetting,
    pub pods_wait_for_wall: bool,
    reconciler_username: String,
    exempt_users: HashSet<String>,
    exempt_groups: HashSet<String>,
}

impl Gate {
    /// The reconciler's identity (`reconcilerUsername`).
    pub fn reconciler_username(&self) -> &str {
        &self.reconciler_username
    }

    /// How far this requester is exempt: the reconciler and break-glass identities from
    /// everything, the control plane's controllers from what they need
    /// ([`CONTROL_PLANE_USERS`]).
    pub fn exemption(&self, user: &UserInfo) -> Exemption {
        let everything = self.exempt_users.contains(&user.username)
            || user
                .groups
                .iter()
                .any(|group| self.exempt_groups.contains(group));
        if everything {
            Exemption::Everything
        } else {
            Exemption::of_control_plane(&user.username).unwrap_or(Exemption::None)
        }
    }
}

/// The settings as the rules use them (from a [`Gate`] or read from a payload).
pub(crate) struct Decider<'g> {
    /// How far the requester is exempt from the rules.
    pub exemption: Exemption,
    pub guards: Vec<GuardRef<'g>>,
    pub context_aware: bool,
    pub holes: HolesSetting,
    /// Refuse a Pod CREATE in a guarded namespace until its wall is in place.
    pub pods_wait_for_wall: bool,
    /// The reconciler's identity: its own pod never waits for a wall only it installs.
    pub reconciler_username: &'g str,
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use serde_json::json;

    fn settings(value: serde_json::Value) -> Result<PolicySettings, String> {
        serde_json::from_value(value).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_name_the_deployed_reconciler() {
        let settings = settings(json!({"guardSelectors": ["baseline=guarded"]})).unwrap();
        assert_eq!(
            settings.reconciler_username,
            "system:serviceaccount:namespace-baseline:namespace-baseline-reconciler"
        );
        assert_eq!(settings.validate(), Ok(()));
    }

    #[rstest]
    #[case::context_aware_alone(json!({"contextAware": true}))]
    #[case::everything(json!({
        "guardSelectors": ["baseline=guarded", "tier"],
        "contextAware": true,
        "reconcilerUsername": "system:serviceaccount:ops:nsb",
        "exemptUsers": ["alice"],
        "exemptGroups": ["breakglass"],
        "exemptServiceAccounts": ["ops:rescue"],
        "holes": "Deny",
    }))]
    #[case::holes_ignored(json!({"contextAware": true, "holes": "Ignore"}))]
    #[case::pods_wait_for_wall(json!({"contextAware": true, "podsWaitForWall": true}))]
    #[case::pods_do_not_wait_settings_only(json!({"guardSelectors": ["baseline"], "podsWaitForWall": false}))]
    fn valid_settings(#[case] value: serde_json::Value) {
        assert_eq!(settings(value).unwrap().validate(), Ok(()));
    }

    #[rstest]
    #[case::nothing_guarded(json!({}), "no namespace would be guarded")]
    #[case::bad_selector(json!({"guardSelectors": ["a!=b"]}), "guardSelectors[0] \"a!=b\"")]
    #[case::set_expression(json!({"guardSelectors": ["tier=a,team=b"]}), "a namespaceSelector baseline is guarded with contextAware: true")]
    #[case::empty_selector(json!({"guardSelectors": ["ok", ""]}), "guardSelectors[1]")]
    #[case::empty_reconciler(json!({"contextAware": true, "reconcilerUsername": " "}), "reconcilerUsername is empty")]
    #[case::empty_user(json!({"contextAware": true, "exemptUsers": [""]}), "exemptUsers[0] is empty")]
    #[case::empty_group(json!({"contextAware": true, "exemptGroups": [""]}), "exemptGroups[0] is empty")]
    #[case::account_without_namespace(json!({"contextAware": true, "exemptServiceAccounts": ["rescue"]}), "namespace:name")]
    #[case::account_bad_namespace(json!({"contextAware": true, "exemptServiceAccounts": ["Ops:rescue"]}), "not a namespace name")]
    #[case::account_bad_name(json!({"contextAware": true, "exemptServiceAccounts": ["ops:"]}), "not a ServiceAccount name")]
    #[case::holes_lowercase(json!({"contextAware": true, "holes": "deny"}), "holes \"deny\" is not a choice: write Warn (accept with a warning), Deny or Ignore (did you mean Deny?)")]
    #[case::holes_unknown(json!({"contextAware": true, "holes": "Block"}), "holes \"Block\" is not a choice: write Warn (accept with a warning), Deny or Ignore")]
    #[case::holes_empty(json!({"contextAware": true, "holes": ""}), "holes \"\" is not a choice")]
    #[case::everyone_authenticated(json!({"contextAware": true, "exemptGroups": ["breakglass", "system:authenticated"]}), "exemptGroups[1] \"system:authenticated\" is every authenticated user: exempting it would turn the guard off for all of them")]
    #[case::everyone_anonymous(json!({"contextAware": true, "exemptGroups": ["system:unauthenticated"]}), "exemptGroups[0] \"system:unauthenticated\" is every anonymous request")]
    #[case::every_service_account(json!({"contextAware": true, "exemptGroups": ["system:serviceaccounts"]}), "exemptGroups[0] \"system:serviceaccounts\" is every ServiceAccount of every namespace")]
    #[case::anonymous_user(json!({"contextAware": true, "exemptUsers": ["system:anonymous"]}), "exemptUsers[0] \"system:anonymous\" is every anonymous request")]
    #[case::pods_wait_without_live_baselines(json!({"guardSelectors": ["baseline=guarded"], "podsWaitForWall": true}), "podsWaitForWall needs contextAware: true")]
    fn invalid_settings_say_what_to_fix(#[case] value: serde_json::Value, #[case] message: &str) {
        let error = settings(value).unwrap().validate().unwrap_err();
        assert!(error.contains(message), "{error}");
    }

    #[rstest]
    #[case::unknown_field(json!({"guardSelector": ["a"]}), "unknown field `guardSelector`")]
    #[case::wrong_type(json!({"contextAware": "yes"}), "invalid type")]
    #[case::holes_wrong_type(json!({"contextAware": true, "holes": true}), "invalid type: boolean `true`, expected a string")]
    #[case::pods_wait_wrong_type(json!({"contextAware": true, "podsWaitForWall": "yes"}), "invalid type: string \"yes\", expected a boolean")]
    fn unreadable_settings_are_refused(#[case] value: serde_json::Value, #[case] message: &str) {
        assert!(settings(value).unwrap_err().contains(message));
    }

    #[rstest]
    #[case::default(json!({"contextAware": true}), HolesSetting::Warn)]
    #[case::warn(json!({"contextAware": true, "holes": "Warn"}), HolesSetting::Warn)]
    #[case::deny(json!({"contextAware": true, "holes": "Deny"}), HolesSetting::Deny)]
    #[case::ignore(json!({"contextAware": true, "holes": "Ignore"}), HolesSetting::Ignore)]
    fn the_holes_setting_reaches_the_gate(
        #[case] value: serde_json::Value,
        #[case] expected: HolesSetting,
    ) {
        let settings = settings(value).unwrap();
        assert_eq!(settings.validate(), Ok(()));
        assert_eq!(settings.gate().holes, expected);
    }

    #[rstest]
    #[case::default_off(json!({"contextAware": true}), false)]
    #[case::on(json!({"contextAware": true, "podsWaitForWall": true}), true)]
    #[case::off(json!({"contextAware": true, "podsWaitForWall": false}), false)]
    fn the_pods_setting_reaches_the_gate(#[case] value: serde_json::Value, #[case] on: bool) {
        let settings = settings(value).unwrap();
        assert_eq!(settings.validate(), Ok(()));
        assert_eq!(settings.gate().pods_wait_for_wall, on);
        assert_eq!(settings.borrowed().pods_wait_for_wall, on);
    }

    #[rstest]
    #[case("system:serviceaccount:namespace-baseline:namespace-baseline-reconciler", &[], Exemption::Everything)]
    #[case("system:serviceaccount:kube-system:namespace-controller", &[], Exemption::DeletesInTerminatingNamespace)]
    #[case("system:serviceaccount:kube-system:generic-garbage-collector", &[], Exemption::Deletes)]
    #[case("system:kube-controller-manager", &[], Exemption::Deletes)]
    #[case("alice", &[], Exemption::Everything)]
    #[case("bob", &["breakglass"], Exemption::Everything)]
    #[case("system:serviceaccount:ops:rescue", &[], Exemption::Everything)]
    #[case("bob", &["system:masters"], Exemption::None)]
    #[case("system:serviceaccount:namespace-baseline:default", &[], Exemption::None)]
    #[case("system:serviceaccount:ops:other", &[], Exemption::None)]
    #[case("system:serviceaccount:kube-system:generic-garbage-collector-x", &[], Exemption::None)]
    fn exemptions(#[case] username: &str, #[case] groups: &[&str], #[case] exempt: Exemption) {
        let gate = settings(json!({
            "guardSelectors": ["baseline=guarded"],
            "exemptUsers": ["alice"],
            "exemptGroups": ["breakglass"],
            "exemptServiceAccounts": ["ops:rescue"],
        }))
        .unwrap()
        .gate();
        let user = super::UserInfo {
            username: username.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        };
        assert_eq!(gate.exemption(&user), exempt);
        let borrowed: Vec<Text<'_>> = groups.iter().map(|group| Text::from(*group)).collect();
        let settings = settings(json!({
            "guardSelectors": ["baseline=guarded"],
            "exemptUsers": ["alice"],
            "exemptGroups": ["breakglass"],
            "exemptServiceAccounts": ["ops:rescue"],
        }))
        .unwrap();
        assert_eq!(settings.borrowed().exemption(username, &borrowed), exempt);
    }
}
