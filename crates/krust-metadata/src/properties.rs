//! Java `.properties` text (the format of `server.properties` and `meta.properties`), parsed and
//! written the way `java.util.Properties` does it:
//!
//! * natural lines end at `\n`, `\r` or `\r\n`; a line ending in an odd number of backslashes
//!   continues on the next one, whose leading whitespace is dropped;
//! * blank lines and lines whose first non-blank character is `#` or `!` are comments (a comment
//!   line is never continued);
//! * the key ends at the first unescaped `=`, `:` or whitespace; whitespace around one optional
//!   `=`/`:` separator is skipped; the rest is the value;
//! * escapes: `\t \n \r \f`, `\uXXXX`, and `\c` → `c` for any other character.
//!
//! Differences from Java, on purpose: a malformed `\uXXXX` is an error with its line number (Java
//! throws without one), an empty key (`=value`) is an error (Java keeps the useless key `""`),
//! and input bytes are read as UTF-8 when valid, else as ISO-8859-1 (Java's `load(InputStream)`
//! always uses ISO-8859-1; the two agree on ASCII files).
//! Pure text in, text out: reading the file is the caller's job.

use thiserror::Error;

/// One `key=value` pair and where its logical line started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PropertiesEntry {
    /// The unescaped key.
    pub key: String,
    /// The unescaped value.
    pub value: String,
    /// 1-based number of the first natural line of the entry.
    pub line: usize,
}

/// A properties text that cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PropertiesError {
    /// `\u` not followed by four hex digits (Java: "Malformed \uxxxx encoding.").
    #[error("line {line}: malformed \\uxxxx encoding")]
    MalformedUnicodeEscape {
        /// 1-based line number.
        line: usize,
    },
    /// A line with a separator but no key, e.g. `=value`.
    #[error("line {line}: missing key before '{separator}'")]
    EmptyKey {
        /// 1-based line number.
        line: usize,
        /// The separator found.
        separator: char,
    },
}

impl PropertiesError {
    /// The 1-based line the error is on.
    #[must_use]
    pub fn line(&self) -> usize {
        match self {
            Self::MalformedUnicodeEscape { line } | Self::EmptyKey { line, .. } => *line,
        }
    }
}

/// Decodes file bytes: UTF-8 when valid, else ISO-8859-1 (one char per byte, as Java does).
#[must_use]
pub fn decode_text(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => text.to_owned(),
        Err(_) => bytes.iter().map(|&b| char::from(b)).collect(),
    }
}

fn is_blank(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\u{c}')
}

/// Splits `text` into natural lines (without terminators).
fn natural_lines(text: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        match rest.find(['\n', '\r']) {
            Some(i) => {
                lines.push(&rest[..i]);
                let skip = if rest[i..].starts_with("\r\n") { 2 } else { 1 };
                rest = &rest[i + skip..];
            }
            None => {
                lines.push(rest);
                rest = "";
            }
        }
    }
    lines
}

fn ends_with_odd_backslashes(line: &str) -> bool {
    line.chars().rev().take_while(|&c| c == '\\').count() % 2 == 1
}

/// Parses properties text into entries in file order (duplicates are kept; the last one wins
/// when the caller builds a map, as in Java).
///
/// # Errors
/// [`PropertiesError`] with the line number.
pub fn parse_properties(text: &str) -> Result<Vec<PropertiesEntry>, PropertiesError> {
    let lines = natural_lines(text);
    let mut entries = Vec::new();
    let mut index = 0;
    while index < lines.len() {
        let first_line = index + 1;
        let trimmed = lines[index].trim_start_matches(is_blank);
        index += 1;
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with('!') {
            continue;
        }
        // Join continuation lines into one logical line.
        let mut logical = String::from(trimmed);
        while ends_with_odd_backslashes(&logical) {
            logical.pop();
            match lines.get(index) {
                Some(next) => {
                    logical.push_str(next.trim_start_matches(is_blank));
                    index += 1;
                }
                None => break,
            }
        }
        entries.push(parse_logical_line(&logical, first_line)?);
    }
    Ok(entries)
}

