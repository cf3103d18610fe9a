//! The `openreports.io/v1alpha1` `Report` kind, as much of it as the reconciler writes and
//! reads back: the CRD is someone else's (github.com/openreports/reports-api), so its type
//! is declared here by hand rather than derived from a schema we own. What the cache keeps of
//! a stored one is much less: [`super::known`].

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::NamespaceResourceScope;
use namespace_baseline_core::identity::{
    BASELINE_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE, baseline_label_value,
};
use namespace_baseline_core::report::{ReportContent, ReportResult, SOURCE, Summary};
use serde::{Deserialize, Serialize};

pub const GROUP: &str = "openreports.io";
pub const VERSION: &str = "v1alpha1";
pub const KIND: &str = "Report";
pub const PLURAL: &str = "reports";

/// A Report: top-level fields, no `spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenReport {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<ObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    #[serde(default)]
    pub results: Vec<ReportResult>,
    #[serde(default)]
    pub summary: Summary,
}

impl kube::Resource for OpenReport {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        KIND.into()
    }

    fn group(_: &()) -> Cow<'_, str> {
        GROUP.into()
    }

    fn version(_: &()) -> Cow<'_, str> {
        VERSION.into()
    }

    fn plural(_: &()) -> Cow<'_, str> {
        PLURAL.into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The name of `baseline`'s report in each namespace it covers: `nsb-` and the baseline's
/// label value (its name, or a hashed short form of a long one), a valid object name.
pub fn report_name(baseline: &str) -> String {
    format!("nsb-{}", baseline_label_value(baseline))
}

/// The labels of `baseline`'s reports: the watch selects them, a baseline's deletion finds
/// its reports by them.
pub fn report_labels(baseline: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_BY_LABEL.to_owned(), MANAGED_BY_VALUE.to_owned()),
        (BASELINE_LABEL.to_owned(), baseline_label_value(baseline)),
    ])
}

/// `baseline`'s report of `namespace`.
pub fn desired(baseline: &str, namespace: &str, content: ReportContent) -> OpenReport {
    OpenReport {
        metadata: ObjectMeta {
            name: Some(report_name(baseline)),
            namespace: Some(namespace.to_owned()),
            labels: Some(report_labels(baseline)),
            ..ObjectMeta::default()
        },
        scope: Some(ObjectReference {
            api_version: Some("v1".to_owned()),
            kind: Some("Namespace".to_owned()),
            name: Some(namespace.to_owned()),
            ..ObjectReference::default()
        }),
        source: Some(SOURCE.to_owned()),
        results: content.results,
        summary: content.summary,
    }
}

/// The body of a server-side apply: the object with its `apiVersion` and `kind`.
pub fn apply_body(report: &OpenReport) -> serde_json::Value {
    let mut body = serde_json::to_value(report).unwrap_or_default();
    if let Some(object) = body.as_object_mut() {
        object.insert("apiVersion".into(), format!("{GROUP}/{VERSION}").into());
        object.insert("kind".into(), KIND.into());
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;
    use namespace_baseline_core::report::{NamespaceState, WallState, namespace_report};

    fn content() -> ReportContent {
        namespace_report(&NamespaceState {
            baseline: "guarded",
            wall: &WallState::InPlace,
            holes: &[],
            dns: None,
            enforced: None,
        })
    }

    #[test]
    fn the_apply_body_names_the_kind() {
        let body = apply_body(&desired("guarded", "team-a", content()));
        assert_eq!(body["apiVersion"], "openreports.io/v1alpha1");
        assert_eq!(body["kind"], "Report");
        assert_eq!(body["metadata"]["name"], "nsb-guarded");
        assert_eq!(body["scope"]["kind"], "Namespace");
        assert_eq!(body["scope"]["name"], "team-a");
        assert_eq!(body["source"], "namespace-baseline");
    }
}
