//! Kubernetes manifests as objects: read from YAML files (several documents each), keyed
//! by what identifies them in a cluster, and compared field by field.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use namespace_baseline_formats::yaml;
use serde_json::Value;

/// One object read from a file.
#[derive(Debug, Clone)]
pub struct Manifest {
    pub source: PathBuf,
    pub object: Value,
}

impl Manifest {
    pub fn key(&self) -> Result<Key> {
        Key::of(&self.object).with_context(|| format!("in {}", self.source.display()))
    }
}

/// Every non-empty YAML document of `path`, as JSON (documents in order).
pub fn read(path: &Path) -> Result<Vec<Manifest>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    parse(&text, path)
}

/// The objects of [`read`], without their source: what a test applies or inspects.
pub fn read_yaml_documents(path: &Path) -> Result<Vec<Value>> {
    Ok(read(path)?
        .into_iter()
        .map(|manifest| manifest.object)
        .collect())
}

/// Every non-empty YAML document of `text`; `source` names it in messages.
pub fn parse(text: &str, source: &Path) -> Result<Vec<Manifest>> {
    let documents = yaml::documents(text).with_context(|| format!("{}", source.display()))?;
    documents
        .into_iter()
        .enumerate()
        .map(|(index, object)| {
            if !object.is_object() {
                bail!(
                    "{}: YAML document {} (of the non-empty ones) is not an object",
                    source.display(),
                    index + 1
                );
            }
            Ok(Manifest {
                source: source.to_owned(),
                object,
            })
        })
        .collect()
}

/// What identifies an object in a cluster.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key {
    pub api_version: String,
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
}

impl Key {
    pub fn of(object: &Value) -> Result<Self> {
        let text = |pointer: &str| object.pointer(pointer).and_then(Value::as_str);
        let (Some(api_version), Some(kind), Some(name)) =
            (text("/apiVersion"), text("/kind"), text("/metadata/name"))
        else {
            bail!("an object without apiVersion, kind or metadata.name: {object}");
        };
        Ok(Self {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
            namespace: text("/metadata/namespace").map(str::to_owned),
            name: name.to_owned(),
        })
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind, self.name)?;
        if let Some(namespace) = &self.namespace {
            write!(f, " (namespace {namespace})")?;
        }
        write!(f, " [{}]", self.api_version)
    }
}

/// The objects of a set of manifests by key; two objects with one key are an error.
pub fn index(manifests: &[Manifest]) -> Result<BTreeMap<Key, &Manifest>> {
    let mut objects = BTreeMap::new();
    for manifest in manifests {
        let key = manifest.key()?;
        if let Some(first) = objects.insert(key.clone(), manifest) {
            bail!(
                "{key} appears twice: in {} and {}",
                first.source.display(),
                manifest.source.display()
            );
        }
    }
    Ok(objects)
}

/// A value with the `null` members of every map removed: for the API server, a field set
/// to null and a field left out are the same thing.
pub fn normalize(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), normalize(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(normalize).collect()),
        other => other.clone(),
    }
}

/// Where two values differ, as `path: left != right` lines (at most `limit`).
pub fn differences(left: &Value, right: &Value, limit: usize) -> Vec<String> {
    let mut found = Vec::new();
    diff(
        &normalize(left),
        &normalize(right),
        String::new(),
        &mut found,
        limit,
    );
    found
}

fn diff(left: &Value, right: &Value, path: String, found: &mut Vec<String>, limit: usize) {
    if found.len() >= limit || left == right {
        return;
    }
    match (left, right) {
        (Value::Object(a), Value::Object(b)) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let here = format!("{path}.{key}");
                match (a.get(key), b.get(key)) {
                    (Some(x), Some(y)) => diff(x, y, here, found, limit),
                    (Some(x), None) => found.push(format!("{here}: {} != (absent)", short(x))),
                    (None, Some(y)) => found.push(format!("{here}: (absent) != {}", short(y))),
                    (None, None) => {}
                }
                if found.len() >= limit {
                    return;
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (index, (x, y)) in a.iter().zip(b).enumerate() {
                diff(x, y, format!("{path}[{index}]"), found, limit);
            }
        }
        _ => found.push(format!(
            "{}: {} != {}",
            if path.is_empty() { "." } else { &path },
            short(left),
            short(right)
        )),
    }
}

fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.len() > 120 {
        let mut end = 117;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}...", &text[..end])
    } else {
        text
    }
}

/// Compares two sets of manifests as objects: the same keys, each pair equal after
/// [`normalize`]. Returns one line per problem (empty: the same objects).
pub fn compare(left: &[Manifest], right: &[Manifest]) -> Result<Vec<String>> {
    let (left, right) = (index(left)?, index(right)?);
    let mut problems = Vec::new();
    for (key, manifest) in &left {
        match right.get(key) {
            None => problems.push(format!(
                "only on the left: {key} (from {})",
                manifest.source.display()
            )),
            Some(other) => {
                for line in differences(&manifest.object, &other.object, 20) {
                    problems.push(format!("{key} differs at {line}"));
                }
            }
        }
    }
    for (key, manifest) in &right {
        if !left.contains_key(key) {
            problems.push(format!(
                "only on the right: {key} (from {})",
                manifest.source.display()
            ));
        }
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifests(text: &str) -> Vec<Manifest> {
        parse(text, Path::new("test.yaml")).unwrap()
    }

    #[test]
    fn order_comments_quoting_and_nulls_do_not_matter() {
        let left = manifests(
            "# a comment\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: n}\ndata: {k: \"v\"}\n---\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: n\n  labels: null\n",
        );
        let right = manifests(
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: n}\n---\nkind: ConfigMap\napiVersion: v1\nmetadata: {namespace: n, name: a}\ndata:\n  k: v\n",
        );
        assert_eq!(compare(&left, &right).unwrap(), Vec::<String>::new());
    }

    #[test]
    fn differences_name_the_field() {
        let left = manifests(
            "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {ports: [{port: 80}]}\n",
        );
        let right = manifests(
            "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {ports: [{port: \"80\"}]}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n",
        );
        let problems = compare(&left, &right).unwrap();
        assert_eq!(problems.len(), 2, "{problems:#?}");
        assert!(
            problems[0].contains(".spec.ports[0].port: 80 != \"80\""),
            "{problems:#?}"
        );
        assert!(
            problems[1].starts_with("only on the right: Namespace x"),
            "{problems:#?}"
        );
    }

    #[test]
    fn a_key_twice_is_an_error() {
        let twice = manifests(
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: n}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: n}\n",
        );
        assert!(index(&twice).is_err());
    }
}
