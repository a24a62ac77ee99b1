//! One path component of a shell glob (Kafka 3.9's `GlobComponent`): `?`, `*`, one level of
//! `{a,b}` groups and `\` escapes. `[` is an ordinary character in 3.9 (later Kafka versions
//! added classes). A component with none of these (or a malformed one) is a literal and is
//! looked up by name as written.

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Char(char),
    Any,
    Star,
}

/// A parsed glob component.
#[derive(Debug, Clone)]
pub struct GlobComponent {
    component: String,
    /// The alternatives (more than one only with `{…}` groups); `None` for a literal.
    alternatives: Option<Vec<Vec<Token>>>,
}

impl GlobComponent {
    /// Parses `component`.
    #[must_use]
    pub fn new(component: &str) -> Self {
        GlobComponent {
            component: component.to_owned(),
            alternatives: parse(component),
        }
    }

    /// Whether the component matches exactly one name: itself.
    #[must_use]
    pub fn is_literal(&self) -> bool {
        self.alternatives.is_none()
    }

    /// The component as written.
    #[must_use]
    pub fn component(&self) -> &str {
        &self.component
    }

    /// Whether `name` matches.
    #[must_use]
    pub fn matches(&self, name: &str) -> bool {
        match &self.alternatives {
            None => self.component == name,
            Some(alternatives) => {
                let chars: Vec<char> = name.chars().collect();
                alternatives
                    .iter()
                    .any(|tokens| match_tokens(tokens, &chars))
            }
        }
    }
}

/// Tokens of every alternative, or `None` for a literal or malformed glob.
fn parse(glob: &str) -> Option<Vec<Vec<Token>>> {
    let chars: Vec<char> = glob.chars().collect();
    // Each alternative built so far; a group multiplies them.
    let mut alternatives: Vec<Vec<Token>> = vec![Vec::new()];
    let mut group: Option<Vec<Vec<Token>>> = None;
    let mut literal = true;
    let mut i = 0;
    let push =
        |alternatives: &mut Vec<Vec<Token>>, group: &mut Option<Vec<Vec<Token>>>, t: Token| {
            match group {
                Some(options) => {
                    if let Some(last) = options.last_mut() {
                        last.push(t);
                    }
                }
                None => alternatives.iter_mut().for_each(|a| a.push(t.clone())),
            }
        };
    while i < chars.len() {
        let c = chars[i];
        i += 1;
        match c {
            '?' => {
                literal = false;
                push(&mut alternatives, &mut group, Token::Any);
            }
            '*' => {
                literal = false;
                push(&mut alternatives, &mut group, Token::Star);
            }
            '\\' => {
                let escaped = chars.get(i).copied().unwrap_or('\\');
                i += 1;
                push(&mut alternatives, &mut group, Token::Char(escaped));
            }
            '{' => {
                if group.is_some() {
                    return None; // nested groups: malformed
                }
                literal = false;
                group = Some(vec![Vec::new()]);
            }
            ',' if group.is_some() => {
                if let Some(options) = &mut group {
                    options.push(Vec::new());
                }
            }
            '}' if group.is_some() => {
                let options = group.take().unwrap_or_default();
                alternatives = alternatives
                    .iter()
                    .flat_map(|prefix| {
                        options.iter().map(move |o| {
                            let mut a = prefix.clone();
                            a.extend(o.iter().cloned());
                            a
                        })
                    })
                    .collect();
            }
            c => push(&mut alternatives, &mut group, Token::Char(c)),
        }
    }
    if group.is_some() || literal {
        return None;
    }
    Some(alternatives)
}

fn match_tokens(tokens: &[Token], name: &[char]) -> bool {
    match tokens.split_first() {
        None => name.is_empty(),
        Some((Token::Star, rest)) => (0..=name.len()).any(|skip| match_tokens(rest, &name[skip..])),
        Some((token, rest)) => match name.split_first() {
            None => false,
            Some((&c, name_rest)) => {
                let ok = match token {
                    Token::Char(t) => *t == c,
                    Token::Any => true,
                    Token::Star => false,
                };
                ok && match_tokens(rest, name_rest)
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_like_kafkas_glob_component() {
        for (glob, name, matches, why) in [
            ("abc", "abc", true, "literal"),
            ("a*", "abc", true, "star"),
            ("a?c", "abc", true, "any"),
            ("a?c", "ac", false, "any needs a char"),
            ("{x,ab}c", "abc", true, "group"),
            ("{x,ab}c", "yc", false, "group miss"),
            ("*[1]", "byId[1]", true, "[ is an ordinary character in 3.9"),
            ("*[1]", "byId1", false, "no character classes in 3.9"),
        ] {
            assert_eq!(GlobComponent::new(glob).matches(name), matches, "{why}");
        }
        assert!(GlobComponent::new("user(alice)").is_literal());
        assert!(GlobComponent::new("{unterminated").is_literal());
    }
}
