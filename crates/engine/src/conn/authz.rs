//! Who may read and write what on a site daemon: the authorization file.
//!
//! Like a grid-mapfile, the file maps the subject of a verified client
//! certificate to what it may do, but instead of a local account each rule
//! grants one subtree of the served root, read-only, write-only or both:
//!
//! ```text
//! # SUBJECT                                  PATH         RIGHTS
//! "/DC=org/DC=example/CN=Alice Smith"        cms/alice    rw
//! "CN=*,OU=CMS,O=Example"                    cms/public   r
//! dns:dtn*.example.org                       incoming     w
//! email:bob@example.org                      .            r
//! ```
//!
//! - A subject starting with `/` matches the certificate's subject DN in
//!   OpenSSL's one-line form, attributes in certificate order (what
//!   grid-mapfiles hold). Any other DN matches the RFC 4514 form, most
//!   specific attribute first, comma-separated without spaces.
//! - `dns:`, `email:`, `uri:` and `ip:` match one of the certificate's
//!   subject alternative names of that type.
//! - `*` and `?` are wildcards in every pattern; quote a subject with
//!   spaces. A bare `*` matches every certificate the CA accepted.
//! - PATH is relative to the served root (`.` is the whole root); RIGHTS is
//!   `r`, `w` or `rw`.
//!
//! Everything not granted is denied, before any file is touched: a
//! certificate no rule matches gets no session at all; a request is served
//! beneath the grant it falls in, through a root confined to that subtree,
//! so neither `..` nor a symlink can lead out of it. When several grants
//! contain a path, the most specific (longest) one that gives the needed
//! right wins.

use std::path::{Path, PathBuf};

use wildmatch::WildMatch;
use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};

use crate::store::fsio::checked_relative;
use crate::{Error, Result};

/// The rules of one authorization file.
#[derive(Debug, Clone)]
pub struct Authz {
    rules: Vec<Rule>,
}

#[derive(Debug, Clone)]
struct Rule {
    subject: SubjectPattern,
    grant: Grant,
}

#[derive(Debug, Clone)]
enum SubjectPattern {
    /// Matches the slash form of the subject DN.
    SlashDn(WildMatch),
    /// Matches the RFC 4514 form of the subject DN.
    CommaDn(WildMatch),
    /// Matches one subject alternative name of a kind.
    San(SanKind, WildMatch),
}

/// The kinds of subject alternative name a rule can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SanKind {
    /// `dns:`
    Dns,
    /// `email:`
    Email,
    /// `uri:`
    Uri,
    /// `ip:`
    Ip,
}

/// One subtree and what may be done in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// Relative to the served root; `.` for all of it.
    pub path: PathBuf,
    /// Files may be read.
    pub read: bool,
    /// Files may be created and written.
    pub write: bool,
}

/// What a request needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Reading (a pull).
    Read,
    /// Writing (a push).
    Write,
}

/// Who a client certificate names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    /// `/O=Example/CN=Alice`, attributes in certificate order.
    pub slash: String,
    /// `CN=Alice,O=Example`, most specific first.
    pub rfc4514: String,
    /// Subject alternative names.
    pub alt_names: Vec<(SanKind, String)>,
}

/// The grants of one authenticated client.
#[derive(Debug, Clone)]
pub struct Grants {
    /// The subject, for messages and logs.
    pub subject: String,
    grants: Vec<Grant>,
}

impl Authz {
    /// Reads an authorization file.
    pub fn load(path: &Path) -> Result<Authz> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io("read", path, e))?;
        Authz::parse(&text).map_err(|e| Error::BadRequest(format!("{}: {e}", path.display())))
    }

    /// Parses the text of an authorization file; errors name the line.
    pub fn parse(text: &str) -> std::result::Result<Authz, String> {
        let mut rules = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let rule = parse_rule(line).map_err(|e| format!("line {}: {e}", n + 1))?;
            rules.push(rule);
        }
        Ok(Authz { rules })
    }

    /// Number of rules.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// True when the file grants nothing to anyone.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The grants of a subject; `None` when no rule names it.
    pub fn grants_for(&self, subject: &Subject) -> Option<Grants> {
        let grants: Vec<Grant> = self
            .rules
            .iter()
            .filter(|r| r.subject.matches(subject))
            .map(|r| r.grant.clone())
            .collect();
        (!grants.is_empty()).then(|| Grants {
            subject: subject.slash.clone(),
            grants,
        })
    }
}

