//! Parsing a config value as Kafka's `ConfigDef.parseType` does, and running its validator
//! (`Validator.ensureValid`), with Kafka's messages.

use crate::def::{ConfigDefEntry, ConfigKind, Validator};
use crate::error::ConfigException;

/// A parsed config value (Kafka's parsed `Object`).
#[derive(Debug, Clone, PartialEq)]
pub enum ConfigValue {
    /// BOOLEAN.
    Boolean(bool),
    /// STRING (trimmed).
    String(String),
    /// INT.
    Int(i32),
    /// SHORT.
    Short(i16),
    /// LONG.
    Long(i64),
    /// DOUBLE.
    Double(f64),
    /// LIST (items trimmed).
    List(Vec<String>),
    /// CLASS (the trimmed name).
    Class(String),
    /// PASSWORD (trimmed).
    Password(String),
}

impl ConfigValue {
    /// The value as a number (`Number.doubleValue()`), for range checks.
    #[must_use]
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Self::Int(v) => Some(f64::from(*v)),
            Self::Short(v) => Some(f64::from(*v)),
            // Precision loss is Kafka's too: it compares `doubleValue()`s.
            #[allow(clippy::cast_precision_loss)]
            Self::Long(v) => Some(*v as f64),
            Self::Double(v) => Some(*v),
            _ => None,
        }
    }

    /// The value as an integer, for INT, SHORT and LONG.
    #[must_use]
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Self::Int(v) => Some(i64::from(*v)),
            Self::Short(v) => Some(i64::from(*v)),
            Self::Long(v) => Some(*v),
            _ => None,
        }
    }

    /// The value as a boolean, for BOOLEAN.
    #[must_use]
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Self::Boolean(v) => Some(*v),
            _ => None,
        }
    }

    /// The value as a string, for STRING, CLASS and PASSWORD.
    #[must_use]
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::String(s) | Self::Class(s) | Self::Password(s) => Some(s),
            _ => None,
        }
    }

    /// The items of a LIST.
    #[must_use]
    pub fn as_list(&self) -> Option<&[String]> {
        match self {
            Self::List(items) => Some(items),
            _ => None,
        }
    }

    /// How Java prints the parsed object (`Object.toString()`), as in Kafka's "Invalid value …"
    /// messages about a parsed value.
    #[must_use]
    pub fn java_string(&self) -> String {
        match self {
            Self::Boolean(v) => v.to_string(),
            Self::String(s) | Self::Class(s) => s.clone(),
            Self::Password(_) => "[hidden]".to_owned(),
            Self::Int(v) => v.to_string(),
            Self::Short(v) => v.to_string(),
            Self::Long(v) => v.to_string(),
            Self::Double(v) => java_double(*v),
            Self::List(items) => format!("[{}]", items.join(", ")),
        }
    }
}

/// `Double.toString(d)`: shortest digits that read back, decimal between 10⁻³ and 10⁷,
/// computerized scientific notation (`1.0E7`) outside.
#[must_use]
pub fn java_double(d: f64) -> String {
    if d.is_nan() {
        return "NaN".to_owned();
    }
    if d.is_infinite() {
        return if d > 0.0 { "Infinity" } else { "-Infinity" }.to_owned();
    }
    if d == 0.0 {
        return if d.is_sign_negative() { "-0.0" } else { "0.0" }.to_owned();
    }
    let magnitude = d.abs();
    if (1e-3..1e7).contains(&magnitude) {
        let s = d.to_string();
        if s.contains('.') { s } else { format!("{s}.0") }
    } else {
        let s = format!("{d:e}");
        let (mantissa, exponent) = s.split_once('e').unwrap_or((s.as_str(), "0"));
        let mantissa = if mantissa.contains('.') {
            mantissa.to_owned()
        } else {
            format!("{mantissa}.0")
        };
        format!("{mantissa}E{exponent}")
    }
}

/// `Double.parseDouble` on a trimmed string: decimal with an optional exponent and an
/// optional `f`/`d` suffix, `NaN`, `Infinity`, signs. (Hex floats are not accepted.)
fn parse_java_double(s: &str) -> Option<f64> {
    let body = s.strip_suffix(['f', 'F', 'd', 'D']).unwrap_or(s);
    let unsigned = body.strip_prefix(['+', '-']).unwrap_or(body);
    if unsigned == "NaN" || unsigned == "Infinity" {
        return body.replace("Infinity", "inf").parse().ok();
    }
    // [digits][.digits][(e|E)[+|-]digits], with at least one mantissa digit.
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(i) => (&unsigned[..i], Some(&unsigned[i + 1..])),
        None => (unsigned, None),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok =
        digits(whole) && digits(fraction) && !(whole.is_empty() && fraction.is_empty());
    let exponent_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(['+', '-']).unwrap_or(e);
        !e.is_empty() && digits(e)
    });
    if !(mantissa_ok && exponent_ok) {
        return None;
    }
    body.parse().ok()
}

