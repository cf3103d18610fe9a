//! The command-line flags of the cluster binaries (`cluster-bench`, `soak`): `--flag value`
//! or `--flag=value`, one reader for both.

use anyhow::{Context as _, Result};

/// The arguments, read flag by flag.
pub struct Flags<I> {
    args: I,
    usage: &'static str,
}

/// One flag as given: its name, and its value when written `--flag=value`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flag {
    pub name: String,
    inline: Option<String>,
}

impl<I: Iterator<Item = String>> Flags<I> {
    /// `usage` is added to every error.
    pub fn new(args: I, usage: &'static str) -> Self {
        Self { args, usage }
    }

    /// The next flag, if any.
    pub fn next_flag(&mut self) -> Option<Flag> {
        let arg = self.args.next()?;
        Some(match arg.split_once('=') {
            Some((name, value)) => Flag {
                name: name.to_owned(),
                inline: Some(value.to_owned()),
            },
            None => Flag {
                name: arg,
                inline: None,
            },
        })
    }

    /// The value of `flag`: after its `=`, or the next argument.
    pub fn value(&mut self, flag: &Flag) -> Result<String> {
        flag.inline
            .clone()
            .or_else(|| self.args.next())
            .with_context(|| format!("{} needs a value\n{}", flag.name, self.usage))
    }

    /// Every argument left (after `--`).
    pub fn rest(&mut self) -> impl Iterator<Item = String> + '_ {
        self.args.by_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(args: &[&str]) -> Flags<std::vec::IntoIter<String>> {
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        Flags::new(args.into_iter(), "usage: x")
    }

    #[test]
    fn values_inline_or_next_and_the_rest() {
        let mut flags = flags(&["--a=1", "--b", "2", "--c", "--", "x", "y"]);
        let a = flags.next_flag().unwrap();
        assert_eq!(
            (a.name.as_str(), flags.value(&a).unwrap().as_str()),
            ("--a", "1")
        );
        let b = flags.next_flag().unwrap();
        assert_eq!(flags.value(&b).unwrap(), "2");
        assert_eq!(flags.next_flag().unwrap().name, "--c");
        assert_eq!(flags.next_flag().unwrap().name, "--");
        assert_eq!(flags.rest().collect::<Vec<_>>(), ["x", "y"]);
        assert!(flags.next_flag().is_none());
    }

    #[test]
    fn a_missing_value_is_an_error_with_the_usage() {
        let mut flags = flags(&["--out"]);
        let out = flags.next_flag().unwrap();
        let error = flags.value(&out).unwrap_err().to_string();
        assert!(
            error.contains("--out needs a value") && error.contains("usage: x"),
            "{error}"
        );
    }
}
