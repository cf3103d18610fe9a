//! The `namespaceLabel` grammar: `key=value` (the label has that value) or `key` (the label
//! exists). Anything else is an error, never a different selector: reading `a!=b` as
//! "not equal" would wall in every other namespace, kube-system and cluster DNS included.

use std::collections::BTreeMap;
use std::fmt;

/// A parsed `namespaceLabel`: which namespaces a baseline covers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LabelSelector {
    key: String,
    value: Option<String>,
}

/// Why a `namespaceLabel` was refused, worded for the person who wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SelectorError {
    Empty,
    Whitespace,
    NotEqual,
    SetOrList,
    TooManyEquals,
    EmptyKey,
    EmptyValue { key: String },
    InvalidKey { key: String, reason: &'static str },
    InvalidValue { value: String, reason: &'static str },
}

impl fmt::Display for SelectorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const FORMS: &str =
            "write it as key=value (the label has that value) or key (the label exists)";
        match self {
            Self::Empty => write!(f, "the namespace label is empty; {FORMS}"),
            Self::Whitespace => write!(
                f,
                "the namespace label contains whitespace; {FORMS}, without spaces"
            ),
            Self::NotEqual => write!(
                f,
                "'!=' is not supported: a baseline covers the namespaces that carry a label, never all the others; {FORMS}"
            ),
            Self::SetOrList => write!(
                f,
                "only one label is supported (no ',', '(', ')' or set expressions); {FORMS}"
            ),
            Self::TooManyEquals => write!(f, "the namespace label has more than one '='; {FORMS}"),
            Self::EmptyKey => write!(f, "the namespace label has no key before '='; {FORMS}"),
            Self::EmptyValue { key } => write!(
                f,
                "the namespace label has nothing after '='; write {key}=<value>, or {key} alone to match any value"
            ),
            Self::InvalidKey { key, reason } => write!(f, "invalid label key {key:?}: {reason}"),
            Self::InvalidValue { value, reason } => {
                write!(f, "invalid label value {value:?}: {reason}")
            }
        }
    }
}

impl std::error::Error for SelectorError {}

impl LabelSelector {
    /// Parses a `namespaceLabel`.
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        let (key, value) = Self::split(text)?;
        Ok(Self {
            key: key.to_owned(),
            value: value.map(str::to_owned),
        })
    }

    /// Checks a `namespaceLabel` as [`LabelSelector::parse`] does and returns its key and
    /// value without copying them (the admission policy checks a request without allocating).
    pub fn split(text: &str) -> Result<(&str, Option<&str>), SelectorError> {
        if text.is_empty() {
            return Err(SelectorError::Empty);
        }
        if text.chars().any(char::is_whitespace) {
            return Err(SelectorError::Whitespace);
        }
        if text.contains("!=") {
            return Err(SelectorError::NotEqual);
        }
        if text.contains([',', '(', ')', '!']) {
            return Err(SelectorError::SetOrList);
        }
        let mut parts = text.split('=');
        let key = parts.next().unwrap_or_default();
        let value = parts.next();
        if parts.next().is_some() {
            return Err(SelectorError::TooManyEquals);
        }
        if key.is_empty() {
            return Err(SelectorError::EmptyKey);
        }
        validate_key(key)?;
        let value = match value {
            None => None,
            Some("") => {
                return Err(SelectorError::EmptyValue {
                    key: key.to_owned(),
                });
            }
            Some(value) => {
                if let Err(reason) = check_name_part(value) {
                    return Err(SelectorError::InvalidValue {
                        value: value.to_owned(),
                        reason,
                    });
                }
                Some(value)
            }
        };
        Ok((key, value))
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    /// The required value, or `None` when the label only has to exist.
    pub fn value(&self) -> Option<&str> {
        self.value.as_deref()
    }

    /// Whether a namespace with these labels is covered.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_value(labels.get(&self.key).map(String::as_str))
    }

    /// Whether this namespace is covered.
    pub fn selects(&self, namespace: &(impl crate::plan::NamespaceFacts + ?Sized)) -> bool {
        self.matches_value(namespace.label(&self.key))
    }

    /// Whether a namespace whose label [`Self::key`] has this value (`None`: absent) is
    /// covered.
    fn matches_value(&self, actual: Option<&str>) -> bool {
        match (&self.value, actual) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some(wanted), Some(actual)) => wanted == actual,
        }
    }
}

/// The Kubernetes label-selector form (`key=value` or `key`), usable in list and watch calls.
impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.value {
            Some(value) => write!(f, "{}={value}", self.key),
            None => f.write_str(&self.key),
        }
    }
}

impl std::str::FromStr for LabelSelector {
    type Err = SelectorError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

/// Whether `key` is a valid label key (`[prefix/]name`).
pub fn is_valid_label_key(key: &str) -> bool {
    validate_key(key).is_ok()
}

fn validate_key(key: &str) -> Result<(), SelectorError> {
    let invalid = |reason| SelectorError::InvalidKey {
        key: key.to_owned(),
        reason,
    };
    let name = match key.split_once('/') {
        Some((prefix, name)) => {
            if prefix.is_empty() {
                return Err(invalid("the prefix before '/' is empty"));
            }
            if prefix.len() > 253 {
                return Err(invalid(
                    "the prefix before '/' is longer than 253 characters",
                ));
            }
            if !is_valid_subdomain(prefix) {
                return Err(invalid(
                    "the prefix before '/' must be a DNS subdomain: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit",
                ));
            }
            name
        }
        None => key,
    };
    if name.contains('/') {
        return Err(invalid("a key has at most one '/'"));
    }
    if name.is_empty() {
        return Err(invalid("the name after '/' is empty"));
    }
    check_name_part(name).map_err(invalid)
}

const NAME_RULE: &str = "at most 63 characters: letters, digits, '-', '_' and '.', starting and ending with a letter or digit";

/// A label name (the part of a key after any prefix) or a non-empty label value.
fn check_name_part(text: &str) -> Result<(), &'static str> {
    let bytes = text.as_bytes();
    let valid = !bytes.is_empty()
        && bytes.len() <= 63
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if valid { Ok(()) } else { Err(NAME_RULE) }
}