fn parse_rule(line: &str) -> std::result::Result<Rule, String> {
    let (subject, rest) = if let Some(quoted) = line.strip_prefix('"') {
        let end = quoted.find('"').ok_or("unterminated quoted subject")?;
        (&quoted[..end], &quoted[end + 1..])
    } else {
        line.split_once(char::is_whitespace)
            .ok_or("expected SUBJECT PATH RIGHTS")?
    };
    let mut fields = rest.split_whitespace();
    let (Some(path), Some(rights), None) = (fields.next(), fields.next(), fields.next()) else {
        return Err("expected SUBJECT PATH RIGHTS".into());
    };
    let (read, write) = match rights {
        "r" => (true, false),
        "w" => (false, true),
        "rw" | "wr" => (true, true),
        other => return Err(format!("rights '{other}': expected r, w or rw")),
    };
    let path = checked_relative(path, true).map_err(|e| format!("path '{path}': {e}"))?;
    Ok(Rule {
        subject: SubjectPattern::parse(subject)?,
        grant: Grant { path, read, write },
    })
}

impl SubjectPattern {
    fn parse(s: &str) -> std::result::Result<SubjectPattern, String> {
        if s.is_empty() {
            return Err("empty subject".into());
        }
        let sans = [
            ("dns:", SanKind::Dns),
            ("email:", SanKind::Email),
            ("uri:", SanKind::Uri),
            ("ip:", SanKind::Ip),
        ];
        for (prefix, kind) in sans {
            if let Some(name) = s.strip_prefix(prefix) {
                return Ok(SubjectPattern::San(kind, WildMatch::new(name)));
            }
        }
        Ok(if s.starts_with('/') {
            SubjectPattern::SlashDn(WildMatch::new(s))
        } else {
            SubjectPattern::CommaDn(WildMatch::new(s))
        })
    }

    fn matches(&self, subject: &Subject) -> bool {
        match self {
            SubjectPattern::SlashDn(p) => p.matches(&subject.slash),
            SubjectPattern::CommaDn(p) => p.matches(&subject.rfc4514),
            SubjectPattern::San(kind, p) => subject
                .alt_names
                .iter()
                .any(|(k, name)| k == kind && p.matches(name)),
        }
    }
}

