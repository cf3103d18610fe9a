//! The live NamespaceBaselines as the policy reads them through the host (the public, owned
//! types), and the guard each enforces: what puts namespaces behind a wall. The rules read
//! both through their borrowed views (`view`); the conversions are here.

use std::borrow::Cow;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as KubernetesSelector;
use serde::Deserialize;

use super::view::{
    GuardRef, LiveBaselineMetadataRef, LiveBaselineRef, LiveBaselineSpecRef, Selection,
};
use crate::vocabulary::json::{Json, Text};
use crate::vocabulary::selector::LabelSelector;
use crate::vocabulary::spec::Mode;

/// What puts namespaces behind a wall, and the baseline it comes from when it was read from
/// the cluster rather than the policy's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guard {
    pub selector: LabelSelector,
    pub baseline: Option<String>,
    /// Written as a `namespaceSelector` (else a `namespaceLabel`).
    pub namespace_selector: bool,
}

impl fmt::Display for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&GuardRef::of(self), f)
    }
}

/// The fields of a live NamespaceBaseline the policy reads through host capabilities.
#[derive(Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(default)]
pub struct LiveBaseline {
    pub metadata: LiveBaselineMetadata,
    pub spec: LiveBaselineSpec,
}

#[derive(Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(default)]
pub struct LiveBaselineMetadata {
    pub name: String,
}

#[derive(Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct LiveBaselineSpec {
    pub namespace_label: String,
    pub namespace_selector: Option<KubernetesSelector>,
    pub mode: Mode,
    /// Whether its wall has a DNS door (the CRD's default: `true`).
    #[serde(rename = "allowDNS")]
    pub allow_dns: bool,
}

/// As the CRD defaults an absent field: `allowDNS` is `true`.
impl Default for LiveBaselineSpec {
    fn default() -> Self {
        Self {
            namespace_label: String::new(),
            namespace_selector: None,
            mode: Mode::default(),
            allow_dns: true,
        }
    }
}

impl LiveBaseline {
    /// The guard this baseline enforces, if any. A baseline whose `namespaceLabel` or
    /// `namespaceSelector` does not read (or that sets both) guards nothing (the reconciler
    /// reports it; reading it as some other selector could wall in the wrong namespaces),
    /// and an `Audit` baseline only observes.
    pub fn guard(&self) -> Option<Guard> {
        let live = LiveBaselineRef::of(self);
        let guard = live.guard()?;
        let namespace_selector = matches!(guard.selection, Selection::Selector(_));
        let selector = match guard.selection {
            Selection::Selector(selector) => selector.into_owned(),
            Selection::Label(..) => LabelSelector::parse(&self.spec.namespace_label).ok()?,
        };
        Some(Guard {
            selector,
            baseline: Some(self.metadata.name.clone()),
            namespace_selector,
        })
    }
}

impl<'a> GuardRef<'a> {
    /// The guard of the public [`Guard`].
    pub fn of(guard: &'a Guard) -> Self {
        let selection = match guard.selector.short_form() {
            Some((key, value)) if !guard.namespace_selector => Selection::Label(key, value),
            _ => Selection::Selector(Cow::Borrowed(&guard.selector)),
        };
        Self {
            selection,
            baseline: guard.baseline.as_deref(),
        }
    }
}

impl<'a> LiveBaselineRef<'a> {
    pub fn of(baseline: &'a LiveBaseline) -> Self {
        Self {
            metadata: LiveBaselineMetadataRef {
                name: Text::from(baseline.metadata.name.as_str()),
            },
            spec: LiveBaselineSpecRef {
                namespace_label: Text::from(baseline.spec.namespace_label.as_str()),
                namespace_selector: baseline.spec.namespace_selector.as_ref().map(|selector| {
                    Json::from_value(serde_json::to_value(selector).unwrap_or_default())
                }),
                mode: baseline.spec.mode,
                allow_dns: baseline.spec.allow_dns,
            },
        }
    }
}
