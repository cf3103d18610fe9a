//! The one selector engine: which namespaces a baseline covers, whichever way it says so.
//! `namespaceLabel` is the short form (`key=value`: the label has that value; `key`: the
//! label exists; anything else is an error, never a different selector: reading `a!=b` as
//! "not equal" would wall in every other namespace, kube-system and cluster DNS included);
//! `namespaceSelector` is a full Kubernetes label selector (`matchLabels`, and
//! `matchExpressions` with `In`, `NotIn`, `Exists`, `DoesNotExist`). Both become the same
//! [`LabelSelector`], a list of requirements, evaluated here for the reconciler, the admission
//! policy, `plan`, the playground and the holes check alike.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as KubernetesSelector;

/// The label the API server sets on every namespace, to the namespace's name: a selector
/// "names" namespaces through it (`kubernetes.io/metadata.name NotIn [kube-system]`).
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// The namespaces Kubernetes itself runs in, which no baseline covers whatever its selector
/// says: a wall there would cut the control plane's own pods (CoreDNS, kube-proxy, the
/// network plugin) off the cluster, and their pods must never wait on an admission webhook
/// (docs/design.md, "System namespaces").
pub const SYSTEM_NAMESPACES: [&str; 3] = ["kube-system", "kube-public", "kube-node-lease"];

/// Whether `name` is one of the [`SYSTEM_NAMESPACES`].
pub fn is_system_namespace(name: &str) -> bool {
    SYSTEM_NAMESPACES.contains(&name)
}

/// Which namespaces a baseline covers: requirements that must all hold (none: every
/// namespace).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

/// One requirement on one label.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Requirement {
    key: String,
    operator: Operator,
}

/// What a requirement asks of its label, as Kubernetes' `matchExpressions` operators.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Operator {
    /// The label has one of these values (`matchLabels` and `key=value` are `In` one value).
    In(Vec<String>),
    /// The label is absent or has none of these values.
    NotIn(Vec<String>),
    Exists,
    DoesNotExist,
}

/// Why a `namespaceLabel` or a `namespaceSelector` was refused, worded for the person who
/// wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SelectorError {
    Empty,
    Whitespace,
    NotEqual,
    SetOrList,
    TooManyEquals,
    EmptyKey,
    EmptyValue {
        key: String,
    },
    InvalidKey {
        key: String,
        reason: &'static str,
    },
    InvalidValue {
        value: String,
        reason: &'static str,
    },
    /// A `matchExpressions` operator Kubernetes does not know.
    UnknownOperator {
        key: String,
        operator: String,
    },
    /// `In` or `NotIn` without values.
    NoValues {
        key: String,
        operator: String,
    },
    /// `Exists` or `DoesNotExist` with values.
    ValuesGiven {
        key: String,
        operator: String,
    },
    /// Not shaped like a label selector (read as JSON).
    NotASelector,
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
                "'!=' is not supported in namespaceLabel: it covers the namespaces that carry a label; {FORMS}, or use namespaceSelector (a Kubernetes label selector) for \"every namespace except...\""
            ),
            Self::SetOrList => write!(
                f,
                "only one label is supported (no ',', '(', ')' or set expressions); {FORMS}, or use namespaceSelector (a Kubernetes label selector) for set expressions"
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
            Self::UnknownOperator { key, operator } => write!(
                f,
                "matchExpressions: {key:?} has operator {operator:?}; the operators are In, NotIn, Exists and DoesNotExist"
            ),
            Self::NoValues { key, operator } => write!(
                f,
                "matchExpressions: {key:?} {operator} needs at least one value"
            ),
            Self::NotASelector => f.write_str(
                "not a label selector: write matchLabels {key: value} and matchExpressions [{key, operator, values}]",
            ),
            Self::ValuesGiven { key, operator } => write!(
                f,
                "matchExpressions: {key:?} {operator} takes no values (remove them, or use In or NotIn)"
            ),
        }
    }
}

impl std::error::Error for SelectorError {}

