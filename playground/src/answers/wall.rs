//! The wall a NamespaceBaseline puts in a namespace, as the reconciler applies it: the
//! core's [`desired_wall`], written as YAML.

use namespace_baseline_core::spec::{Mode, NamespaceBaselineSpec, is_dns_label};
use namespace_baseline_core::wall::desired_wall;
use serde::Serialize;
use serde_json::Value;

use crate::editors::field::{Field, FieldError};
use crate::editors::objects::baseline_objects;

#[derive(Serialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WallView {
    /// The names of the baselines in the editor, for the picker.
    pub baselines: Vec<String>,
    /// The baseline rendered.
    pub baseline: Option<String>,
    pub namespace: String,
    /// The NetworkPolicies, `---` separated; `None` when something is missing or wrong.
    pub yaml: Option<String>,
    /// The names of the NetworkPolicies.
    pub policies: Vec<String>,
    /// What a person should know about this wall (Audit mode, no DNS door...).
    pub notes: Vec<String>,
    pub errors: Vec<FieldError>,
}

fn name_of(object: &Value) -> Option<&str> {
    object
        .get("metadata")?
        .get("name")?
        .as_str()
        .filter(|name| !name.is_empty())
}

/// The wall of the baseline named `baseline` (the first one when blank) among the
/// `baselines` editor's objects, in `namespace`.
pub fn render_wall(baselines: &str, baseline: &str, namespace: &str) -> WallView {
    let namespace = namespace.trim();
    let mut view = WallView {
        namespace: namespace.to_owned(),
        ..WallView::default()
    };
    let mut error = |field: Field, message: String| {
        view.errors.push(FieldError { field, message });
    };
    let namespace_ok = if namespace.is_empty() {
        error(Field::Namespace, "give a namespace name".to_owned());
        false
    } else if !is_dns_label(namespace) {
        error(
            Field::Namespace,
            format!(
                "{namespace:?} is not a namespace name (lowercase letters, digits and '-', at most 63 characters)"
            ),
        );
        false
    } else {
        true
    };
    let objects = match baseline_objects(baselines) {
        Ok(objects) => objects,
        Err(message) => {
            view.errors.push(FieldError {
                field: Field::Baselines,
                message,
            });
            return view;
        }
    };
    view.baselines = objects
        .iter()
        .filter_map(name_of)
        .map(str::to_owned)
        .collect();
    let wanted = baseline.trim();
    let chosen = if wanted.is_empty() {
        objects.first()
    } else {
        objects
            .iter()
            .find(|object| name_of(object) == Some(wanted))
    };
    let Some(object) = chosen else {
        let message = if objects.is_empty() {
            "no NamespaceBaseline in the list: add one to see the wall it installs".to_owned()
        } else {
            format!("no NamespaceBaseline named {wanted:?} in the list")
        };
        view.errors.push(FieldError {
            field: Field::Baseline,
            message,
        });
        return view;
    };
    let Some(name) = name_of(object) else {
        view.errors.push(FieldError {
            field: Field::Baselines,
            message: "the NamespaceBaseline has no metadata.name: the wall's names come from it"
                .to_owned(),
        });
        return view;
    };
    view.baseline = Some(name.to_owned());
    let spec = object.get("spec").cloned().unwrap_or(Value::Null);
    let spec: NamespaceBaselineSpec = match serde_json::from_value(spec) {
        Ok(spec) => spec,
        Err(error) => {
            view.errors.push(FieldError {
                field: Field::Baselines,
                message: format!("NamespaceBaseline {name:?}: spec cannot be read: {error}"),
            });
            return view;
        }
    };
    // What the reconciler checks before it writes anything.
    let selector = match spec.validate() {
        Ok(selector) => selector,
        Err(error) => {
            view.errors.push(FieldError {
                field: Field::Baselines,
                message: format!(
                    "NamespaceBaseline {name:?}: {error}. The reconciler reports this in status (Ready=False) and installs no wall"
                ),
            });
            return view;
        }
    };
    if !namespace_ok {
        return view;
    }
    let wall = desired_wall(name, namespace, &spec);
    let mut documents = Vec::new();
    for policy in &wall {
        match namespace_baseline_formats::yaml::to_string(policy) {
            Ok(yaml) => documents.push(yaml),
            Err(error) => {
                view.errors.push(FieldError {
                    field: Field::Baselines,
                    message: format!("cannot write the wall as YAML: {error}"),
                });
                return view;
            }
        }
        view.policies.extend(policy.metadata.name.clone());
    }
    view.yaml = Some(documents.join("---\n"));
    view.notes.push(format!(
        "Installed in every namespace labelled {selector}; the namespace {namespace:?} gets it once it carries that label."
    ));
    if !spec.allow_dns {
        view.notes
            .push("allowDNS is false: no DNS egress door, so pods cannot resolve names.".into());
    }
    if spec.mode == Mode::Audit {
        view.notes.push(
            "mode: Audit: the reconciler reports drift from this wall in status but writes nothing, and the policy does not guard it."
                .into(),
        );
    }
    view
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASELINES: &str = "\
apiVersion: hedronite.io/v1alpha1
kind: NamespaceBaseline
metadata: {name: guarded}
spec: {namespaceLabel: baseline=guarded}
---
apiVersion: hedronite.io/v1alpha1
kind: NamespaceBaseline
metadata: {name: quiet}
spec: {namespaceLabel: tier, allowDNS: false, mode: Audit}
";

    #[test]
    fn the_wall_is_the_reconcilers() {
        let view = render_wall(BASELINES, "", "team-a");
        assert!(view.errors.is_empty(), "{:?}", view.errors);
        assert_eq!(view.baselines, ["guarded", "quiet"]);
        assert_eq!(view.baseline.as_deref(), Some("guarded"));
        let yaml = view.yaml.unwrap();
        let documents: Vec<Value> = crate::editors::document::parse_all(&yaml).unwrap();
        let spec = NamespaceBaselineSpec::new("baseline=guarded");
        let expected: Vec<Value> = desired_wall("guarded", "team-a", &spec)
            .iter()
            .map(|policy| serde_json::to_value(policy).unwrap())
            .collect();
        assert_eq!(documents, expected);
        assert_eq!(documents[0]["kind"], "NetworkPolicy");
        assert_eq!(documents[0]["apiVersion"], "networking.k8s.io/v1");
        assert_eq!(view.policies.len(), 2);
    }

    #[test]
    fn without_dns_the_wall_is_deny_all_only() {
        let view = render_wall(BASELINES, "quiet", "team-b");
        assert_eq!(view.policies.len(), 1, "{view:?}");
        assert_eq!(view.notes.len(), 3);
        assert!(view.yaml.unwrap().contains("namespace: team-b"));
    }

    #[test]
    fn problems_name_their_field() {
        let field = |view: WallView| view.errors.first().map(|error| error.field);
        assert_eq!(
            field(render_wall(BASELINES, "", "Team_A")),
            Some(Field::Namespace)
        );
        assert_eq!(
            field(render_wall(BASELINES, "", "")),
            Some(Field::Namespace)
        );
        assert_eq!(
            field(render_wall(BASELINES, "nope", "a")),
            Some(Field::Baseline)
        );
        assert_eq!(field(render_wall("", "", "a")), Some(Field::Baseline));
        assert_eq!(field(render_wall("[", "", "a")), Some(Field::Baselines));
        let invalid = render_wall("metadata: {name: x}\nspec: {namespaceLabel: a!=b}", "", "a");
        assert!(invalid.errors[0].message.contains("'!=' is not supported"));
        assert_eq!(invalid.yaml, None);
        let no_spec = render_wall("metadata: {name: x}", "", "a");
        assert!(no_spec.errors[0].message.contains("spec cannot be read"));
    }
}