/// Whether `text` is a valid label value (empty is valid in Kubernetes).
pub fn is_valid_label_value(text: &str) -> bool {
    text.is_empty() || check_name_part(text).is_ok()
}

/// Whether `text` is a DNS-1123 subdomain, the syntax of object names and key prefixes.
pub fn is_valid_subdomain(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 253
        && text.split('.').all(|part| {
            let bytes = part.as_bytes();
            !bytes.is_empty()
                && bytes[0].is_ascii_alphanumeric()
                && bytes[bytes.len() - 1].is_ascii_alphanumeric()
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[rstest]
    #[case("baseline=guarded", "baseline", Some("guarded"))]
    #[case("baseline", "baseline", None)]
    #[case("hedronite.io/tier=a.b_c-1", "hedronite.io/tier", Some("a.b_c-1"))]
    #[case("example.com/guarded", "example.com/guarded", None)]
    #[case("A=B", "A", Some("B"))]
    fn accepts_the_two_forms(#[case] text: &str, #[case] key: &str, #[case] value: Option<&str>) {
        let selector = LabelSelector::parse(text).unwrap();
        assert_eq!(selector.key(), key);
        assert_eq!(selector.value(), value);
        assert_eq!(selector.to_string(), text);
    }

    #[rstest]
    #[case("", SelectorError::Empty)]
    #[case("=guarded", SelectorError::EmptyKey)]
    #[case("baseline=", SelectorError::EmptyValue { key: "baseline".into() })]
    #[case("a=b=c", SelectorError::TooManyEquals)]
    #[case("a==b", SelectorError::TooManyEquals)]
    #[case("baseline!=guarded", SelectorError::NotEqual)]
    #[case("!baseline", SelectorError::SetOrList)]
    #[case("a=b,c=d", SelectorError::SetOrList)]
    #[case("tier in (a,b)", SelectorError::Whitespace)]
    #[case("tier notin(a)", SelectorError::Whitespace)]
    #[case(" baseline=guarded", SelectorError::Whitespace)]
    #[case("baseline=guarded\n", SelectorError::Whitespace)]
    #[case("base line=x", SelectorError::Whitespace)]
    #[case("baseline=gu\tarded", SelectorError::Whitespace)]
    fn refuses_what_is_not_one_label(#[case] text: &str, #[case] expected: SelectorError) {
        assert_eq!(LabelSelector::parse(text), Err(expected));
    }

    #[rstest]
    #[case("-baseline=x")]
    #[case("baseline-=x")]
    #[case("a/b/c=x")]
    #[case("/b=x")]
    #[case("a/=x")]
    #[case("Example.com/b=x")]
    #[case("exa_mple.com/b=x")]
    #[case("ba$eline=x")]
    #[case("bäseline=x")]
    fn refuses_invalid_keys(#[case] text: &str) {
        assert!(
            matches!(
                LabelSelector::parse(text),
                Err(SelectorError::InvalidKey { .. })
            ),
            "{text}"
        );
    }

    #[rstest]
    #[case("a=-x")]
    #[case("a=x-")]
    #[case("a=x/y")]
    #[case("a=gärded")]
    fn refuses_invalid_values(#[case] text: &str) {
        assert!(
            matches!(
                LabelSelector::parse(text),
                Err(SelectorError::InvalidValue { .. })
            ),
            "{text}"
        );
    }

    #[test]
    fn enforces_length_limits() {
        let name63 = "k".repeat(63);
        assert!(LabelSelector::parse(&name63).is_ok());
        assert!(LabelSelector::parse(&"k".repeat(64)).is_err());
        assert!(LabelSelector::parse(&format!("a={}", "v".repeat(64))).is_err());
        let prefix = format!("{}.io/x", "p".repeat(251));
        assert!(LabelSelector::parse(&prefix).is_err());
    }

    #[rstest]
    #[case("baseline=guarded", &[("baseline", "guarded")], true)]
    #[case("baseline=guarded", &[("baseline", "open")], false)]
    #[case("baseline=guarded", &[], false)]
    #[case("baseline", &[("baseline", "")], true)]
    #[case("baseline", &[("baseline", "anything")], true)]
    #[case("baseline", &[("other", "guarded")], false)]
    fn matches_labels(
        #[case] text: &str,
        #[case] namespace: &[(&str, &str)],
        #[case] expected: bool,
    ) {
        let selector = LabelSelector::parse(text).unwrap();
        assert_eq!(selector.matches(&labels(namespace)), expected);
    }

    #[test]
    fn every_error_tells_how_to_write_it() {
        for text in ["", "a!=b", "a=b=c", "=x", "a b"] {
            let message = LabelSelector::parse(text).unwrap_err().to_string();
            assert!(message.contains("key=value"), "{text}: {message}");
        }
        let message = LabelSelector::parse("tier=").unwrap_err().to_string();
        assert!(message.contains("tier=<value>"), "{message}");
    }
}
