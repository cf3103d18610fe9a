//! The outcome of a review: allow, allow with warnings, or deny with the message the
//! requester reads.

/// The outcome of a review. A denial carries the message shown to the requester.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    /// Allowed, with warnings for the requester (the API server returns them as `Warning`
    /// headers; kubectl prints each as `Warning: ...`).
    Warn(Vec<String>),
    Deny(String),
}

impl Verdict {
    pub fn is_allowed(&self) -> bool {
        !matches!(self, Self::Deny(_))
    }

    /// The warnings an accepted request carries.
    pub fn warnings(&self) -> &[String] {
        match self {
            Self::Warn(warnings) => warnings,
            Self::Allow | Self::Deny(_) => &[],
        }
    }
}
