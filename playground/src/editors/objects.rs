//! The objects an editor holds, read and checked by kind: the NamespaceBaselines of the
//! baselines editor, and the cluster objects (Namespaces, NetworkPolicies, the DNS Service,
//! its EndpointSlices and Pods) of the objects editor, which the policy's reads and the
//! cluster view both take.

use serde_json::Value;

use super::document;

/// The kinds the objects editor takes.
pub const KINDS: [&str; 5] = [
    "Namespace",
    "NetworkPolicy",
    "Service",
    "EndpointSlice",
    "Pod",
];

/// The objects of the objects editor: YAML documents, a JSON or YAML list, or a `List`, each
/// an object with a `kind`.
pub fn cluster_objects(text: &str) -> Result<Vec<Value>, String> {
    let objects = document::items(text)?;
    for (index, object) in objects.iter().enumerate() {
        let object = document::object_item(index, object)?;
        if !object.get("kind").is_some_and(Value::is_string) {
            return Err(format!(
                "item {} has no kind: give each object its kind ({})",
                index + 1,
                KINDS.join(", ")
            ));
        }
    }
    Ok(objects)
}

/// The objects of `kind`, each with its place in the editor (1-based).
pub fn of_kind<'a>(
    objects: &'a [Value],
    kind: &'a str,
) -> impl Iterator<Item = (usize, &'a Value)> {
    objects
        .iter()
        .enumerate()
        .filter(move |(_, object)| object["kind"] == kind)
        .map(|(index, object)| (index + 1, object))
}

/// The NamespaceBaseline objects of an editor: YAML documents, a JSON or YAML list, or a
/// `NamespaceBaselineList`, each item checked to be a NamespaceBaseline.
pub fn baseline_objects(text: &str) -> Result<Vec<Value>, String> {
    let objects = document::items(text)?;
    for (index, object) in objects.iter().enumerate() {
        if let Some(kind) = document::object_item(index, object)?.get("kind")
            && kind != "NamespaceBaseline"
        {
            return Err(format!(
                "item {} is a {kind}, not a NamespaceBaseline",
                index + 1
            ));
        }
    }
    Ok(objects)
}
