//! The CustomResourceDefinition, generated from the Rust types (`make crd`).

use kube::CustomResourceExt;
use namespace_baseline_core::spec::NamespaceBaseline;

use crate::base::error::{Error, Result};

/// The CRD as YAML, as committed in `deploy/crd.yaml`.
pub fn yaml() -> Result<String> {
    yaml_serde::to_string(&NamespaceBaseline::crd()).map_err(Error::Yaml)
}

#[cfg(test)]
mod tests {
    use super::*;
    use namespace_baseline_core::spec::{ONE_SELECTOR_MESSAGE, ONE_SELECTOR_RULE};
    use serde_json::Value;

    const COMMITTED: &str = include_str!("../../../deploy/crd.yaml");

    #[test]
    fn the_committed_crd_is_current() {
        assert!(
            yaml().unwrap() == COMMITTED,
            "deploy/crd.yaml is stale: regenerate it with `make crd` \
             (cargo run -p namespace-baseline-reconciler --bin crdgen > deploy/crd.yaml)"
        );
    }

    /// The `format`s the API server's CRD validation knows; any other makes it warn
    /// (`unrecognized format "uint32"`) on every apply of the CRD.
    const KNOWN_FORMATS: [&str; 29] = [
        "bsonobjectid",
        "uri",
        "email",
        "hostname",
        "ipv4",
        "ipv6",
        "cidr",
        "mac",
        "uuid",
        "uuid3",
        "uuid4",
        "uuid5",
        "isbn",
        "isbn10",
        "isbn13",
        "creditcard",
        "ssn",
        "hexcolor",
        "rgbcolor",
        "byte",
        "password",
        "date",
        "duration",
        "datetime",
        "date-time",
        "int32",
        "int64",
        "float",
        "double",
    ];

    fn formats(schema: &Value, path: &str, found: &mut Vec<(String, String)>) {
        match schema {
            Value::Object(map) => {
                for (key, value) in map {
                    if key == "format" {
                        if let Some(format) = value.as_str() {
                            found.push((path.to_owned(), format.to_owned()));
                        }
                    } else {
                        formats(value, &format!("{path}.{key}"), found);
                    }
                }
            }
            Value::Array(items) => {
                for (index, item) in items.iter().enumerate() {
                    formats(item, &format!("{path}[{index}]"), found);
                }
            }
            _ => {}
        }
    }

    #[test]
    fn every_format_is_one_the_api_server_knows() {
        let mut found = Vec::new();
        formats(&schema(), "openAPIV3Schema", &mut found);
        assert!(
            !found.is_empty(),
            "the schema names formats (int32, date-time)"
        );
        let unknown: Vec<&(String, String)> = found
            .iter()
            .filter(|(_, format)| !KNOWN_FORMATS.contains(&format.as_str()))
            .collect();
        assert!(
            unknown.is_empty(),
            "formats the API server does not know (it warns on every apply): {unknown:?}"
        );
    }

    fn schema() -> Value {
        let crd = serde_json::to_value(NamespaceBaseline::crd()).unwrap();
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
    }

    #[test]
    fn the_seed_schema_holds() {
        let crd = serde_json::to_value(NamespaceBaseline::crd()).unwrap();
        assert_eq!(crd["spec"]["scope"], "Cluster");
        assert_eq!(crd["spec"]["names"]["shortNames"][0], "nsb");
        assert_eq!(
            crd["spec"]["versions"][0]["subresources"]["status"],
            serde_json::json!({})
        );
        let schema = schema();
        let spec = &schema["properties"]["spec"];
        // Exactly one of namespaceLabel and namespaceSelector, said by a validation rule.
        assert_eq!(spec["required"], Value::Null);
        assert_eq!(
            spec["x-kubernetes-validations"],
            serde_json::json!([{"rule": ONE_SELECTOR_RULE, "message": ONE_SELECTOR_MESSAGE}])
        );
        assert_eq!(spec["properties"]["namespaceLabel"]["type"], "string");
        assert_eq!(spec["properties"]["namespaceSelector"]["type"], "object");
        assert_eq!(spec["properties"]["allowDNS"]["type"], "boolean");
        assert_eq!(spec["properties"]["allowDNS"]["default"], true);
        assert_eq!(spec["properties"]["deletionPolicy"]["default"], "Orphan");
        assert_eq!(spec["properties"]["mode"]["default"], "Enforce");
        let status = &schema["properties"]["status"];
        assert_eq!(status["x-kubernetes-preserve-unknown-fields"], true);
        let conditions = &status["properties"]["conditions"];
        assert_eq!(conditions["x-kubernetes-list-type"], "map");
        assert_eq!(
            conditions["x-kubernetes-list-map-keys"],
            serde_json::json!(["type"])
        );
    }

    #[test]
    fn printer_columns_show_label_namespaces_ready_and_age() {
        let crd = serde_json::to_value(NamespaceBaseline::crd()).unwrap();
        let columns: Vec<_> = crd["spec"]["versions"][0]["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_owned())
            .collect();
        for name in ["Label", "Namespaces", "Ready", "Age"] {
            assert!(
                columns.iter().any(|c| c == name),
                "{name} missing from {columns:?}"
            );
        }
    }
}