fn parse_logical_line(logical: &str, line: usize) -> Result<PropertiesEntry, PropertiesError> {
    let chars: Vec<char> = logical.chars().collect();
    // Find the end of the key: the first unescaped separator or blank.
    let mut key_end = chars.len();
    let mut escaped = false;
    for (i, &c) in chars.iter().enumerate() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == '=' || c == ':' || is_blank(c) {
            key_end = i;
            break;
        }
    }
    let mut value_start = key_end;
    while value_start < chars.len() && is_blank(chars[value_start]) {
        value_start += 1;
    }
    let mut separator = None;
    if value_start < chars.len() && (chars[value_start] == '=' || chars[value_start] == ':') {
        separator = Some(chars[value_start]);
        value_start += 1;
        while value_start < chars.len() && is_blank(chars[value_start]) {
            value_start += 1;
        }
    }
    if key_end == 0
        && let Some(separator) = separator
    {
        return Err(PropertiesError::EmptyKey { line, separator });
    }
    let key = unescape(&chars[..key_end], line)?;
    let value = unescape(&chars[value_start..], line)?;
    Ok(PropertiesEntry { key, value, line })
}

fn unescape(chars: &[char], line: usize) -> Result<String, PropertiesError> {
    let mut out = String::with_capacity(chars.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        i += 1;
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(&next) = chars.get(i) else {
            // A lone trailing backslash (continuation at end of input) adds nothing.
            break;
        };
        i += 1;
        match next {
            't' => out.push('\t'),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            'f' => out.push('\u{c}'),
            'u' => {
                let hex: String = chars.get(i..i + 4).into_iter().flatten().collect();
                let code = (hex.chars().count() == 4)
                    .then(|| u32::from_str_radix(&hex, 16).ok())
                    .flatten()
                    .ok_or(PropertiesError::MalformedUnicodeEscape { line })?;
                i += 4;
                // Java keeps lone UTF-16 surrogates; Rust strings cannot hold them.
                out.push(char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER));
            }
            other => out.push(other),
        }
    }
    Ok(out)
}

