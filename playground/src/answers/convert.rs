//! An example as stored (JSON) written as YAML for an editor.

use serde::Serialize;

use crate::editors::document;
use crate::editors::field::{Field, FieldError};

/// JSON (an example as stored) written as YAML for an editor; blank stays blank.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Converted {
    pub text: Option<String>,
    pub errors: Vec<FieldError>,
}

pub fn to_yaml(text: &str) -> Converted {
    let converted = document::parse(text).and_then(|value| match value {
        None => Ok(String::new()),
        Some(value) => document::to_yaml(&value),
    });
    match converted {
        Ok(text) => Converted {
            text: Some(text),
            errors: Vec::new(),
        },
        Err(message) => Converted {
            text: None,
            errors: vec![FieldError {
                field: Field::Document,
                message,
            }],
        },
    }
}
