//! The `quorum-state` file (Kafka's `QuorumStateData`, data_version 0 and 1).
//!
//! It lives at `<metadata.log.dir>/__cluster_metadata-0/quorum-state` and holds one line of JSON.
//! The core hands a [`QuorumStateData`] to the driver in `Action::PersistQuorumState`; the driver
//! encodes it with [`QuorumStateData::to_json`], writes `quorum-state.tmp`, **fsyncs it, renames it
//! over `quorum-state` and fsyncs the directory** before it executes any later action: a vote must be
//! durable before the VoteResponse that grants it leaves, or a crash could let this node vote twice
//! in one epoch.
//!
//! Parsing takes bytes from disk and therefore never panics: every defect is a [`QuorumStateError`].

use uuid::Uuid;

use crate::types::{LeaderEpoch, NodeId};

/// Largest `quorum-state` file we agree to parse (Kafka's is well under 1 KiB).
pub const MAX_QUORUM_STATE_BYTES: usize = 64 * 1024;
/// Deepest JSON nesting allowed (the schema needs 3: object → array → object).
const MAX_DEPTH: usize = 4;

/// The persisted election (`ElectionState` in Kafka).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuorumStateData {
    /// The quorum epoch.
    pub leader_epoch: LeaderEpoch,
    /// The leader of `leader_epoch`, if known.
    pub leader_id: Option<NodeId>,
    /// Who this node voted for in `leader_epoch`, if anyone.
    pub voted_id: Option<NodeId>,
    /// Directory id of the voted candidate (v1; the zero UUID when unknown).
    pub voted_directory_id: Uuid,
    /// Static voter ids (v0 `currentVoters`; `None` = JSON null or absent).
    pub current_voters: Option<Vec<NodeId>>,
    /// `data_version` to write: 0 for kraft.version 0, 1 for kraft.version 1.
    pub data_version: i16,
}

impl QuorumStateData {
    /// The state of a node that never persisted anything: epoch 0, no leader, no vote.
    #[must_use]
    pub fn empty() -> Self {
        Self {
            leader_epoch: LeaderEpoch(0),
            leader_id: None,
            voted_id: None,
            voted_directory_id: Uuid::nil(),
            current_voters: None,
            data_version: 0,
        }
    }

    /// Encodes one line of JSON exactly as Kafka 3.9 lays it out (no trailing newline).
    #[must_use]
    pub fn to_json(&self) -> String {
        let leader = self.leader_id.map_or(-1, |n| n.0);
        let voted = self.voted_id.map_or(-1, |n| n.0);
        if self.data_version >= 1 {
            format!(
                "{{\"leaderId\":{leader},\"leaderEpoch\":{},\"votedId\":{voted},\"votedDirectoryId\":\"{}\",\"data_version\":1}}",
                self.leader_epoch.0,
                uuid_to_kafka_base64(self.voted_directory_id)
            )
        } else {
            let voters = match &self.current_voters {
                None => "null".to_string(),
                Some(ids) => {
                    let items: Vec<String> = ids
                        .iter()
                        .map(|id| format!("{{\"voterId\":{}}}", id.0))
                        .collect();
                    format!("[{}]", items.join(","))
                }
            };
            format!(
                "{{\"clusterId\":\"\",\"leaderId\":{leader},\"leaderEpoch\":{},\"votedId\":{voted},\"appliedOffset\":0,\"currentVoters\":{voters},\"data_version\":0}}",
                self.leader_epoch.0
            )
        }
    }

