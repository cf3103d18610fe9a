//! What a person types into the playground's editors: JSON or YAML (one or several YAML
//! documents), read into JSON values. Every failure is a message that says where.

use namespace_baseline_formats::yaml;
use serde_json::{Map, Value};

/// One document of JSON or YAML; `Ok(None)` when the text is blank. JSON is tried first so
/// that a JSON mistake is reported as one (YAML would read most broken JSON as a string or
/// complain about something else).
pub fn parse(text: &str) -> Result<Option<Value>, String> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    let json_error = match serde_json::from_str::<Value>(text) {
        Ok(value) => return Ok(Some(value)),
        Err(error) => error,
    };
    match yaml::from_str::<Value>(text) {
        Ok(value) => Ok(Some(value)),
        Err(_) if looks_like_json(text) => Err(format!("not valid JSON: {json_error}")),
        Err(error) => Err(format!("not valid YAML: {}", yaml_message(&error))),
    }
}

/// Every document of a YAML stream (`---` separated), or the one JSON document. Blank
/// documents are skipped.
pub fn parse_all(text: &str) -> Result<Vec<Value>, String> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    if let Ok(value) = serde_json::from_str::<Value>(text) {
        return Ok(vec![value]);
    }
    yaml::documents(text).map_err(|error| match parse(text) {
        // One document that is broken JSON: say so.
        Err(message) if looks_like_json(text) => message,
        _ => format!(
            "not valid YAML (document {}): {}",
            error.index + 1,
            yaml_message(&error.error)
        ),
    })
}

/// The items of an editor: YAML documents, a JSON or YAML list, or a `List` (anything with
/// an `items` list), flattened in order. Each is then checked with [`object_item`].
pub fn items(text: &str) -> Result<Vec<Value>, String> {
    let mut items = Vec::new();
    for document in parse_all(text)? {
        match document {
            Value::Array(list) => items.extend(list),
            Value::Object(mut map) if map.get("items").is_some_and(Value::is_array) => {
                if let Some(Value::Array(list)) = map.remove("items") {
                    items.extend(list);
                }
            }
            other => items.push(other),
        }
    }
    Ok(items)
}

/// Item `index` (0-based) of [`items`] as an object, or an error naming it (1-based).
pub fn object_item(index: usize, item: &Value) -> Result<&Map<String, Value>, String> {
    item.as_object()
        .ok_or_else(|| format!("item {} is not an object but {}", index + 1, describe(item)))
}

/// What a JSON value is, for messages.
fn describe(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// A value as YAML, for the editors (examples are stored as JSON).
pub fn to_yaml(value: &Value) -> Result<String, String> {
    yaml::to_string(value).map_err(|error| format!("cannot write YAML: {error}"))
}

fn looks_like_json(text: &str) -> bool {
    let text = text.trim_start();
    // A YAML flow mapping also opens with '{', but people write JSON far more often.
    text.starts_with('{') && text.contains('"') || text.starts_with('[') && text.contains('"')
}

fn yaml_message(error: &yaml::Error) -> String {
    error.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_and_yaml_read_alike() {
        let from_json = parse(r#"{"guardSelectors": ["baseline=guarded"]}"#).unwrap();
        let from_yaml = parse("guardSelectors:\n  - baseline=guarded\n").unwrap();
        assert_eq!(from_json, from_yaml);
        assert_eq!(
            from_json,
            Some(json!({"guardSelectors": ["baseline=guarded"]}))
        );
        assert_eq!(parse("  \n").unwrap(), None);
        // YAML 1.2: `yes` is a string, as the policy-server's JSON would have it.
        assert_eq!(parse("a: yes").unwrap(), Some(json!({"a": "yes"})));
    }

    #[test]
    fn mistakes_say_where() {
        let json = parse("{\"a\": [1, 2}").unwrap_err();
        assert!(json.starts_with("not valid JSON"), "{json}");
        assert!(json.contains("line 1"), "{json}");
        let yaml = parse("a: [1, 2\nb: c").unwrap_err();
        assert!(yaml.starts_with("not valid YAML"), "{yaml}");
        let keys = parse("? [a]\n: b").unwrap_err();
        assert!(keys.starts_with("not valid YAML"), "{keys}");
    }

    #[test]
    fn streams_of_documents() {
        let text = "---\nmetadata: {name: a}\n---\n# nothing\n---\nmetadata: {name: b}\n";
        let documents = parse_all(text).unwrap();
        assert_eq!(documents.len(), 2);
        assert_eq!(documents[1]["metadata"]["name"], "b");
        assert_eq!(parse_all("[1, 2]").unwrap(), vec![json!([1, 2])]);
        assert!(
            parse_all("a: 1\n---\nb: [")
                .unwrap_err()
                .contains("document 2")
        );
        assert!(
            parse_all("[{\"a\": 1}")
                .unwrap_err()
                .starts_with("not valid JSON")
        );
    }

    #[test]
    fn yaml_round_trips_what_json_says() {
        let value = json!({"s": "yes", "n": "1.0", "t": "true", "z": null, "e": "", "x": 5});
        assert_eq!(
            parse(&to_yaml(&value).unwrap()).unwrap(),
            Some(value.clone())
        );
    }
}
