//! The `holes` setting: what the policy does with a NetworkPolicy that opens a walled
//! namespace to the world or the whole cluster. Its own file, below the settings and the
//! payload's borrowed shape, which both read it.

/// What the policy does with a NetworkPolicy that opens a `World` or `Cluster` hole (see
/// [`crate::network::hole::Width::is_breach`]) in a walled namespace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum HolesSetting {
    /// Accept it with an admission warning (kubectl prints it).
    #[default]
    Warn,
    /// Reject it, naming the rule and what to write instead.
    Deny,
    /// Accept it silently; the namespace is never read.
    Ignore,
}

impl HolesSetting {
    pub const ALL: [Self; 3] = [Self::Warn, Self::Deny, Self::Ignore];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Warn => "Warn",
            Self::Deny => "Deny",
            Self::Ignore => "Ignore",
        }
    }

    /// The setting as written; the names are case-sensitive, as Kubernetes enums are.
    pub fn parse(text: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|setting| setting.as_str() == text)
            .ok_or_else(|| {
                let hint = Self::ALL
                    .into_iter()
                    .find(|setting| setting.as_str().eq_ignore_ascii_case(text.trim()))
                    .map(|setting| format!(" (did you mean {}?)", setting.as_str()))
                    .unwrap_or_default();
                format!(
                    "holes {text:?} is not a choice: write Warn (accept with a warning), Deny or Ignore{hint}"
                )
            })
    }

    /// The setting named `text`, or the default for a name `validate` refuses.
    pub(crate) fn named(text: &str) -> Self {
        Self::ALL
            .into_iter()
            .find(|setting| setting.as_str() == text)
            .unwrap_or_default()
    }
}