    /// Parses the file's bytes.
    ///
    /// # Errors
    /// A [`QuorumStateError`] naming the defect: bad UTF-8 or JSON, missing or mistyped keys,
    /// an unsupported `data_version`, or out-of-range numbers.
    pub fn from_json(bytes: &[u8]) -> Result<Self, QuorumStateError> {
        if bytes.len() > MAX_QUORUM_STATE_BYTES {
            return Err(QuorumStateError::TooLarge {
                len: bytes.len(),
                max: MAX_QUORUM_STATE_BYTES,
            });
        }
        let text = std::str::from_utf8(bytes).map_err(|e| QuorumStateError::NotUtf8 {
            position: e.valid_up_to(),
        })?;
        let mut parser = Parser {
            text: text.as_bytes(),
            pos: 0,
        };
        let value = parser.value(0)?;
        parser.skip_ws();
        if parser.pos != parser.text.len() {
            return Err(QuorumStateError::Syntax {
                position: parser.pos,
                expected: "end of input",
            });
        }
        let Json::Object(fields) = value else {
            return Err(QuorumStateError::WrongType {
                key: "<root>",
                expected: "object",
            });
        };
        let get = |key: &'static str| fields.iter().find(|(k, _)| k == key).map(|(_, v)| v);
        let int = |key: &'static str| -> Result<i64, QuorumStateError> {
            match get(key) {
                None => Err(QuorumStateError::MissingKey { key }),
                Some(Json::Int(n)) => Ok(*n),
                Some(_) => Err(QuorumStateError::WrongType {
                    key,
                    expected: "integer",
                }),
            }
        };
        let int32 = |key: &'static str| -> Result<i32, QuorumStateError> {
            let n = int(key)?;
            i32::try_from(n).map_err(|_| QuorumStateError::OutOfRange { key, value: n })
        };
        let data_version = int("data_version")?;
        if !(0..=1).contains(&data_version) {
            return Err(QuorumStateError::UnsupportedVersion {
                version: data_version,
            });
        }
        let leader_epoch = int32("leaderEpoch")?;
        if leader_epoch < 0 {
            return Err(QuorumStateError::OutOfRange {
                key: "leaderEpoch",
                value: i64::from(leader_epoch),
            });
        }
        let optional_id = |key: &'static str| -> Result<Option<NodeId>, QuorumStateError> {
            match int32(key)? {
                -1 => Ok(None),
                n if n >= 0 => Ok(Some(NodeId(n))),
                n => Err(QuorumStateError::OutOfRange {
                    key,
                    value: i64::from(n),
                }),
            }
        };
        let leader_id = optional_id("leaderId")?;
        let voted_id = optional_id("votedId")?;
        let voted_directory_id = match (data_version, get("votedDirectoryId")) {
            (0, _) | (_, None) => Uuid::nil(),
            (_, Some(Json::Str(s))) => {
                uuid_from_kafka_base64(s).ok_or_else(|| QuorumStateError::BadUuid {
                    key: "votedDirectoryId",
                    value: s.clone(),
                })?
            }
            (_, Some(_)) => {
                return Err(QuorumStateError::WrongType {
                    key: "votedDirectoryId",
                    expected: "string",
                });
            }
        };
        let current_voters = match get("currentVoters") {
            None | Some(Json::Null) => None,
            Some(Json::Array(items)) => {
                let mut ids = Vec::with_capacity(items.len());
                for item in items {
                    let Json::Object(voter) = item else {
                        return Err(QuorumStateError::WrongType {
                            key: "currentVoters",
                            expected: "array of objects",
                        });
                    };
                    match voter.iter().find(|(k, _)| k == "voterId").map(|(_, v)| v) {
                        Some(Json::Int(n)) => {
                            let id = i32::try_from(*n).ok().filter(|id| *id >= 0).ok_or(
                                QuorumStateError::OutOfRange {
                                    key: "voterId",
                                    value: *n,
                                },
                            )?;
                            ids.push(NodeId(id));
                        }
                        Some(_) => {
                            return Err(QuorumStateError::WrongType {
                                key: "voterId",
                                expected: "integer",
                            });
                        }
                        None => return Err(QuorumStateError::MissingKey { key: "voterId" }),
                    }
                }
                Some(ids)
            }
            Some(_) => {
                return Err(QuorumStateError::WrongType {
                    key: "currentVoters",
                    expected: "array or null",
                });
            }
        };
        Ok(Self {
            leader_epoch: LeaderEpoch(leader_epoch),
            leader_id,
            voted_id,
            voted_directory_id,
            current_voters,
            // Checked to be 0 or 1 above.
            data_version: if data_version == 1 { 1 } else { 0 },
        })
    }
}