/// Java's `Pattern.split("\\s*,\\s*", -1)` on a trimmed, non-empty string.
fn split_list(trimmed: &str) -> Vec<String> {
    trimmed
        .split(',')
        .map(|item| item.trim().to_owned())
        .collect()
}

/// `ConfigDef.parseType(name, value, type)` for a value given as a string.
///
/// # Errors
/// Kafka's `ConfigException` message: "Invalid value {raw} for configuration {name}: Not a
/// number of type LONG", "…: Expected value to be either true or false".
pub fn parse_type(name: &str, raw: &str, kind: ConfigKind) -> Result<ConfigValue, ConfigException> {
    let trimmed = raw.trim();
    let not_a_number = || {
        ConfigException::invalid(
            name,
            raw,
            Some(&format!("Not a number of type {}", kind.java_name())),
        )
    };
    Ok(match kind {
        ConfigKind::Boolean => {
            if trimmed.eq_ignore_ascii_case("true") {
                ConfigValue::Boolean(true)
            } else if trimmed.eq_ignore_ascii_case("false") {
                ConfigValue::Boolean(false)
            } else {
                return Err(ConfigException::invalid(
                    name,
                    raw,
                    Some("Expected value to be either true or false"),
                ));
            }
        }
        ConfigKind::Password => ConfigValue::Password(trimmed.to_owned()),
        ConfigKind::String => ConfigValue::String(trimmed.to_owned()),
        ConfigKind::Int => ConfigValue::Int(trimmed.parse().map_err(|_| not_a_number())?),
        ConfigKind::Short => ConfigValue::Short(trimmed.parse().map_err(|_| not_a_number())?),
        ConfigKind::Long => ConfigValue::Long(trimmed.parse().map_err(|_| not_a_number())?),
        ConfigKind::Double => {
            ConfigValue::Double(parse_java_double(trimmed).ok_or_else(not_a_number)?)
        }
        ConfigKind::List => {
            if trimmed.is_empty() {
                ConfigValue::List(Vec::new())
            } else {
                ConfigValue::List(split_list(trimmed))
            }
        }
        ConfigKind::Class => {
            if !is_java_class_name(trimmed) {
                return Err(ConfigException::invalid(
                    name,
                    raw,
                    Some(&format!("Class {raw} could not be found.")),
                ));
            }
            ConfigValue::Class(trimmed.to_owned())
        }
    })
}

/// A syntactically valid binary class name (`a.b.C`, `a.b.C$D`). krust cannot load Java
/// classes; anything else could never be found by Kafka either.
fn is_java_class_name(s: &str) -> bool {
    !s.is_empty()
        && s.split('.').all(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .is_some_and(|c| c.is_alphabetic() || c == '_' || c == '$')
                && chars.all(|c| c.is_alphanumeric() || c == '_' || c == '$')
        })
}

impl ConfigDefEntry {
    /// Parses `raw` and runs the validator: Kafka's `parseValue` for a set key.
    ///
    /// # Errors
    /// Kafka's `ConfigException` for the first failure.
    pub fn parse(&self, raw: &str) -> Result<ConfigValue, ConfigException> {
        let value = parse_type(self.name, raw, self.kind)?;
        ensure_valid(self.name, &self.validator, &value)?;
        Ok(value)
    }

    /// The parsed default (`None` for a null default).
    #[must_use]
    pub fn default_value(&self) -> Option<ConfigValue> {
        // Kafka's defaults always parse: the generator printed them with `convertToString`.
        self.default
            .and_then(|d| parse_type(self.name, d, self.kind).ok())
    }
}