/// Escapes a key or value as `Properties.store(Writer, …)` does: `\`, `=`, `:`, `#`, `!` and
/// control whitespace are escaped; spaces are escaped everywhere in a key but only at the start
/// of a value; non-ASCII characters are written as they are.
#[must_use]
pub fn escape(text: &str, is_key: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, c) in text.chars().enumerate() {
        match c {
            ' ' if i == 0 || is_key => out.push_str("\\ "),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\u{c}' => out.push_str("\\f"),
            '\\' | '=' | ':' | '#' | '!' => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// Writes properties like `Properties.store(writer, "")`: a `#` line, a `#<date>` line in
/// `java.util.Date#toString` form (UTC), then `key=value` lines in the given order.
#[must_use]
pub fn format_properties(entries: &[(&str, &str)], unix_time_secs: i64) -> String {
    let mut out = String::from("#\n#");
    out.push_str(&java_date_utc(unix_time_secs));
    out.push('\n');
    for (key, value) in entries {
        out.push_str(&escape(key, true));
        out.push('=');
        out.push_str(&escape(value, false));
        out.push('\n');
    }
    out
}

/// `java.util.Date#toString` for a UTC clock: `Sun Nov 29 14:48:06 UTC 2026`.
#[must_use]
pub fn java_date_utc(unix_time_secs: i64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = unix_time_secs.div_euclid(86_400);
    let secs = unix_time_secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{} {} {:02} {:02}:{:02}:{:02} UTC {}",
        DAYS[days.rem_euclid(7) as usize],
        MONTHS[(month - 1) as usize],
        day,
        secs / 3600,
        secs % 3600 / 60,
        secs % 60,
        year
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(text: &str) -> Vec<(String, String)> {
        parse_properties(text)
            .expect("valid properties")
            .into_iter()
            .map(|e| (e.key, e.value))
            .collect()
    }

    fn pair(k: &str, v: &str) -> (String, String) {
        (k.to_owned(), v.to_owned())
    }

    #[test]
    fn separators_and_whitespace_follow_java() {
        let cases = [
            ("a=b", pair("a", "b"), "equals"),
            ("a:b", pair("a", "b"), "colon"),
            ("a b", pair("a", "b"), "whitespace separates too"),
            (
                "  a  =  b  ",
                pair("a", "b  "),
                "leading blanks dropped, trailing kept",
            ),
            (
                "a = = b",
                pair("a", "= b"),
                "only one separator is consumed",
            ),
            ("a", pair("a", ""), "key without value"),
            ("a\t:\tb", pair("a", "b"), "tabs are blanks"),
            (
                "a=b=c",
                pair("a", "b=c"),
                "later separators belong to the value",
            ),
            (
                "key\\ with\\ spaces=v",
                pair("key with spaces", "v"),
                "escaped blanks in keys",
            ),
            ("a\\=b=c", pair("a=b", "c"), "escaped separator in key"),
        ];
        for (text, want, why) in cases {
            assert_eq!(pairs(text), vec![want], "{text:?}: {why}");
        }
    }

    #[test]
    fn comments_blank_lines_and_line_endings() {
        let text = "# comment\n! also comment\n\n   \na=1\r\nb=2\rc=3";
        assert_eq!(
            pairs(text),
            vec![pair("a", "1"), pair("b", "2"), pair("c", "3")]
        );
        let entries = parse_properties(text).expect("valid");
        assert_eq!(
            entries.iter().map(|e| e.line).collect::<Vec<_>>(),
            [5, 6, 7]
        );
    }

    #[test]
    fn continuations_drop_leading_whitespace_and_count_lines() {
        let text = "log.dirs=/a,\\\n    /b,\\\n\t/c\nnext=1\n";
        let entries = parse_properties(text).expect("valid");
        assert_eq!(entries[0].value, "/a,/b,/c");
        assert_eq!(entries[1].line, 4);
        assert_eq!(
            pairs("a=x\\\\\nb=y"),
            vec![pair("a", "x\\"), pair("b", "y")],
            "even backslashes do not continue"
        );
        assert_eq!(
            pairs("# comment \\\nb=y"),
            vec![pair("b", "y")],
            "comments are not continued"
        );
        assert_eq!(
            pairs("a=x\\"),
            vec![pair("a", "x")],
            "continuation at end of input"
        );
    }

    #[test]
    fn escapes_and_unicode() {
        assert_eq!(pairs(r"a=\t\n\r\f\\\q"), vec![pair("a", "\t\n\r\u{c}\\q")]);
        assert_eq!(pairs(r"\u0061=\u00e9\u20AC"), vec![pair("a", "é€")]);
    }

    #[test]
    fn malformed_input_reports_the_line() {
        assert_eq!(
            parse_properties("a=1\nb=\\u12g4\n"),
            Err(PropertiesError::MalformedUnicodeEscape { line: 2 })
        );
        assert_eq!(
            parse_properties("a=1\n\n=value\n"),
            Err(PropertiesError::EmptyKey {
                line: 3,
                separator: '='
            })
        );
        assert_eq!(
            parse_properties("a=\\u12").map_err(|e| e.line()),
            Err(1),
            "truncated escape"
        );
    }

    #[test]
    fn written_text_parses_back() {
        let entries = [("key with space", " lead:=#!\\"), ("node.id", "1")];
        let text = format_properties(&entries, 0);
        assert!(
            text.starts_with("#\n#Thu Jan 01 00:00:00 UTC 1970\n"),
            "{text}"
        );
        let parsed = pairs(&text);
        assert_eq!(
            parsed,
            vec![pair("key with space", " lead:=#!\\"), pair("node.id", "1")]
        );
    }

    #[test]
    fn java_date_matches_known_values() {
        assert_eq!(java_date_utc(1_795_963_686), "Sun Nov 29 14:48:06 UTC 2026");
        assert_eq!(java_date_utc(951_782_400), "Tue Feb 29 00:00:00 UTC 2000");
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// What `format_properties` writes, `parse_properties` reads back unchanged.
        #[test]
        fn written_properties_parse_back(
            entries in proptest::collection::vec(("[^\u{0}]{1,12}", "[^\u{0}]{0,12}"), 0..8),
        ) {
            let pairs: Vec<(&str, &str)> = entries.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let text = format_properties(&pairs, 0);
            let parsed: Vec<(String, String)> = parse_properties(&text)
                .expect("our own output parses")
                .into_iter()
                .map(|e| (e.key, e.value))
                .collect();
            prop_assert_eq!(parsed, entries);
        }

        /// Arbitrary text gives entries or a typed error, never a panic.
        #[test]
        fn arbitrary_text_never_panics(text in "\\PC{0,200}") {
            let _ = parse_properties(&text);
        }
    }
}