/// Why a `quorum-state` file could not be read. The file is only ever written atomically, so
/// any of these means outside damage: the operator must restore or remove the file (removing it
/// is only safe if this node's vote in the current epoch does not matter, e.g. a fresh quorum).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum QuorumStateError {
    /// The file is larger than any valid quorum-state.
    #[error("quorum-state is {len} bytes, more than the {max} allowed")]
    TooLarge {
        /// File length.
        len: usize,
        /// Limit.
        max: usize,
    },
    /// Not UTF-8 text.
    #[error("quorum-state is not UTF-8 (valid up to byte {position})")]
    NotUtf8 {
        /// First bad byte.
        position: usize,
    },
    /// Not JSON.
    #[error("quorum-state: invalid JSON at byte {position}: expected {expected}")]
    Syntax {
        /// Byte position.
        position: usize,
        /// What the parser wanted.
        expected: &'static str,
    },
    /// Nesting deeper than the schema allows.
    #[error("quorum-state: JSON nested deeper than {MAX_DEPTH} levels at byte {position}")]
    TooDeep {
        /// Byte position.
        position: usize,
    },
    /// A required key is absent.
    #[error("quorum-state: missing key {key:?}")]
    MissingKey {
        /// The key.
        key: &'static str,
    },
    /// A key holds the wrong JSON type.
    #[error("quorum-state: key {key:?} must be {expected}")]
    WrongType {
        /// The key.
        key: &'static str,
        /// The wanted type.
        expected: &'static str,
    },
    /// A number is outside its field's range.
    #[error("quorum-state: key {key:?} has out-of-range value {value}")]
    OutOfRange {
        /// The key.
        key: &'static str,
        /// The value read.
        value: i64,
    },
    /// Kafka 3.9 reads data_version 0 and 1 only.
    #[error("quorum-state: unsupported data_version {version} (supported: 0, 1)")]
    UnsupportedVersion {
        /// The version read.
        version: i64,
    },
    /// A UUID that is not 22 characters of unpadded URL-safe base64.
    #[error("quorum-state: key {key:?} is not a Kafka UUID: {value:?}")]
    BadUuid {
        /// The key.
        key: &'static str,
        /// The value read.
        value: String,
    },
}

#[derive(Debug)]
enum Json {
    Null,
    Bool,
    Int(i64),
    Str(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

/// A minimal JSON reader for the quorum-state schema: integers only (no fractions), bounded
/// depth and size, positions in every error.
struct Parser<'a> {
    text: &'a [u8],
    pos: usize,
}

impl Parser<'_> {
    fn skip_ws(&mut self) {
        while self
            .text
            .get(self.pos)
            .is_some_and(|b| b.is_ascii_whitespace())
        {
            self.pos += 1;
        }
    }

    fn err(&self, expected: &'static str) -> QuorumStateError {
        QuorumStateError::Syntax {
            position: self.pos,
            expected,
        }
    }

