//! A JSON value as `serde_json::Value` reads it, borrowing its strings from the payload: the
//! same documents read (any JSON within serde_json's nesting limit, numbers as `Value` holds
//! them, the last of a repeated key kept) and the same equality, for the spec of an object in
//! a request. `Value`'s own reader would add a second copy of serde_json's parser to the wasm
//! module (its `RawValue` branch reads with `from_str`) and copy every string. The rule
//! engine compares specs in this form ([`crate::network::engine::canonical_eq`]), whoever read
//! them: the policy from its payload, the reconciler from k8s-openapi's types
//! ([`Json::from_value`]).

use std::borrow::{Borrow, Cow};
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::Deref;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Number;

/// A string of the payload: borrowed unless it had escapes to undo.
#[derive(serde::Deserialize, Clone, Default)]
#[serde(transparent)]
pub struct Text<'a>(#[serde(borrow)] pub Cow<'a, str>);

impl Text<'_> {
    /// A copy that owns its text.
    pub fn into_owned(self) -> Text<'static> {
        Text(Cow::Owned(self.0.into_owned()))
    }
}

impl<'a> From<&'a str> for Text<'a> {
    fn from(text: &'a str) -> Self {
        Self(Cow::Borrowed(text))
    }
}

impl Deref for Text<'_> {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for Text<'_> {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl PartialEq for Text<'_> {
    fn eq(&self, other: &Self) -> bool {
        *self.0 == *other.0
    }
}

impl Eq for Text<'_> {}

impl PartialOrd for Text<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Text<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        (*self.0).cmp(&*other.0)
    }
}

impl fmt::Debug for Text<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Text<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) enum Json<'a> {
    #[default]
    Null,
    Bool(bool),
    Number(Number),
    String(Text<'a>),
    Array(Vec<Json<'a>>),
    Object(BTreeMap<Text<'a>, Json<'a>>),
}

/// The key serde_json's `RawValue` travels under: `Value` reads an object whose first key is
/// this as the JSON text of its string value.
const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

impl<'a> Json<'a> {
    pub fn is_null(&self) -> bool {
        matches!(self, Self::Null)
    }

    pub fn is_string(&self) -> bool {
        matches!(self, Self::String(_))
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::String(text) => Some(text),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Self::Number(number) => number.as_i64(),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&Vec<Json<'a>>> {
        match self {
            Self::Array(items) => Some(items),
            _ => None,
        }
    }

    pub fn as_object(&self) -> Option<&BTreeMap<Text<'a>, Json<'a>>> {
        match self {
            Self::Object(map) => Some(map),
            _ => None,
        }
    }

    /// A copy that owns its strings.
    pub fn into_owned(self) -> Json<'static> {
        match self {
            Self::Null => Json::Null,
            Self::Bool(value) => Json::Bool(value),
            Self::Number(number) => Json::Number(number),
            Self::String(text) => Json::String(text.into_owned()),
            Self::Array(items) => Json::Array(items.into_iter().map(Json::into_owned).collect()),
            Self::Object(map) => {
                // Inserted one by one: `collect` would add a sort and a bulk build of the map
                // to the module for this one rare path.
                let mut owned = BTreeMap::new();
                for (key, value) in map {
                    owned.insert(key.into_owned(), value.into_owned());
                }
                Json::Object(owned)
            }
        }
    }
}