impl Subject {
    /// Reads the subject and alternative names of a DER certificate.
    pub fn from_der(cert: &[u8]) -> Result<Subject> {
        let (_, cert) = X509Certificate::from_der(cert)
            .map_err(|e| Error::Tls(format!("unreadable client certificate: {e}")))?;
        let registry = x509_parser::objects::oid_registry();
        let mut parts = Vec::new();
        for rdn in cert.subject().iter() {
            for attr in rdn.iter() {
                let name = x509_parser::objects::oid2abbrev(attr.attr_type(), registry)
                    .map(str::to_string)
                    .unwrap_or_else(|_| attr.attr_type().to_id_string());
                let value = attr
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|_| hex::encode(attr.attr_value().data));
                parts.push(format!("{name}={value}"));
            }
        }
        let slash = parts.iter().map(|p| format!("/{p}")).collect::<String>();
        let rfc4514 = parts.iter().rev().cloned().collect::<Vec<_>>().join(",");
        let mut alt_names = Vec::new();
        if let Ok(Some(san)) = cert.subject_alternative_name() {
            for name in &san.value.general_names {
                match name {
                    GeneralName::DNSName(d) => alt_names.push((SanKind::Dns, d.to_string())),
                    GeneralName::RFC822Name(m) => alt_names.push((SanKind::Email, m.to_string())),
                    GeneralName::URI(u) => alt_names.push((SanKind::Uri, u.to_string())),
                    GeneralName::IPAddress(bytes) => {
                        if let Some(ip) = ip_from_bytes(bytes) {
                            alt_names.push((SanKind::Ip, ip.to_string()));
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(Subject {
            slash,
            rfc4514,
            alt_names,
        })
    }
}

fn ip_from_bytes(b: &[u8]) -> Option<std::net::IpAddr> {
    match b.len() {
        4 => Some(std::net::IpAddr::from(<[u8; 4]>::try_from(b).ok()?)),
        16 => Some(std::net::IpAddr::from(<[u8; 16]>::try_from(b).ok()?)),
        _ => None,
    }
}

impl Grants {
    /// The grant a request path (already checked relative to the served
    /// root) falls in for `access`, and the path relative to that grant.
    /// Refuses with a message that says what is granted.
    pub fn resolve(&self, path: &Path, access: Access) -> Result<(&Grant, PathBuf)> {
        let allowed = |g: &Grant| match access {
            Access::Read => g.read,
            Access::Write => g.write,
        };
        let best = self
            .grants
            .iter()
            .filter(|g| allowed(g))
            .filter_map(|g| within(path, &g.path).map(|rest| (g, rest)))
            .max_by_key(|(g, _)| g.path.components().count());
        best.ok_or_else(|| Error::PermissionDenied {
            path: path.display().to_string(),
            why: format!(
                "{} is not granted {} there (granted: {})",
                self.subject,
                match access {
                    Access::Read => "reading",
                    Access::Write => "writing",
                },
                self.describe()
            ),
        })
    }

    /// `cms/alice (rw), public (r)`.
    pub fn describe(&self) -> String {
        self.grants
            .iter()
            .map(|g| {
                let rights = match (g.read, g.write) {
                    (true, true) => "rw",
                    (true, false) => "r",
                    _ => "w",
                };
                format!("{} ({rights})", g.path.display())
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// `path` relative to `base` when it lies at or beneath it (whole
/// components; `.` contains everything).
fn within(path: &Path, base: &Path) -> Option<PathBuf> {
    if base == Path::new(".") {
        return Some(path.to_path_buf());
    }
    if path == Path::new(".") {
        return None;
    }
    let rest = path.strip_prefix(base).ok()?;
    Some(if rest.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        rest.to_path_buf()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alice() -> Subject {
        Subject {
            slash: "/DC=org/DC=example/O=Example/OU=CMS/CN=Alice Smith".into(),
            rfc4514: "CN=Alice Smith,OU=CMS,O=Example,DC=example,DC=org".into(),
            alt_names: vec![
                (SanKind::Email, "alice@example.org".into()),
                (SanKind::Dns, "dtn1.example.org".into()),
            ],
        }
    }

    const FILE: &str = r#"
# site rules
"/DC=org/DC=example/O=Example/OU=CMS/CN=Alice Smith"  cms/alice  rw
"CN=*,OU=CMS,O=Example,DC=example,DC=org"             cms/public r
dns:dtn*.example.org                                  incoming   w
email:bob@example.org                                 .          r
"#;

    #[test]
    fn subjects_match_by_dn_forms_and_alt_names() {
        let authz = Authz::parse(FILE).unwrap();
        assert_eq!(authz.len(), 4);
        let grants = authz.grants_for(&alice()).unwrap();
        assert_eq!(
            grants.describe(),
            "cms/alice (rw), cms/public (r), incoming (w)"
        );
        let bob = Subject {
            slash: "/CN=Bob".into(),
            rfc4514: "CN=Bob".into(),
            alt_names: vec![(SanKind::Email, "bob@example.org".into())],
        };
        assert_eq!(authz.grants_for(&bob).unwrap().describe(), ". (r)");
        let mallory = Subject {
            slash: "/O=Example/CN=Mallory".into(),
            rfc4514: "CN=Mallory,O=Example".into(),
            alt_names: vec![(SanKind::Dns, "dtn1.example.org.evil".into())],
        };
        assert!(authz.grants_for(&mallory).is_none());
    }

    #[test]
    fn requests_resolve_to_the_most_specific_grant_with_the_right() {
        let authz =
            Authz::parse("\"/CN=A\" . r\n\"/CN=A\" data/mine rw\n\"/CN=A\" data/mine/ro r\n")
                .unwrap();
        let a = Subject {
            slash: "/CN=A".into(),
            rfc4514: "CN=A".into(),
            alt_names: vec![],
        };
        let g = authz.grants_for(&a).unwrap();
        let (grant, rest) = g
            .resolve(Path::new("data/mine/x.root"), Access::Write)
            .unwrap();
        assert_eq!(grant.path, Path::new("data/mine"));
        assert_eq!(rest, Path::new("x.root"));
        let (grant, rest) = g.resolve(Path::new("data/mine"), Access::Write).unwrap();
        assert_eq!(
            (grant.path.as_path(), rest.as_path()),
            (Path::new("data/mine"), Path::new("."))
        );
        // The read-only subgrant does not take writing away from the wider one,
        // but reading resolves to it.
        let (grant, _) = g
            .resolve(Path::new("data/mine/ro/f"), Access::Read)
            .unwrap();
        assert_eq!(grant.path, Path::new("data/mine/ro"));
        let err = g
            .resolve(Path::new("data/other"), Access::Write)
            .unwrap_err();
        assert!(matches!(err, Error::PermissionDenied { .. }), "{err}");
        assert!(err.to_string().contains("not granted writing"), "{err}");
        // A path beside a grant that shares its prefix is not inside it.
        assert!(g.resolve(Path::new("data/mineral"), Access::Write).is_err());
        // The whole root is inside only a grant of the whole root.
        assert!(g.resolve(Path::new("."), Access::Read).is_ok());
        assert!(g.resolve(Path::new("."), Access::Write).is_err());
    }

    #[test]
    fn bad_files_name_the_line() {
        for (text, want) in [
            ("\"/CN=A\" data rwx\n", "line 1: rights 'rwx'"),
            ("\n\"/CN=A data r\n", "line 2: unterminated"),
            ("\"/CN=A\" ../up r\n", "line 1: path '../up'"),
            ("\"/CN=A\" /abs r\n", "line 1: path '/abs'"),
            ("\"/CN=A\" data\n", "line 1: expected SUBJECT PATH RIGHTS"),
            ("justone\n", "line 1: expected SUBJECT PATH RIGHTS"),
            ("\"\" data r\n", "line 1: empty subject"),
        ] {
            let err = Authz::parse(text).unwrap_err();
            assert!(err.starts_with(want), "{text:?}: {err}");
        }
    }

    #[test]
    fn subject_is_read_from_a_real_certificate() {
        let mut params = rcgen::CertificateParams::new(vec!["dtn7.example.org".into()]).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "Example");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "Alice Smith");
        params.subject_alt_names.push(rcgen::SanType::Rfc822Name(
            "alice@example.org".try_into().unwrap(),
        ));
        params
            .subject_alt_names
            .push(rcgen::SanType::IpAddress("192.0.2.7".parse().unwrap()));
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let s = Subject::from_der(cert.der()).unwrap();
        assert_eq!(s.slash, "/O=Example/CN=Alice Smith");
        assert_eq!(s.rfc4514, "CN=Alice Smith,O=Example");
        assert!(
            s.alt_names
                .contains(&(SanKind::Dns, "dtn7.example.org".into()))
        );
        assert!(
            s.alt_names
                .contains(&(SanKind::Email, "alice@example.org".into()))
        );
        assert!(s.alt_names.contains(&(SanKind::Ip, "192.0.2.7".into())));
        assert!(Subject::from_der(b"not a certificate").is_err());
    }
}