    fn eat(&mut self, byte: u8, expected: &'static str) -> Result<(), QuorumStateError> {
        self.skip_ws();
        if self.text.get(self.pos) == Some(&byte) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.err(expected))
        }
    }

    fn literal(&mut self, word: &'static str, value: Json) -> Result<Json, QuorumStateError> {
        if self.text.get(self.pos..self.pos + word.len()) == Some(word.as_bytes()) {
            self.pos += word.len();
            Ok(value)
        } else {
            Err(self.err(word))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Json, QuorumStateError> {
        if depth > MAX_DEPTH {
            return Err(QuorumStateError::TooDeep { position: self.pos });
        }
        self.skip_ws();
        match self.text.get(self.pos) {
            Some(b'{') => {
                self.pos += 1;
                let mut fields = Vec::new();
                self.skip_ws();
                if self.text.get(self.pos) == Some(&b'}') {
                    self.pos += 1;
                    return Ok(Json::Object(fields));
                }
                loop {
                    self.skip_ws();
                    let key = self.string()?;
                    self.eat(b':', "':'")?;
                    let value = self.value(depth + 1)?;
                    fields.push((key, value));
                    self.skip_ws();
                    match self.text.get(self.pos) {
                        Some(b',') => self.pos += 1,
                        Some(b'}') => {
                            self.pos += 1;
                            return Ok(Json::Object(fields));
                        }
                        _ => return Err(self.err("',' or '}'")),
                    }
                }
            }
            Some(b'[') => {
                self.pos += 1;
                let mut items = Vec::new();
                self.skip_ws();
                if self.text.get(self.pos) == Some(&b']') {
                    self.pos += 1;
                    return Ok(Json::Array(items));
                }
                loop {
                    items.push(self.value(depth + 1)?);
                    self.skip_ws();
                    match self.text.get(self.pos) {
                        Some(b',') => self.pos += 1,
                        Some(b']') => {
                            self.pos += 1;
                            return Ok(Json::Array(items));
                        }
                        _ => return Err(self.err("',' or ']'")),
                    }
                }
            }
            Some(b'"') => Ok(Json::Str(self.string()?)),
            Some(b'n') => self.literal("null", Json::Null),
            Some(b't') => self.literal("true", Json::Bool),
            Some(b'f') => self.literal("false", Json::Bool),
            Some(b'-' | b'0'..=b'9') => {
                let start = self.pos;
                if self.text.get(self.pos) == Some(&b'-') {
                    self.pos += 1;
                }
                while self.text.get(self.pos).is_some_and(u8::is_ascii_digit) {
                    self.pos += 1;
                }
                if matches!(self.text.get(self.pos), Some(b'.' | b'e' | b'E')) {
                    return Err(self.err("an integer"));
                }
                // The slice is ASCII digits with an optional sign, so it is valid UTF-8.
                let digits = std::str::from_utf8(&self.text[start..self.pos])
                    .map_err(|_| self.err("an integer"))?;
                digits
                    .parse::<i64>()
                    .map(Json::Int)
                    .map_err(|_| QuorumStateError::Syntax {
                        position: start,
                        expected: "an integer that fits in 64 bits",
                    })
            }
            _ => Err(self.err("a JSON value")),
        }
    }

    fn string(&mut self) -> Result<String, QuorumStateError> {
        if self.text.get(self.pos) != Some(&b'"') {
            return Err(self.err("'\"'"));
        }
        self.pos += 1;
        let mut out = String::new();
        loop {
            match self.text.get(self.pos) {
                None => return Err(self.err("closing '\"'")),
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    let escaped = match self.text.get(self.pos + 1) {
                        Some(b'"') => '"',
                        Some(b'\\') => '\\',
                        Some(b'/') => '/',
                        Some(b'n') => '\n',
                        Some(b't') => '\t',
                        Some(b'r') => '\r',
                        _ => return Err(self.err("a simple escape")),
                    };
                    out.push(escaped);
                    self.pos += 2;
                }
                Some(_) => {
                    // Copy one UTF-8 character; the whole input was validated as UTF-8.
                    let rest = std::str::from_utf8(&self.text[self.pos..])
                        .map_err(|_| self.err("UTF-8"))?;
                    let Some(ch) = rest.chars().next() else {
                        return Err(self.err("a character"));
                    };
                    if ch.is_control() {
                        return Err(self.err("no control characters in strings"));
                    }
                    out.push(ch);
                    self.pos += ch.len_utf8();
                }
            }
        }
    }
}

const BASE64_URL: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Kafka prints a `Uuid` as 22 characters of unpadded URL-safe base64.
#[must_use]
pub fn uuid_to_kafka_base64(uuid: Uuid) -> String {
    let bytes = uuid.as_bytes();
    let mut out = String::with_capacity(22);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let chars = chunk.len() + 1;
        for i in 0..chars {
            let index = (n >> (18 - 6 * i)) & 0x3f;
            out.push(char::from(BASE64_URL[index as usize]));
        }
    }
    out
}