impl Json<'static> {
    /// A `serde_json::Value` (a k8s-openapi object serialized, the typed request of the
    /// tests and the playground) read as the payload's JSON is.
    pub fn from_value(value: serde_json::Value) -> Self {
        Json::deserialize(value).unwrap_or_default()
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Json<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json<'de>;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("any valid JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Json<'de>, E> {
        Ok(Json::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Json<'de>, E> {
        Ok(Json::Number(value.into()))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Json<'de>, E> {
        Ok(Json::Number(value.into()))
    }

    fn visit_f64<E>(self, value: f64) -> Result<Json<'de>, E> {
        Ok(Number::from_f64(value).map_or(Json::Null, Json::Number))
    }

    fn visit_str<E>(self, value: &str) -> Result<Json<'de>, E> {
        Ok(Json::String(Text(Cow::Owned(value.to_owned()))))
    }

    fn visit_borrowed_str<E>(self, value: &'de str) -> Result<Json<'de>, E> {
        Ok(Json::String(Text(Cow::Borrowed(value))))
    }

    fn visit_string<E>(self, value: String) -> Result<Json<'de>, E> {
        Ok(Json::String(Text(Cow::Owned(value))))
    }

    fn visit_none<E>(self) -> Result<Json<'de>, E> {
        Ok(Json::Null)
    }

    fn visit_unit<E>(self) -> Result<Json<'de>, E> {
        Ok(Json::Null)
    }

    fn visit_seq<V: SeqAccess<'de>>(self, mut visitor: V) -> Result<Json<'de>, V::Error> {
        let mut items = Vec::new();
        while let Some(item) = visitor.next_element()? {
            items.push(item);
        }
        Ok(Json::Array(items))
    }

    fn visit_map<V: MapAccess<'de>>(self, mut visitor: V) -> Result<Json<'de>, V::Error> {
        let Some(first) = visitor.next_key::<Text<'de>>()? else {
            return Ok(Json::Object(BTreeMap::new()));
        };
        if *first == *RAW_VALUE_TOKEN {
            // As `Value` reads it: the string is JSON text, read on its own.
            let text: Text<'_> = visitor.next_value()?;
            return serde_json::from_slice::<Json<'_>>(text.as_bytes())
                .map(Json::into_owned)
                .map_err(de::Error::custom);
        }
        let mut map = BTreeMap::new();
        map.insert(first, visitor.next_value()?);
        while let Some((key, value)) = visitor.next_entry()? {
            map.insert(key, value);
        }
        Ok(Json::Object(map))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    /// The same text read both ways: read alike, and equal exactly when the `Value`s are.
    #[test]
    fn reads_what_value_reads_and_compares_alike() {
        let deep = |depth: usize| format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
        let texts: Vec<String> = [
            "null",
            "true",
            "0",
            "-0",
            "1.0",
            "-1",
            "18446744073709551615",
            "1e400",
            "-1e2",
            "\"a\"",
            "\"\\u00e9\\n\"",
            "\"\\ud800\"",
            "[]",
            "[1, [2, {}]]",
            "{}",
            r#"{"a": 1, "a": 2}"#,
            r#"{"a": 2}"#,
            r#"{"b": null, "a": [true]}"#,
            r#"{"$serde_json::private::RawValue": "{\"a\": 2}"}"#,
            r#"{"$serde_json::private::RawValue": "nope"}"#,
            r#"{"$serde_json::private::RawValue": 5}"#,
            r#"{"$serde_json::private::RawValue": "1", "b": 2}"#,
            r#"{"a": {"$serde_json::private::RawValue": "[1]"}}"#,
            "[1,]",
            "{\"a\" 1}",
            "01",
            "\"\u{1}\"",
            "nul",
        ]
        .into_iter()
        .map(str::to_owned)
        .chain([126, 127, 128, 129].map(deep))
        .collect();
        let read: Vec<(Option<Value>, Option<Json<'_>>)> = texts
            .iter()
            .map(|text| {
                (
                    serde_json::from_str::<Value>(text).ok(),
                    serde_json::from_slice::<Json<'_>>(text.as_bytes()).ok(),
                )
            })
            .collect();
        for (text, (value, json)) in texts.iter().zip(&read) {
            assert_eq!(value.is_some(), json.is_some(), "{text}");
        }
        for (value_a, json_a) in &read {
            for (value_b, json_b) in &read {
                if let (Some(value_a), Some(json_a), Some(value_b), Some(json_b)) =
                    (value_a, json_a, value_b, json_b)
                {
                    assert_eq!(value_a == value_b, json_a == json_b, "{value_a} {value_b}");
                }
            }
        }
        assert_eq!(
            serde_json::from_str::<Json<'_>>(r#"{"a": 1, "a": 2}"#).unwrap(),
            serde_json::from_str::<Json<'_>>(&json!({"a": 2}).to_string()).unwrap()
        );
    }
}
