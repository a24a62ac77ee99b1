//! `ssl.principal.mapping.rules` (KIP-371) as Kafka 3.9's `SslPrincipalMapper` reads and applies
//! them: a comma-separated list of `DEFAULT` (the DN unchanged) and
//! `RULE:<regex>/<replacement>/[L|U]` rules, tried in order; a rule applies when its regex
//! matches the **whole** DN, and then every match in the DN is replaced (`$n` back-references;
//! a reference to a group the regex does not have is kept as literal text, after dropping
//! trailing digits while the number is too large, as Kafka does). `L`/`U` lower- or upper-case
//! the result. No applicable rule: the connection's authentication fails.

use regex::{Captures, Regex};

/// Kafka's default rule list.
pub const SSL_PRINCIPAL_MAPPING_RULES_DEFAULT: &str = "DEFAULT";

/// What Kafka's rule grammar accepts (`SslPrincipalMapper.RULE_PATTERN`).
const RULE_PATTERN: &str = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)";

/// Why `ssl.principal.mapping.rules` cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MappingRulesError {
    /// A rule does not follow the grammar (Kafka's message).
    #[error("Invalid rule: `{rule}`, unmatched substring: `{unmatched}`")]
    InvalidRule {
        /// The rule.
        rule: String,
        /// What is left after the part that parses.
        unmatched: String,
    },
    /// A rule's regex does not compile.
    #[error("Invalid rule: `{rule}`: {reason}")]
    BadRegex {
        /// The rule.
        rule: String,
        /// The regex compiler's message.
        reason: String,
    },
}

/// The DN matched no rule (Kafka's `NoMatchingRule`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("No rules apply to {dn}, rules {rules}")]
pub struct NoMatchingRule {
    /// The certificate's DN.
    pub dn: String,
    /// The rule list.
    pub rules: String,
}

#[derive(Debug, Clone)]
enum Rule {
    Default,
    Replace {
        regex: Regex,
        whole: Regex,
        replacement: String,
        case: Case,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    Keep,
    Lower,
    Upper,
}

/// A parsed `ssl.principal.mapping.rules`.
#[derive(Debug, Clone)]
pub struct SslPrincipalMapper {
    rules: Vec<Rule>,
    source: String,
}

impl SslPrincipalMapper {
    /// Parses a rule list (`DEFAULT` when `None`).
    ///
    /// # Errors
    ///
    /// [`MappingRulesError`] for a rule that does not parse or a regex that does not compile.
    pub fn new(rules: Option<&str>) -> Result<Self, MappingRulesError> {
        let source = rules.unwrap_or(SSL_PRINCIPAL_MAPPING_RULES_DEFAULT);
        #[allow(clippy::expect_used)] // constant patterns, covered by the unit tests
        let splitter = Regex::new(&format!(r"\s*({RULE_PATTERN})\s*(,\s*|$)"))
            .expect("the rule splitter compiles");
        #[allow(clippy::expect_used)]
        let parser = Regex::new(&format!("^(?:{RULE_PATTERN})")).expect("the rule parser compiles");
        let mut parsed = Vec::new();
        for split in splitter.captures_iter(source.trim()) {
            let rule = split.get(1).map_or("", |m| m.as_str());
            let Some(caps) = parser.captures(rule) else {
                return Err(MappingRulesError::InvalidRule {
                    rule: rule.to_owned(),
                    unmatched: rule.to_owned(),
                });
            };
            let end = caps.get(0).map_or(0, |m| m.end());
            if end != rule.len() {
                return Err(MappingRulesError::InvalidRule {
                    rule: rule.to_owned(),
                    unmatched: rule.get(end..).unwrap_or_default().to_owned(),
                });
            }
            if caps.get(1).is_some() {
                parsed.push(Rule::Default);
            } else if let Some(pattern) = caps.get(2) {
                let pattern = pattern.as_str();
                let bad = |e: regex::Error| MappingRulesError::BadRegex {
                    rule: rule.to_owned(),
                    reason: e.to_string(),
                };
                let regex = Regex::new(pattern).map_err(bad)?;
                let whole = Regex::new(&format!("^(?:{pattern})$")).map_err(bad)?;
                let case = match caps.get(6).map(|m| m.as_str()) {
                    Some("L") => Case::Lower,
                    Some("U") => Case::Upper,
                    _ => Case::Keep,
                };
                parsed.push(Rule::Replace {
                    regex,
                    whole,
                    replacement: caps.get(4).map_or("", |m| m.as_str()).to_owned(),
                    case,
                });
            }
            // Anything else is an empty rule, which Kafka ignores.
        }
        Ok(SslPrincipalMapper {
            rules: parsed,
            source: source.to_owned(),
        })
    }