/// Parses Kafka's 22-character UUID form; `None` if it is not exactly that.
#[must_use]
pub fn uuid_from_kafka_base64(text: &str) -> Option<Uuid> {
    let bytes = text.as_bytes();
    if bytes.len() != 22 {
        return None;
    }
    let mut acc: u128 = 0;
    for &b in bytes {
        let v = BASE64_URL.iter().position(|&c| c == b)?;
        acc = (acc << 6) | v as u128;
    }
    // 22 × 6 = 132 bits: the last 4 bits are padding and must be zero.
    if acc & 0xf != 0 {
        return None;
    }
    Some(Uuid::from_u128(acc >> 4))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v0_round_trips_and_matches_kafkas_layout() {
        let state = QuorumStateData {
            leader_epoch: LeaderEpoch(7),
            leader_id: Some(NodeId(2)),
            voted_id: None,
            voted_directory_id: Uuid::nil(),
            current_voters: Some(vec![NodeId(1), NodeId(2), NodeId(3)]),
            data_version: 0,
        };
        let json = state.to_json();
        assert_eq!(
            json,
            r#"{"clusterId":"","leaderId":2,"leaderEpoch":7,"votedId":-1,"appliedOffset":0,"currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}"#
        );
        assert_eq!(QuorumStateData::from_json(json.as_bytes()), Ok(state));
    }

    #[test]
    fn v1_round_trips_with_directory_id() {
        let state = QuorumStateData {
            leader_epoch: LeaderEpoch(3),
            leader_id: None,
            voted_id: Some(NodeId(1)),
            voted_directory_id: Uuid::from_u128(0x0123_4567_89ab_cdef_0011_2233_4455_6677),
            current_voters: None,
            data_version: 1,
        };
        let json = state.to_json();
        assert_eq!(QuorumStateData::from_json(json.as_bytes()), Ok(state));
        assert!(
            QuorumStateData::empty()
                .to_json()
                .contains("\"currentVoters\":null")
        );
    }

    #[test]
    fn kafka_uuid_text_form() {
        assert_eq!(uuid_to_kafka_base64(Uuid::nil()), "AAAAAAAAAAAAAAAAAAAAAA");
        // Kafka's METADATA_TOPIC_ID (msb 0, lsb 1).
        assert_eq!(
            uuid_to_kafka_base64(Uuid::from_u128(1)),
            "AAAAAAAAAAAAAAAAAAAAAQ"
        );
        assert_eq!(
            uuid_from_kafka_base64("AAAAAAAAAAAAAAAAAAAAAQ"),
            Some(Uuid::from_u128(1))
        );
        assert_eq!(
            uuid_from_kafka_base64("AAAAAAAAAAAAAAAAAAAAAB"),
            None,
            "non-zero padding bits"
        );
        assert_eq!(uuid_from_kafka_base64("short"), None);
    }

    #[test]
    fn bad_files_are_rejected_with_typed_errors() {
        let cases: &[(&str, &[u8])] = &[
            ("version 2 is not 3.9", br#"{"leaderId":1,"leaderEpoch":1,"votedId":-1,"data_version":2}"#),
            ("missing epoch", br#"{"leaderId":1,"votedId":-1,"data_version":0}"#),
            ("epoch is a string", br#"{"leaderId":1,"leaderEpoch":"1","votedId":-1,"data_version":0}"#),
            ("negative epoch", br#"{"leaderId":1,"leaderEpoch":-3,"votedId":-1,"data_version":0}"#),
            ("leader id -2", br#"{"leaderId":-2,"leaderEpoch":1,"votedId":-1,"data_version":0}"#),
            ("epoch overflows i32", br#"{"leaderId":1,"leaderEpoch":4294967296,"votedId":-1,"data_version":0}"#),
            ("truncated", br#"{"leaderId":1,"leaderEpoch":1,"vot"#),
            ("trailing garbage", br#"{"leaderId":1,"leaderEpoch":1,"votedId":-1,"data_version":0} x"#),
            ("fraction", br#"{"leaderId":1.5,"leaderEpoch":1,"votedId":-1,"data_version":0}"#),
            ("not utf8", b"{\"leaderId\":\xff}"),
            ("not an object", b"[]"),
            ("empty", b""),
            ("deep", b"[[[[[[[[[[1]]]]]]]]]]"),
            ("bad voters", br#"{"leaderId":1,"leaderEpoch":1,"votedId":-1,"currentVoters":[1],"data_version":0}"#),
            ("bad uuid", br#"{"leaderId":1,"leaderEpoch":1,"votedId":-1,"votedDirectoryId":"zz","data_version":1}"#),
        ];
        for (reason, bytes) in cases {
            assert!(
                QuorumStateData::from_json(bytes).is_err(),
                "{reason}: accepted"
            );
        }
        assert_eq!(
            QuorumStateData::from_json(
                br#"{"leaderId":1,"leaderEpoch":1,"votedId":-1,"data_version":2}"#
            ),
            Err(QuorumStateError::UnsupportedVersion { version: 2 })
        );
        let big = vec![b' '; MAX_QUORUM_STATE_BYTES + 1];
        assert!(matches!(
            QuorumStateData::from_json(&big),
            Err(QuorumStateError::TooLarge { .. })
        ));
    }
}
