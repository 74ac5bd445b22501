//! Entry names as they travel: byte strings.
//!
//! A Unix file name is any sequence of bytes except `/` and NUL; it need
//! not be UTF-8. [`RelPath`] carries a `/`-separated relative path as
//! bytes. On the wire it is encoded exactly like a postcard `String`
//! (a varint length, then the bytes), so a path that is UTF-8 reads the
//! same to every version; only with the `ENTRIES` feature may a path hold
//! bytes that are not UTF-8 (PROTOCOL.md §5.2).

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A relative, `/`-separated path as raw bytes.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct RelPath(pub Vec<u8>);

impl RelPath {
    /// The bytes of the path.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// True when the path is valid UTF-8 (what a peer without `ENTRIES`
    /// can decode).
    pub fn is_utf8(&self) -> bool {
        std::str::from_utf8(&self.0).is_ok()
    }

    /// The path for people: UTF-8 as it is, other bytes and control
    /// characters escaped (`\xe9`, `\n`), so a report line stays one line
    /// and says which bytes the name has.
    pub fn display(&self) -> String {
        escape(&self.0)
    }

    /// The path as UTF-8 when it is, else escaped as [`RelPath::display`].
    pub fn to_string_lossy(&self) -> String {
        self.display()
    }

    /// Joins `name` below this path.
    pub fn join(&self, name: &[u8]) -> RelPath {
        let mut out = Vec::with_capacity(self.0.len() + 1 + name.len());
        out.extend_from_slice(&self.0);
        if !out.is_empty() {
            out.push(b'/');
        }
        out.extend_from_slice(name);
        RelPath(out)
    }

    /// The `/`-separated components, empty ones included.
    pub fn components(&self) -> impl Iterator<Item = &[u8]> {
        self.0.split(|&b| b == b'/')
    }
}

/// Escapes bytes for a message: printable UTF-8 stays, `\` doubles, and
/// control characters and bytes that are not UTF-8 become `\n`, `\t` or
/// `\xNN`.
pub fn escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                '\r' => out.push_str("\\r"),
                c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

impl fmt::Debug for RelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.display())
    }
}

impl fmt::Display for RelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.display())
    }
}

impl From<&str> for RelPath {
    fn from(s: &str) -> RelPath {
        RelPath(s.as_bytes().to_vec())
    }
}

impl From<String> for RelPath {
    fn from(s: String) -> RelPath {
        RelPath(s.into_bytes())
    }
}

impl From<Vec<u8>> for RelPath {
    fn from(b: Vec<u8>) -> RelPath {
        RelPath(b)
    }
}

impl PartialEq<str> for RelPath {
    fn eq(&self, other: &str) -> bool {
        self.0 == other.as_bytes()
    }
}

impl PartialEq<&str> for RelPath {
    fn eq(&self, other: &&str) -> bool {
        self.0 == other.as_bytes()
    }
}

impl Serialize for RelPath {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // postcard writes bytes exactly as it writes a str: length, bytes.
        s.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for RelPath {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RelPath, D::Error> {
        struct BytesVisitor;
        impl<'de> Visitor<'de> for BytesVisitor {
            type Value = RelPath;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a path as a byte string")
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<RelPath, E> {
                Ok(RelPath(v.to_vec()))
            }
            fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<RelPath, E> {
                Ok(RelPath(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RelPath, E> {
                Ok(RelPath(v.as_bytes().to_vec()))
            }
        }
        d.deserialize_byte_buf(BytesVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_utf8_path_encodes_exactly_as_a_string() {
        let s = "dir/file ü.txt".to_string();
        let as_string = postcard::to_allocvec(&s).unwrap();
        let as_path = postcard::to_allocvec(&RelPath::from(s.as_str())).unwrap();
        assert_eq!(as_string, as_path);
        let back: RelPath = postcard::from_bytes(&as_string).unwrap();
        assert_eq!(back, s.as_str());
    }

    #[test]
    fn any_bytes_round_trip() {
        let p = RelPath(b"caf\xe9/\n\t\\-x".to_vec());
        let wire = postcard::to_allocvec(&p).unwrap();
        assert_eq!(postcard::from_bytes::<RelPath>(&wire).unwrap(), p);
        assert!(postcard::from_bytes::<String>(&wire).is_err());
        assert_eq!(p.display(), "caf\\xe9/\\n\\t\\\\-x");
    }
}