    /// The principal name for a certificate's DN (RFC 2253).
    ///
    /// # Errors
    ///
    /// [`NoMatchingRule`] when no rule applies.
    pub fn name(&self, dn: &str) -> Result<String, NoMatchingRule> {
        for rule in &self.rules {
            match rule {
                Rule::Default => return Ok(dn.to_owned()),
                Rule::Replace {
                    regex,
                    whole,
                    replacement,
                    case,
                } => {
                    if !whole.is_match(dn) {
                        continue;
                    }
                    let groups = regex.captures_len() - 1;
                    let mut out = String::new();
                    let mut last = 0;
                    for caps in regex.captures_iter(dn) {
                        let Some(m) = caps.get(0) else { continue };
                        out.push_str(dn.get(last..m.start()).unwrap_or_default());
                        expand(replacement, &caps, groups, &mut out);
                        last = m.end();
                    }
                    out.push_str(dn.get(last..).unwrap_or_default());
                    return Ok(match case {
                        Case::Keep => out,
                        Case::Lower => out.to_lowercase(),
                        Case::Upper => out.to_uppercase(),
                    });
                }
            }
        }
        Err(NoMatchingRule {
            dn: dn.to_owned(),
            rules: self.source.clone(),
        })
    }
}

/// Java's `Matcher.appendReplacement` after Kafka's `escapeLiteralBackReferences`: `\c` is `c`;
/// `$n` is group `n`, taking more digits while the number stays a group; a number that is no
/// group even after dropping trailing digits stays literal text.
fn expand(replacement: &str, caps: &Captures<'_>, groups: usize, out: &mut String) {
    let chars: Vec<char> = replacement.chars().collect();
    let mut i = 0;
    while let Some(&c) = chars.get(i) {
        i += 1;
        match c {
            '\\' => {
                if let Some(&next) = chars.get(i) {
                    out.push(next);
                    i += 1;
                }
            }
            '$' => {
                let digits: String = chars
                    .get(i..)
                    .unwrap_or_default()
                    .iter()
                    .take_while(|d| d.is_ascii_digit())
                    .collect();
                if digits.is_empty() {
                    out.push('$');
                    continue;
                }
                // Kafka's pre-pass: drop digits from the right while the number is too large.
                let mut wanted: usize = digits.parse().unwrap_or(usize::MAX);
                while wanted > groups && wanted >= 10 {
                    wanted /= 10;
                }
                if !digits.starts_with('0') && (groups == 0 || wanted > groups) {
                    out.push('$');
                    continue;
                }
                // Java: the first digit, then more while the number is still a group.
                let mut group = 0usize;
                let mut used = 0;
                for d in digits.chars() {
                    let value = group * 10 + d.to_digit(10).map_or(0, |v| v as usize);
                    if used > 0 && value > groups {
                        break;
                    }
                    group = value;
                    used += 1;
                }
                i += used;
                if let Some(m) = caps.get(group) {
                    out.push_str(m.as_str());
                }
            }
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(rules: &str, dn: &str) -> Result<String, NoMatchingRule> {
        SslPrincipalMapper::new(Some(rules))
            .expect("rules")
            .name(dn)
    }

    #[test]
    fn kafka_documentation_examples() {
        let rules = "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,\
                     RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,\
                     RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,\
                     DEFAULT";
        assert_eq!(
            map(
                rules,
                "CN=serviceuser,OU=ServiceUsers,O=Unknown,L=Unknown,ST=Unknown,C=Unknown"
            ),
            Ok("serviceuser".to_owned())
        );
        assert_eq!(
            map(
                rules,
                "CN=adminUser,OU=Admin,O=Unknown,L=Unknown,ST=Unknown,C=Unknown"
            ),
            Ok("adminuser@admin".to_owned())
        );
        assert_eq!(
            map(rules, "CN=Kafka-Broker.Example,O=Acme"), // `-` is outside the class
            Ok("kafka".to_owned())
        );
        assert_eq!(map(rules, "OU=nothing"), Ok("OU=nothing".to_owned()));
        assert_eq!(
            map("RULE:^CN=(.*?),OU=(.*?)$/$1@$2/U", "CN=a,OU=b"),
            Ok("A@B".to_owned())
        );
    }

    #[test]
    fn missing_groups_stay_literal_and_no_rule_is_an_error() {
        assert_eq!(
            map("RULE:^CN=(.*)$/$1$4$12/", "CN=x"),
            Ok("x$4x2".to_owned())
        );
        assert_eq!(map(r"RULE:^CN=(.*)$/\$$1/", "CN=x"), Ok("$x".to_owned()));
        let err = map("RULE:^CN=(.*)$/$1/", "OU=x").expect_err("no match");
        assert_eq!(
            err.to_string(),
            "No rules apply to OU=x, rules RULE:^CN=(.*)$/$1/"
        );
    }

    #[test]
    fn bad_rules_are_refused_with_kafkas_message() {
        let err = SslPrincipalMapper::new(Some("RULE:a/b/Lxyz")).expect_err("junk");
        assert_eq!(
            err.to_string(),
            "Invalid rule: `RULE:a/b/Lxyz`, unmatched substring: `xyz`"
        );
        let err = SslPrincipalMapper::new(Some("foo")).expect_err("junk");
        assert_eq!(
            err.to_string(),
            "Invalid rule: `foo`, unmatched substring: `foo`"
        );
        assert!(SslPrincipalMapper::new(Some("RULE:(/x/")).is_err());
        assert!(SslPrincipalMapper::new(Some(" DEFAULT , ")).is_ok());
    }
}
