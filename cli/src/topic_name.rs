//! Topic name arguments (spec `zper.md` §3: 1-64 ASCII letters or digits), checked by clap
//! before anything is sent.

/// Parses a topic name argument: 1-64 ASCII letters or digits (spec `zper.md` §3), so a bad
/// name is refused before anything is sent, with the rule and a name that would do.
///
/// Errors: the name breaks the rule (the message names the first bad byte).
pub fn topic_name(s: &str) -> Result<String, String> {
    zper_wire::validate_topic(s.as_bytes()).map_err(|e| {
        let fixed: String = s
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .take(64)
            .collect();
        let hint = if fixed.is_empty() {
            String::new()
        } else {
            format!(", e.g. {fixed}")
        };
        format!("{e}: a topic name is 1-64 ASCII letters or digits{hint}")
    })?;
    Ok(s.to_owned())
}

#[cfg(test)]
mod tests {
    use super::topic_name;

    #[test]
    fn a_topic_name_outside_the_rule_is_refused_with_a_name_that_would_do() {
        assert_eq!(topic_name("orders2").expect("test value"), "orders2");
        let e = topic_name("my-topic").expect_err("an error");
        assert!(e.contains("0x2d") && e.contains("e.g. mytopic"), "{e}");
        assert!(topic_name("").is_err());
        assert!(topic_name(&"a".repeat(65))
            .expect_err("an error")
            .contains("e.g. "));
    }
}