/// `Validator.ensureValid(name, value)`.
///
/// # Errors
/// Kafka's `ConfigException` message for the value.
pub fn ensure_valid(
    name: &str,
    validator: &Validator,
    value: &ConfigValue,
) -> Result<(), ConfigException> {
    match validator {
        Validator::None => Ok(()),
        Validator::Range { min, max } => {
            let Some(n) = value.as_f64() else {
                return Ok(());
            };
            let shown = value.java_string();
            if let Some(min) = min
                && n < min.value
            {
                return Err(ConfigException::invalid(
                    name,
                    &shown,
                    Some(&format!("Value must be at least {}", min.text)),
                ));
            }
            if let Some(max) = max
                && n > max.value
            {
                return Err(ConfigException::invalid(
                    name,
                    &shown,
                    Some(&format!("Value must be no more than {}", max.text)),
                ));
            }
            Ok(())
        }
        Validator::ValidString(valid) => match value.as_str() {
            Some(s) if !valid.contains(&s) => Err(ConfigException::invalid(
                name,
                s,
                Some(&format!("String must be one of: {}", valid.join(", "))),
            )),
            _ => Ok(()),
        },
        Validator::ValidList(valid) => {
            for item in value.as_list().unwrap_or_default() {
                if !valid.contains(&item.as_str()) {
                    return Err(ConfigException::invalid(
                        name,
                        item,
                        Some(&format!("String must be one of: {}", valid.join(", "))),
                    ));
                }
            }
            Ok(())
        }
        Validator::CaseInsensitiveValidString(valid) => match value.as_str() {
            Some(s) if !valid.contains(&s.to_uppercase().as_str()) => {
                Err(ConfigException::invalid(
                    name,
                    s,
                    Some(&format!(
                        "String must be one of (case insensitive): {}",
                        valid.join(", ")
                    )),
                ))
            }
            _ => Ok(()),
        },
        Validator::NonEmptyString => match value.as_str() {
            Some("") => Err(ConfigException::invalid(
                name,
                "",
                Some("String must be non-empty"),
            )),
            _ => Ok(()),
        },
        Validator::NonNull => Ok(()),
        Validator::NonEmptyStringWithoutControlChars => match value.as_str() {
            Some("") => Err(ConfigException::invalid(
                name,
                "",
                Some("String may not be empty"),
            )),
            Some(s) if s.chars().any(char::is_control) => {
                let codes: Vec<String> = s
                    .chars()
                    .filter(|c| c.is_control())
                    .map(|c| u32::from(c).to_string())
                    .collect();
                Err(ConfigException::invalid(
                    name,
                    s,
                    Some(&format!(
                        "String may not contain control sequences but had the following ASCII chars: {}",
                        codes.join(", ")
                    )),
                ))
            }
            _ => Ok(()),
        },
        Validator::ListSize(max) => match value.as_list() {
            Some(items) if items.len() > *max => Err(ConfigException::invalid(
                name,
                &value.java_string(),
                Some(&format!("exceeds maximum list size of [{max}].")),
            )),
            _ => Ok(()),
        },
        Validator::Composite(validators) => {
            for inner in *validators {
                ensure_valid(name, inner, value)?;
            }
            Ok(())
        }
        Validator::Custom { class, description } => {
            crate::custom::ensure_valid(name, class, description, value)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_double_prints_as_java_does() {
        for (d, s) in [
            (1.5, "1.5"),
            (2.0, "2.0"),
            (0.001, "0.001"),
            (1e7, "1.0E7"),
            (1.25e-4, "1.25E-4"),
            (-3.0, "-3.0"),
            (123_456.7, "123456.7"),
        ] {
            assert_eq!(java_double(d), s, "{d}");
        }
    }

    #[test]
    fn doubles_parse_as_java_parses_them() {
        for (s, d) in [
            ("1.5", Some(1.5)),
            ("2d", Some(2.0)),
            ("1e3", Some(1000.0)),
            ("-0.5f", Some(-0.5)),
            (".5", Some(0.5)),
        ] {
            assert_eq!(parse_java_double(s), d, "{s}");
        }
        for s in ["abc", "inf", "nan", "", "1.0x", "d", "1,5"] {
            assert_eq!(parse_java_double(s), None, "{s}");
        }
        assert!(parse_java_double("NaN").is_some_and(f64::is_nan));
        assert_eq!(parse_java_double("-Infinity"), Some(f64::NEG_INFINITY));
    }

    #[test]
    fn lists_split_on_commas_with_whitespace_and_keep_empty_items() {
        let parse = |s| parse_type("k", s, ConfigKind::List).ok();
        assert_eq!(parse("  "), Some(ConfigValue::List(vec![])));
        assert_eq!(
            parse(" a , b,,c, "),
            Some(ConfigValue::List(
                ["a", "b", "", "c", ""].map(str::to_owned).to_vec()
            ))
        );
    }

    #[test]
    fn parse_errors_quote_the_raw_value() {
        let e = parse_type("retention.ms", " x ", ConfigKind::Long).expect_err("not a long");
        assert_eq!(
            e.to_string(),
            "Invalid value  x  for configuration retention.ms: Not a number of type LONG"
        );
    }
}
