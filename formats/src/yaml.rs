//! YAML, the one place the workspace reads and writes it (the `yaml_serde` crate, the YAML
//! organization's maintained continuation of `serde_yaml`). Documents are read into
//! [`serde_json::Value`]s, the form every caller works with; YAML 1.2 rules apply (`yes` is a
//! string, as the API server would read it from JSON).

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::{Deserialize, DeserializeOwned};
use serde_json::Value;

pub use yaml_serde::Error;

/// A document of a stream that is not valid YAML: which one (0-based), and why.
#[derive(Debug)]
pub struct DocumentError {
    pub index: usize,
    pub error: Error,
}

impl fmt::Display for DocumentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "YAML document {}: {}", self.index + 1, self.error)
    }
}

impl std::error::Error for DocumentError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// Every document of a YAML stream (`---` separated), in order, as JSON. Empty documents
/// (blank, comments only, `null`) are left out.
pub fn documents(text: &str) -> Result<Vec<Value>, DocumentError> {
    let mut documents = Vec::new();
    for (index, document) in yaml_serde::Deserializer::from_str(text).enumerate() {
        match Value::deserialize(document) {
            Ok(Value::Null) => {}
            Ok(value) => documents.push(value),
            Err(error) => return Err(DocumentError { index, error }),
        }
    }
    Ok(documents)
}

/// One YAML document as `T` (a stream of several is an error).
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, Error> {
    yaml_serde::from_str(text)
}

/// A value as YAML (block style, one document, no leading `---`).
pub fn to_string<T: Serialize + ?Sized>(value: &T) -> Result<String, Error> {
    yaml_serde::to_string(value)
}

/// A file that could not be read or is not valid YAML.
#[derive(Debug)]
pub enum ReadError {
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    Yaml {
        path: PathBuf,
        error: DocumentError,
    },
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io { path, error } => write!(f, "reading {}: {error}", path.display()),
            Self::Yaml { path, error } => write!(f, "{}: {error}", path.display()),
        }
    }
}

impl std::error::Error for ReadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { error, .. } => Some(error),
            Self::Yaml { error, .. } => Some(error),
        }
    }
}

/// Every document of a YAML file ([`documents`]).
pub fn read_documents(path: &Path) -> Result<Vec<Value>, ReadError> {
    let text = std::fs::read_to_string(path).map_err(|error| ReadError::Io {
        path: path.to_owned(),
        error,
    })?;
    documents(&text).map_err(|error| ReadError::Yaml {
        path: path.to_owned(),
        error,
    })
}

/// The one document of a YAML file (`metadata.yml`, `artifacthub-pkg.yml`); a file of
/// several documents is an error.
pub fn read_document(path: &Path) -> Result<Value, ReadError> {
    let mut documents = read_documents(path)?;
    match documents.len() {
        1 => Ok(documents.remove(0)),
        count => Err(ReadError::Yaml {
            path: path.to_owned(),
            error: DocumentError {
                index: count.min(1),
                error: <Error as serde::de::Error>::custom(format!(
                    "expected one YAML document, found {count}"
                )),
            },
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_stream_skips_empty_documents_and_keeps_order() {
        let text = "---\nkind: A\n---\n# only a comment\n---\nnull\n---\nkind: B\n";
        assert_eq!(
            documents(text).unwrap(),
            vec![json!({"kind": "A"}), json!({"kind": "B"})]
        );
        assert_eq!(documents("").unwrap(), Vec::<Value>::new());
    }

    #[test]
    fn a_broken_document_is_named_by_its_position() {
        let error = documents("a: 1\n---\nb: [\n").unwrap_err();
        assert_eq!(error.index, 1);
        assert!(
            error.to_string().starts_with("YAML document 2: "),
            "{error}"
        );
    }

    #[test]
    fn yaml_1_2_scalars_read_as_json_would_have_them() {
        let value: Value = from_str("a: yes\nb: 'on'\nc: 1.0\nd: ~\n").unwrap();
        assert_eq!(value, json!({"a": "yes", "b": "on", "c": 1.0, "d": null}));
        let written = to_string(&json!({"s": "yes", "n": "1.0", "x": 5})).unwrap();
        assert_eq!(
            from_str::<Value>(&written).unwrap(),
            json!({"s": "yes", "n": "1.0", "x": 5})
        );
    }

    #[test]
    fn a_file_of_one_document_or_an_error() {
        let dir = std::env::temp_dir().join(format!("nsb-formats-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let one = dir.join("one.yml");
        std::fs::write(&one, "name: x\n").unwrap();
        assert_eq!(read_document(&one).unwrap(), json!({"name": "x"}));
        let two = dir.join("two.yml");
        std::fs::write(&two, "a: 1\n---\nb: 2\n").unwrap();
        assert!(
            read_document(&two)
                .unwrap_err()
                .to_string()
                .contains("found 2")
        );
        let missing = dir.join("missing.yml");
        assert!(matches!(
            read_documents(&missing),
            Err(ReadError::Io { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