impl LabelSelector {
    /// Parses a `namespaceLabel`.
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        let (key, value) = Self::split(text)?;
        let operator = match value {
            Some(value) => Operator::In(vec![value.to_owned()]),
            None => Operator::Exists,
        };
        Ok(Self {
            requirements: vec![Requirement {
                key: key.to_owned(),
                operator,
            }],
        })
    }

    /// Checks a `namespaceLabel` as [`LabelSelector::parse`] does and returns its key and
    /// value without copying them (the admission policy checks a request without allocating;
    /// [`short_form_holds`] evaluates them).
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

    /// Reads a Kubernetes label selector (a `namespaceSelector`), checked as the API server
    /// checks one: valid keys and values, a known operator, values for `In` and `NotIn` and
    /// none for `Exists` and `DoesNotExist`.
    pub fn from_kubernetes(selector: &KubernetesSelector) -> Result<Self, SelectorError> {
        Self::from_parts(
            selector
                .match_labels
                .iter()
                .flatten()
                .map(|(key, value)| (key.as_str(), value.as_str())),
            selector
                .match_expressions
                .iter()
                .flatten()
                .map(|expression| {
                    (
                        expression.key.as_str(),
                        expression.operator.as_str(),
                        expression
                            .values
                            .iter()
                            .flatten()
                            .map(String::as_str)
                            .collect(),
                    )
                }),
        )
    }

    /// [`LabelSelector::from_kubernetes`] of a selector read by other means (the admission
    /// policy reads the host's answer as JSON): its `matchLabels` pairs, and its
    /// `matchExpressions` as key, operator and values.
    pub fn from_parts<'s>(
        match_labels: impl IntoIterator<Item = (&'s str, &'s str)>,
        match_expressions: impl IntoIterator<Item = (&'s str, &'s str, Vec<&'s str>)>,
    ) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        for (key, value) in match_labels {
            validate_key(key)?;
            check_value(value)?;
            requirements.push(Requirement {
                key: key.to_owned(),
                operator: Operator::In(vec![value.to_owned()]),
            });
        }
        for (key, operator, values) in match_expressions {
            validate_key(key)?;
            for value in &values {
                check_value(value)?;
            }
            let problem = |error: fn(String, String) -> SelectorError| {
                Err(error(key.to_owned(), operator.to_owned()))
            };
            let owned = || values.iter().map(|value| (*value).to_owned()).collect();
            let operator = match (operator, values.is_empty()) {
                ("In" | "NotIn", true) => {
                    return problem(|key, operator| SelectorError::NoValues { key, operator });
                }
                ("Exists" | "DoesNotExist", false) => {
                    return problem(|key, operator| SelectorError::ValuesGiven { key, operator });
                }
                ("In", false) => Operator::In(owned()),
                ("NotIn", false) => Operator::NotIn(owned()),
                ("Exists", true) => Operator::Exists,
                ("DoesNotExist", true) => Operator::DoesNotExist,
                _ => {
                    return problem(|key, operator| SelectorError::UnknownOperator {
                        key,
                        operator,
                    });
                }
            };
            requirements.push(Requirement {
                key: key.to_owned(),
                operator,
            });
        }
        Ok(Self { requirements })
    }

    /// The key and value (`None`: the label only has to exist) of a selector that is one
    /// `namespaceLabel` (`key=value` or `key`), `None` for any other.
    pub fn short_form(&self) -> Option<(&str, Option<&str>)> {
        match self.requirements.as_slice() {
            [requirement] => match &requirement.operator {
                Operator::In(values) if values.len() == 1 => {
                    Some((&requirement.key, Some(values[0].as_str())))
                }
                Operator::Exists => Some((&requirement.key, None)),
                _ => None,
            },
            _ => None,
        }
    }

    /// The requirements, all of which must hold.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// Whether an object whose labels `label` looks up is selected.
    pub fn matches_with<'v>(&self, label: impl Fn(&str) -> Option<&'v str>) -> bool {
        self.first_unmet(label).is_none()
    }

    /// The first requirement an object whose labels `label` looks up does not meet: the one
    /// that leaves it out (`None`: it is selected).
    pub fn first_unmet<'v>(&self, label: impl Fn(&str) -> Option<&'v str>) -> Option<&Requirement> {
        self.requirements
            .iter()
            .find(|requirement| !requirement.holds(label(&requirement.key)))
    }

    /// Whether a namespace with these labels is covered.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_with(|key| labels.get(key).map(String::as_str))
    }

    /// Whether this selector selects the namespace (a NetworkPolicy's namespace selector
    /// reaching it, say). A namespace always carries [`NAMESPACE_NAME_LABEL`] with its name,
    /// whether the cache kept the label or not.
    pub fn selects(
        &self,
        namespace: &(impl crate::vocabulary::facts::NamespaceFacts + ?Sized),
    ) -> bool {
        self.matches_with(|key| namespace_label(namespace, key))
    }

    /// Whether a baseline with this selector covers the namespace: it selects it, and it is
    /// not one of the [`SYSTEM_NAMESPACES`], which no baseline covers.
    pub fn covers(
        &self,
        namespace: &(impl crate::vocabulary::facts::NamespaceFacts + ?Sized),
    ) -> bool {
        !is_system_namespace(namespace.name()) && self.selects(namespace)
    }

    /// Whether it covers a namespace created without any label of its own (it carries only
    /// [`NAMESPACE_NAME_LABEL`], with a name no requirement lists): an "every namespace
    /// except..." selector, which covers what anyone creates unless they opt it out.
    pub fn selects_new_namespaces(&self) -> bool {
        selects_unlabelled(
            false,
            self.requirements
                .iter()
                .map(|requirement| (requirement.key.as_str(), requirement.operator.name())),
            true,
        )
    }
}

