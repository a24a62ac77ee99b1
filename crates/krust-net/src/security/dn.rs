//! A certificate's subject distinguished name in RFC 2253 form, as Java's
//! `X500Principal.getName(X500Principal.RFC2253)` writes it — the string Kafka 3.9 feeds to
//! `ssl.principal.mapping.rules` (e.g. `CN=alice,OU=Eng,O=Example,C=US`: RDNs last-first, no
//! space after commas, RFC 2253 keywords for CN, C, L, ST, O, OU, STREET, DC, UID and the
//! dotted OID with `#`-hex DER value for every other attribute).
//!
//! Only the few DER elements on the way to `tbsCertificate.subject` are read; every length is
//! checked against the bytes left.

/// Why a subject could not be read from a certificate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DnError {
    /// The DER is cut short or a length does not fit.
    #[error("certificate DER is truncated or has a bad length at byte {offset}")]
    Truncated {
        /// Where in the certificate.
        offset: usize,
    },
    /// An element of another type than X.509 puts there.
    #[error("certificate DER: expected tag {expected:#04x}, found {found:#04x}")]
    UnexpectedTag {
        /// The tag X.509 requires.
        expected: u8,
        /// The tag found.
        found: u8,
    },
}

/// One DER element: its tag, its whole encoding and its contents.
struct Tlv<'a> {
    tag: u8,
    whole: &'a [u8],
    contents: &'a [u8],
}

/// Reads DER elements one after another out of `bytes`.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    base: usize,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8], base: usize) -> Self {
        Reader {
            bytes,
            pos: 0,
            base,
        }
    }

    fn is_empty(&self) -> bool {
        self.pos >= self.bytes.len()
    }

    fn truncated(&self) -> DnError {
        DnError::Truncated {
            offset: self.base + self.pos,
        }
    }

    fn next(&mut self) -> Result<(Tlv<'a>, usize), DnError> {
        let start = self.pos;
        let rest = self.bytes.get(start..).ok_or_else(|| self.truncated())?;
        let (&tag, rest) = rest.split_first().ok_or_else(|| self.truncated())?;
        let (&first_len, rest) = rest.split_first().ok_or_else(|| self.truncated())?;
        let (len, header) = if first_len < 0x80 {
            (usize::from(first_len), 2)
        } else {
            let n = usize::from(first_len & 0x7f);
            if n == 0 || n > 4 {
                return Err(self.truncated());
            }
            let len_bytes = rest.get(..n).ok_or_else(|| self.truncated())?;
            let len = len_bytes
                .iter()
                .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
            (len, 2 + n)
        };
        let end = start
            .checked_add(header)
            .and_then(|h| h.checked_add(len))
            .ok_or_else(|| self.truncated())?;
        let whole = self.bytes.get(start..end).ok_or_else(|| self.truncated())?;
        let contents = whole.get(header..).ok_or_else(|| self.truncated())?;
        self.pos = end;
        Ok((
            Tlv {
                tag,
                whole,
                contents,
            },
            self.base + start + header,
        ))
    }

    fn expect(&mut self, tag: u8) -> Result<(Tlv<'a>, usize), DnError> {
        let (tlv, at) = self.next()?;
        if tlv.tag != tag {
            return Err(DnError::UnexpectedTag {
                expected: tag,
                found: tlv.tag,
            });
        }
        Ok((tlv, at))
    }
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;
const INTEGER: u8 = 0x02;
const VERSION: u8 = 0xa0;

/// The subject of an X.509 certificate (DER) in RFC 2253 form.
///
/// # Errors
///
/// [`DnError`] when the DER does not hold a certificate's subject.
pub fn subject_rfc2253(certificate: &[u8]) -> Result<String, DnError> {
    let (cert, at) = Reader::new(certificate, 0).expect(SEQUENCE)?;
    let (tbs, at) = Reader::new(cert.contents, at).expect(SEQUENCE)?;
    let mut tbs = Reader::new(tbs.contents, at);
    let (mut field, _) = tbs.next()?;
    if field.tag == VERSION {
        field = tbs.next()?.0;
    }
    if field.tag != INTEGER {
        return Err(DnError::UnexpectedTag {
            expected: INTEGER,
            found: field.tag,
        });
    }
    tbs.expect(SEQUENCE)?; // signature algorithm
    tbs.expect(SEQUENCE)?; // issuer
    tbs.expect(SEQUENCE)?; // validity
    let (subject, at) = tbs.expect(SEQUENCE)?;
    name_rfc2253(subject.contents, at)
}

fn name_rfc2253(name: &[u8], base: usize) -> Result<String, DnError> {
    let mut rdns = Vec::new();
    let mut reader = Reader::new(name, base);
    while !reader.is_empty() {
        let (rdn, at) = reader.expect(SET)?;
        let mut avas = Vec::new();
        let mut set = Reader::new(rdn.contents, at);
        while !set.is_empty() {
            let (ava, at) = set.expect(SEQUENCE)?;
            let mut ava = Reader::new(ava.contents, at);
            let (oid, _) = ava.expect(OID)?;
            let (value, _) = ava.next()?;
            avas.push(ava_rfc2253(&oid_dotted(oid.contents), &value));
        }
        rdns.push(avas.join("+"));
    }
    rdns.reverse();
    Ok(rdns.join(","))
}

fn oid_dotted(contents: &[u8]) -> String {
    let mut arcs: Vec<u64> = Vec::new();
    let mut acc: u64 = 0;
    for &b in contents {
        acc = (acc << 7) | u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            if arcs.is_empty() {
                let first = (acc / 40).min(2);
                arcs.push(first);
                arcs.push(acc - first * 40);
            } else {
                arcs.push(acc);
            }
            acc = 0;
        }
    }
    arcs.iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(".")
}

/// RFC 2253 keywords Java writes by name.
fn keyword(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "2.5.4.9" => "STREET",
        "0.9.2342.19200300.100.1.25" => "DC",
        "0.9.2342.19200300.100.1.1" => "UID",
        _ => return None,
    })
}

fn ava_rfc2253(oid: &str, value: &Tlv<'_>) -> String {
    let text = keyword(oid).and_then(|k| directory_string(value).map(|s| (k, s)));
    match text {
        Some((keyword, text)) => format!("{keyword}={}", escape(&text)),
        None => {
            let hex: String = value.whole.iter().map(|b| format!("{b:02x}")).collect();
            format!("{}=#{hex}", keyword(oid).unwrap_or(oid))
        }
    }
}

/// The text of a string-typed attribute value, `None` for other types.
fn directory_string(value: &Tlv<'_>) -> Option<String> {
    match value.tag {
        // UTF8String, PrintableString, IA5String, VisibleString
        0x0c | 0x13 | 0x16 | 0x1a => String::from_utf8(value.contents.to_vec()).ok(),
        // T61String: read as Latin-1, as Java does
        0x14 => Some(value.contents.iter().map(|&b| char::from(b)).collect()),
        // BMPString: UTF-16BE
        0x1e => {
            let units: Vec<u16> = value
                .contents
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect();
            String::from_utf16(&units).ok()
        }
        // UniversalString: UTF-32BE
        0x1c => value
            .contents
            .chunks_exact(4)
            .map(|c| char::from_u32(u32::from_be_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
        _ => None,
    }
}

/// Java's `AVA.toRFC2253String` escaping: `,=+<>#;"\` get a backslash, as do a leading and
/// trailing space.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let last = text.chars().count().saturating_sub(1);
    for (i, c) in text.chars().enumerate() {
        let special = ",=+<>#;\"\\".contains(c) || (c == ' ' && (i == 0 || i == last));
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}
