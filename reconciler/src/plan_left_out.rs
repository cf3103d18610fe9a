//! `plan`'s line for the namespaces a `namespaceSelector` leaves out, so that a reviewer sees
//! what "every namespace except..." excepts in their cluster (the names come from the core's
//! selector engine, [`namespace_baseline_core::plan::left_out_names`]).

/// Namespaces listed by name before "and N more".
const LISTED: usize = 50;

/// `  leaves out N namespaces: a, b, c`, with a newline.
pub fn render(left_out: &[String]) -> String {
    let shown: Vec<&str> = left_out.iter().take(LISTED).map(String::as_str).collect();
    let more = left_out.len() - shown.len();
    format!(
        "  leaves out {} namespace{}{}{}{}\n",
        left_out.len(),
        if left_out.len() == 1 { "" } else { "s" },
        if shown.is_empty() { "" } else { ": " },
        shown.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn names(count: usize) -> Vec<String> {
        (0..count).map(|index| format!("ns-{index}")).collect()
    }

    #[rstest]
    #[case(0, "  leaves out 0 namespaces\n")]
    #[case(1, "  leaves out 1 namespace: ns-0\n")]
    #[case(2, "  leaves out 2 namespaces: ns-0, ns-1\n")]
    fn names_what_is_left_out(#[case] count: usize, #[case] expected: &str) {
        assert_eq!(render(&names(count)), expected);
    }

    #[test]
    fn counts_beyond_the_listed() {
        let line = render(&names(LISTED + 3));
        assert!(
            line.starts_with("  leaves out 53 namespaces: ns-0, "),
            "{line}"
        );
        assert!(
            line.ends_with(&format!("ns-{} and 3 more\n", LISTED - 1)),
            "{line}"
        );
    }
}