/// A namespace's label `key`, [`NAMESPACE_NAME_LABEL`] read from its name when not kept.
pub(crate) fn namespace_label<'n, N: crate::vocabulary::facts::NamespaceFacts + ?Sized>(
    namespace: &'n N,
    key: &str,
) -> Option<&'n str> {
    namespace
        .label(key)
        .or_else(|| (key == NAMESPACE_NAME_LABEL).then(|| namespace.name()))
}

impl Requirement {
    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn operator(&self) -> &Operator {
        &self.operator
    }

    /// Whether a label with this value (`None`: absent) meets the requirement.
    pub fn holds(&self, actual: Option<&str>) -> bool {
        let listed = |values: &[String], actual: &str| values.iter().any(|value| value == actual);
        match &self.operator {
            Operator::In(values) => actual.is_some_and(|actual| listed(values, actual)),
            Operator::NotIn(values) => actual.is_none_or(|actual| !listed(values, actual)),
            Operator::Exists => actual.is_some(),
            Operator::DoesNotExist => actual.is_none(),
        }
    }
}

/// Whether a label with value `actual` (`None`: absent) meets the short form's requirement
/// `key=value` (`In [value]`) or `key` (`Exists`), without building it: the admission
/// policy's settings guards are checked without allocating.
pub fn short_form_holds(value: Option<&str>, actual: Option<&str>) -> bool {
    match value {
        Some(wanted) => actual == Some(wanted),
        None => actual.is_some(),
    }
}

impl Operator {
    /// The operator's name in `matchExpressions`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::In(_) => "In",
            Self::NotIn(_) => "NotIn",
            Self::Exists => "Exists",
            Self::DoesNotExist => "DoesNotExist",
        }
    }
}

/// Whether a label selector (`matchLabels` non-empty or not, and its `matchExpressions` as
/// key and operator) selects an object that carries no label of its own: a new namespace
/// (which carries only [`NAMESPACE_NAME_LABEL`], with a name no selector lists) when
/// `namespaces`, else a new pod. Such a selector selects every namespace (or pod) anyone
/// creates, whatever it excludes: `{}`, `kubernetes.io/metadata.name Exists`, `team NotIn
/// [a]`, `opt-out DoesNotExist`. A requirement with an operator the API server does not
/// know selects nothing (it refuses such selectors).
pub(crate) fn selects_unlabelled<'a>(
    has_match_labels: bool,
    expressions: impl IntoIterator<Item = (&'a str, &'a str)>,
    namespaces: bool,
) -> bool {
    !has_match_labels
        && expressions.into_iter().all(|(key, operator)| {
            // The one label an unlabelled namespace has; its value is a name no `In` or
            // `NotIn` list of the selector names.
            let carried = namespaces && key == NAMESPACE_NAME_LABEL;
            match operator {
                "In" => false,
                "NotIn" => true,
                "Exists" => carried,
                "DoesNotExist" => !carried,
                _ => false,
            }
        })
}

/// The Kubernetes label-selector string form (`key=value`, `key in (a,b)`, `key notin
/// (a,b)`, `key`, `!key`, joined by `,`), usable in list and watch calls; a `namespaceLabel`
/// displays as written.
impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, requirement) in self.requirements.iter().enumerate() {
            if index > 0 {
                f.write_str(",")?;
            }
            write!(f, "{requirement}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = &self.key;
        match &self.operator {
            Operator::In(values) if values.len() == 1 => write!(f, "{key}={}", values[0]),
            Operator::In(values) => write!(f, "{key} in ({})", values.join(",")),
            Operator::NotIn(values) => write!(f, "{key} notin ({})", values.join(",")),
            Operator::Exists => f.write_str(key),
            Operator::DoesNotExist => write!(f, "!{key}"),
        }
    }
}

