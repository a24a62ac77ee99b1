//! A tiny JSON writer that keeps the caller's key order (Kafka's order, see [`super::order`]),
//! and typed readers that turn a missing or mistyped field into a [`ZNodeError`] naming the
//! znode.

use serde_json::{Map, Value};

use super::ZNodeError;

/// A JSON object written in the order fields are added, compact like Jackson (`{"a":1,"b":[2]}`).
#[derive(Debug, Default)]
pub(crate) struct JsonObject {
    out: String,
}

impl JsonObject {
    pub(crate) fn new() -> Self {
        Self {
            out: String::from("{"),
        }
    }

    fn key(&mut self, key: &str) {
        if self.out.len() > 1 {
            self.out.push(',');
        }
        self.out.push_str(&string(key));
        self.out.push(':');
    }

    /// Adds `key` with a raw JSON value.
    pub(crate) fn raw(&mut self, key: &str, json: &str) -> &mut Self {
        self.key(key);
        self.out.push_str(json);
        self
    }

    pub(crate) fn str(&mut self, key: &str, value: &str) -> &mut Self {
        let s = string(value);
        self.raw(key, &s)
    }

    pub(crate) fn int(&mut self, key: &str, value: i64) -> &mut Self {
        let s = value.to_string();
        self.raw(key, &s)
    }

    pub(crate) fn ints(&mut self, key: &str, values: &[i32]) -> &mut Self {
        let s = int_array(values);
        self.raw(key, &s)
    }

    pub(crate) fn finish(&mut self) -> String {
        let mut out = std::mem::take(&mut self.out);
        out.push('}');
        out
    }
}

/// A JSON string literal (escaped as Jackson escapes: quotes, backslashes, control characters).
pub(crate) fn string(s: &str) -> String {
    // serde_json escapes exactly `"`, `\` and control characters, leaving other UTF-8 as is.
    serde_json::to_string(s).unwrap_or_else(|_| String::from("\"\""))
}

/// `[1,2,3]`.
pub(crate) fn int_array(values: &[i32]) -> String {
    let inner: Vec<String> = values.iter().map(i32::to_string).collect();
    format!("[{}]", inner.join(","))
}

/// Parses `bytes` as a JSON object.
pub(crate) fn parse_object(path: &str, bytes: &[u8]) -> Result<Map<String, Value>, ZNodeError> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| ZNodeError::Json {
        path: path.to_owned(),
        message: e.to_string(),
    })?;
    match value {
        Value::Object(map) => Ok(map),
        _ => Err(ZNodeError::NotAnObject {
            path: path.to_owned(),
        }),
    }
}

/// Field readers over one parsed object, each error naming the znode and the field.
pub(crate) struct Fields<'a> {
    pub(crate) path: &'a str,
    pub(crate) map: &'a Map<String, Value>,
}

impl<'a> Fields<'a> {
    pub(crate) fn new(path: &'a str, map: &'a Map<String, Value>) -> Self {
        Self { path, map }
    }

    pub(crate) fn error(&self, field: &str, expected: &'static str) -> ZNodeError {
        ZNodeError::Field {
            path: self.path.to_owned(),
            field: field.to_owned(),
            expected,
        }
    }

    pub(crate) fn get(&self, field: &str) -> Option<&'a Value> {
        self.map.get(field).filter(|v| !v.is_null())
    }

    pub(crate) fn required(
        &self,
        field: &str,
        expected: &'static str,
    ) -> Result<&'a Value, ZNodeError> {
        self.get(field).ok_or_else(|| self.error(field, expected))
    }

    pub(crate) fn i64(&self, field: &str) -> Result<i64, ZNodeError> {
        self.required(field, "an integer")?
            .as_i64()
            .ok_or_else(|| self.error(field, "an integer"))
    }

    pub(crate) fn i32(&self, field: &str) -> Result<i32, ZNodeError> {
        i32::try_from(self.i64(field)?).map_err(|_| self.error(field, "a 32-bit integer"))
    }

    pub(crate) fn opt_i32(&self, field: &str) -> Result<Option<i32>, ZNodeError> {
        match self.get(field) {
            None => Ok(None),
            Some(_) => self.i32(field).map(Some),
        }
    }

    pub(crate) fn str(&self, field: &str) -> Result<&'a str, ZNodeError> {
        self.required(field, "a string")?
            .as_str()
            .ok_or_else(|| self.error(field, "a string"))
    }

    pub(crate) fn opt_str(&self, field: &str) -> Result<Option<&'a str>, ZNodeError> {
        match self.get(field) {
            None => Ok(None),
            Some(_) => self.str(field).map(Some),
        }
    }

    /// A long written either as a number or as a decimal string (Kafka writes several longs as
    /// strings, e.g. `"timestamp"` and `"block_start"`).
    pub(crate) fn long_or_string(&self, field: &str) -> Result<i64, ZNodeError> {
        match self.required(field, "a long")? {
            Value::String(s) => s.parse().map_err(|_| self.error(field, "a long")),
            v => v.as_i64().ok_or_else(|| self.error(field, "a long")),
        }
    }

    pub(crate) fn int_list(&self, field: &str, value: &Value) -> Result<Vec<i32>, ZNodeError> {
        let items = value
            .as_array()
            .ok_or_else(|| self.error(field, "an array of integers"))?;
        items
            .iter()
            .map(|v| {
                v.as_i64()
                    .and_then(|n| i32::try_from(n).ok())
                    .ok_or_else(|| self.error(field, "an array of integers"))
            })
            .collect()
    }

    pub(crate) fn object(&self, field: &str) -> Result<Option<&'a Map<String, Value>>, ZNodeError> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::Object(m)) => Ok(Some(m)),
            Some(_) => Err(self.error(field, "an object")),
        }
    }

    /// The `version` field as an integer (Kafka accepts it written as a number).
    pub(crate) fn version(&self) -> Result<i64, ZNodeError> {
        self.i64("version")
    }
}