impl std::str::FromStr for LabelSelector {
    type Err = SelectorError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

fn check_value(value: &str) -> Result<(), SelectorError> {
    if is_valid_label_value(value) {
        Ok(())
    } else {
        Err(SelectorError::InvalidValue {
            value: value.to_owned(),
            reason: NAME_RULE,
        })
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

    #[test]
    fn no_baseline_covers_a_system_namespace() {
        let everything = LabelSelector::from_kubernetes(&Default::default()).unwrap();
        for name in SYSTEM_NAMESPACES {
            let namespace = meta(name);
            assert!(everything.selects(&namespace), "{name}");
            assert!(!everything.covers(&namespace), "{name}");
        }
        assert!(everything.covers(&meta("default")));
    }

    fn meta(name: &str) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        }
    }
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
        let [requirement] = selector.requirements() else {
            panic!("{text}: one requirement expected");
        };
        assert_eq!(requirement.key(), key);
        let expected = match value {
            Some(value) => Operator::In(vec![value.to_owned()]),
            None => Operator::Exists,
        };
        assert_eq!(requirement.operator(), &expected);
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

    /// A namespace as the reconciler's cache holds it.
    fn namespace(
        name: &str,
        labels: &[(&str, &str)],
    ) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(
                labels
                    .iter()
                    .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    #[rstest]
    #[case::everything(serde_json::json!({}), true)]
    #[case::match_labels(serde_json::json!({"matchLabels": {"team": "a"}}), true)]
    #[case::match_labels_other(serde_json::json!({"matchLabels": {"team": "b"}}), false)]
    #[case::by_name_label_not_cached(serde_json::json!({"matchLabels": {NAMESPACE_NAME_LABEL: "team-a"}}), true)]
    #[case::in_list(serde_json::json!({"matchExpressions": [{"key": "team", "operator": "In", "values": ["a", "b"]}]}), true)]
    #[case::not_in_list(serde_json::json!({"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]}), false)]
    #[case::not_in_absent(serde_json::json!({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["a"]}]}), true)]
    #[case::exists(serde_json::json!({"matchExpressions": [{"key": "team", "operator": "Exists"}]}), true)]
    #[case::does_not_exist(serde_json::json!({"matchExpressions": [{"key": "opt-out", "operator": "DoesNotExist"}]}), true)]
    #[case::all_must_hold(serde_json::json!({"matchLabels": {"team": "a"}, "matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}), false)]
    #[case::unknown_operator(serde_json::json!({"matchExpressions": [{"key": "team", "operator": "Gt", "values": ["1"]}]}), false)]
    fn label_selectors_select_as_the_api_server_does(
        #[case] selector: serde_json::Value,
        #[case] selected: bool,
    ) {
        let selector: KubernetesSelector = serde_json::from_value(selector).unwrap();
        let selects = LabelSelector::from_kubernetes(&selector)
            .is_ok_and(|selector| selector.selects(&namespace("team-a", &[("team", "a")])));
        assert_eq!(selects, selected);
    }

    #[rstest]
    #[case::empty(false, &[], true, true)]
    #[case::match_labels(true, &[], true, false)]
    #[case::name_exists(false, &[(NAMESPACE_NAME_LABEL, "Exists")], true, true)]
    #[case::name_exists_of_a_pod(false, &[(NAMESPACE_NAME_LABEL, "Exists")], false, false)]
    #[case::name_in(false, &[(NAMESPACE_NAME_LABEL, "In")], true, false)]
    #[case::name_not_in(false, &[(NAMESPACE_NAME_LABEL, "NotIn")], true, true)]
    #[case::name_does_not_exist(false, &[(NAMESPACE_NAME_LABEL, "DoesNotExist")], true, false)]
    #[case::opt_out_label(false, &[("opt-out", "DoesNotExist")], true, true)]
    #[case::team_not_in(false, &[("team", "NotIn")], false, true)]
    #[case::team_exists(false, &[("team", "Exists")], true, false)]
    #[case::all_must_hold(false, &[("opt-out", "DoesNotExist"), ("team", "In")], true, false)]
    #[case::unknown_operator(false, &[("team", "Matches")], true, false)]
    fn selectors_are_judged_by_what_a_new_object_meets(
        #[case] has_match_labels: bool,
        #[case] expressions: &[(&'static str, &'static str)],
        #[case] namespaces: bool,
        #[case] selects: bool,
    ) {
        assert_eq!(
            selects_unlabelled(has_match_labels, expressions.iter().copied(), namespaces),
            selects
        );
    }

    fn kubernetes(selector: serde_json::Value) -> LabelSelector {
        LabelSelector::from_kubernetes(&serde_json::from_value(selector).unwrap()).unwrap()
    }

    #[rstest]
    #[case::match_labels(serde_json::json!({"matchLabels": {"team": "a"}}), "team=a", true)]
    #[case::in_one(serde_json::json!({"matchExpressions": [{"key": "team", "operator": "In", "values": ["a"]}]}), "team=a", true)]
    #[case::in_two(serde_json::json!({"matchExpressions": [{"key": "team", "operator": "In", "values": ["a", "b"]}]}), "team in (a,b)", false)]
    #[case::not_in(serde_json::json!({"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]}), "team notin (a)", false)]
    #[case::exists(serde_json::json!({"matchExpressions": [{"key": "team", "operator": "Exists"}]}), "team", true)]
    #[case::does_not_exist(serde_json::json!({"matchExpressions": [{"key": "opt-out", "operator": "DoesNotExist"}]}), "!opt-out", false)]
    #[case::both(serde_json::json!({"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "Exists"}]}), "a=1,b", false)]
    #[case::everything(serde_json::json!({}), "", false)]
    fn a_kubernetes_selector_reads_as_its_string_form(
        #[case] selector: serde_json::Value,
        #[case] text: &str,
        #[case] short: bool,
    ) {
        let selector = kubernetes(selector);
        assert_eq!(selector.to_string(), text);
        assert_eq!(selector.short_form().is_some(), short);
    }

    #[rstest]
    #[case::opt_out(serde_json::json!({"matchExpressions": [{"key": "opt-out", "operator": "DoesNotExist"}]}), true)]
    #[case::names_excluded(serde_json::json!({"matchExpressions": [{"key": NAMESPACE_NAME_LABEL, "operator": "NotIn", "values": ["kube-system"]}]}), true)]
    #[case::everything(serde_json::json!({}), true)]
    #[case::match_labels(serde_json::json!({"matchLabels": {"team": "a"}}), false)]
    #[case::exists(serde_json::json!({"matchExpressions": [{"key": "team", "operator": "Exists"}]}), false)]
    #[case::opt_out_and_opt_in(serde_json::json!({"matchExpressions": [{"key": "opt-out", "operator": "DoesNotExist"}, {"key": "team", "operator": "In", "values": ["a"]}]}), false)]
    fn opt_out_selectors_cover_new_namespaces(
        #[case] selector: serde_json::Value,
        #[case] covers: bool,
    ) {
        assert_eq!(kubernetes(selector).selects_new_namespaces(), covers);
    }

    #[rstest]
    #[case::name_excluded("kube-system", &[], Some("kubernetes.io/metadata.name notin (kube-system,kubewarden)"))]
    #[case::opted_out("team-a", &[("opt-out", "yes")], Some("!opt-out"))]
    #[case::covered("team-a", &[("team", "a")], None)]
    fn the_first_unmet_requirement_says_why_a_namespace_is_left_out(
        #[case] name: &str,
        #[case] namespace_labels: &[(&str, &str)],
        #[case] unmet: Option<&str>,
    ) {
        let selector = kubernetes(serde_json::json!({"matchExpressions": [
            {"key": NAMESPACE_NAME_LABEL, "operator": "NotIn", "values": ["kube-system", "kubewarden"]},
            {"key": "opt-out", "operator": "DoesNotExist"},
        ]}));
        let namespace = namespace(name, namespace_labels);
        let found = selector.first_unmet(|key| namespace_label(&namespace, key));
        assert_eq!(found.map(ToString::to_string).as_deref(), unmet);
        assert_eq!(selector.selects(&namespace), unmet.is_none());
    }

    #[rstest]
    #[case::unknown_operator(serde_json::json!({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}))]
    #[case::in_without_values(serde_json::json!({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": []}]}))]
    #[case::exists_with_values(serde_json::json!({"matchExpressions": [{"key": "a", "operator": "DoesNotExist", "values": ["x"]}]}))]
    #[case::bad_key(serde_json::json!({"matchExpressions": [{"key": "a b", "operator": "Exists"}]}))]
    #[case::bad_value(serde_json::json!({"matchLabels": {"a": "x y"}}))]
    fn selectors_the_api_server_refuses_are_refused(#[case] selector: serde_json::Value) {
        let selector: KubernetesSelector = serde_json::from_value(selector).unwrap();
        assert!(LabelSelector::from_kubernetes(&selector).is_err());
    }
}
