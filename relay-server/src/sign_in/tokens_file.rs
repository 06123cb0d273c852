//! The tokens file's format: `TOKEN [container,container...]` per line, `#`
//! comments. A container of the list may carry what the token may do with it,
//! in access letters: `r` reads, `w` writes, `d` deletes, each apart and in
//! any order (`data:rw`, `data:r`, `data:wd`, `data:rwd`); a bare `data` is
//! `data:w` (write only, as before reading existed). Deleting is never implied
//! by writing or reading. A line without a list writes any container, and
//! reads and deletes none. A line that breaks a rule is skipped and reported
//! (its number and the rule, never its text: the text may be a token); the
//! other lines stand. So an edit with one typo still revokes what it removed.

use relay_proto::blob_name::validate_container;

use crate::sign_in::access::{Access, Rights};

/// Shortest token we accept: guessing one must be hopeless.
pub const MIN_TOKEN_CHARS: usize = 16;
/// Longest token we accept.
pub const MAX_TOKEN_CHARS: usize = 256;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grant {
    /// Write any container (not a reserved one); read and delete none.
    AnyContainer,
    /// Exactly these containers, each with its own rights.
    Containers(Vec<ContainerGrant>),
}

/// One container of a token's list and what the token may do with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerGrant {
    pub name: String,
    pub rights: Rights,
}

impl ContainerGrant {
    /// `name` with these rights.
    pub fn with(name: &str, rights: Rights) -> Self {
        Self {
            name: name.to_string(),
            rights,
        }
    }

    /// A bare name: write only (what every list entry meant before reads).
    pub fn write(name: &str) -> Self {
        Self::with(
            name,
            Rights {
                write: true,
                ..Rights::default()
            },
        )
    }

    /// `name:r`.
    pub fn read(name: &str) -> Self {
        Self::with(
            name,
            Rights {
                read: true,
                ..Rights::default()
            },
        )
    }

    /// `name:rw`.
    pub fn read_write(name: &str) -> Self {
        Self::with(
            name,
            Rights {
                read: true,
                write: true,
                ..Rights::default()
            },
        )
    }

    fn allows(&self, access: Access) -> bool {
        self.rights.allows(access)
    }
}

impl Grant {
    /// Whether this grant lets its token do `access` on `container`.
    pub fn allows(&self, container: &str, access: Access) -> bool {
        match self {
            Grant::AnyContainer => access == Access::Write,
            Grant::Containers(cs) => cs.iter().any(|c| c.name == container && c.allows(access)),
        }
    }
}

/// The rule a skipped line broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Rule {
    #[error("token shorter than {MIN_TOKEN_CHARS} characters")]
    TooShort,
    #[error("token longer than {MAX_TOKEN_CHARS} characters")]
    TooLong,
    #[error("token has a character other than visible ASCII ('!' to '~')")]
    Charset,
    /// Which container of the list (1-based); its name is not repeated, in case
    /// the "list" is in fact the second half of a token split by a space.
    #[error(
        "container {0} of the list is not a valid container name (3-63 lowercase letters, digits and single hyphens)"
    )]
    Container(usize),
    /// Which container of the list (1-based) has a suffix other than access
    /// letters `r`, `w`, `d`, each at most once.
    #[error(
        "container {0} of the list has an access other than the letters r, w and d (e.g. :r, :rw, :wd, :rwd)"
    )]
    Access(usize),
    #[error("container list is empty (leave it out to allow any container)")]
    EmptyList,
    #[error("more than two fields (expected TOKEN [container,container...])")]
    ExtraFields,
}

/// A skipped line: its number in the file (1-based) and the rule it broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {rule}")]
pub struct Skipped {
    pub line: usize,
    pub rule: Rule,
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Parsed {
    pub tokens: Vec<(String, Grant)>,
    pub skipped: Vec<Skipped>,
}

/// Parses a tokens file: every valid line is a token, every invalid one is in
/// `skipped`. An empty result is the caller's to judge.
pub fn parse_tokens(text: &str) -> Parsed {
    let mut out = Parsed::default();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match parse_line(line) {
            Ok(t) => out.tokens.push(t),
            Err(rule) => out.skipped.push(Skipped { line: n + 1, rule }),
        }
    }
    out
}

fn parse_line(line: &str) -> Result<(String, Grant), Rule> {
    let mut parts = line.split_whitespace();
    let token = parts.next().unwrap_or_default();
    let list = parts.next();
    if parts.next().is_some() {
        return Err(Rule::ExtraFields);
    }
    if !token.chars().all(|c| c.is_ascii_graphic()) {
        return Err(Rule::Charset);
    }
    // Visible ASCII: bytes are characters.
    if token.len() < MIN_TOKEN_CHARS {
        return Err(Rule::TooShort);
    }
    if token.len() > MAX_TOKEN_CHARS {
        return Err(Rule::TooLong);
    }
    let grant = match list {
        None => Grant::AnyContainer,
        Some(list) => {
            let entries: Vec<&str> = list.split(',').filter(|c| !c.is_empty()).collect();
            if entries.is_empty() {
                return Err(Rule::EmptyList);
            }
            let mut cs: Vec<ContainerGrant> = Vec::with_capacity(entries.len());
            for (i, entry) in entries.iter().enumerate() {
                let g = parse_entry(entry, i + 1)?;
                // A container named twice gets both entries' rights.
                match cs.iter_mut().find(|c| c.name == g.name) {
                    Some(c) => c.rights = c.rights.union(g.rights),
                    None => cs.push(g),
                }
            }
            Grant::Containers(cs)
        }
    };
    Ok((token.to_string(), grant))
}

/// One entry of a container list: `name` (write only) or `name:LETTERS`
/// (`r`, `w`, `d`; `Rights::parse`); `n` is its place in the list (for the
/// rule it breaks).
fn parse_entry(entry: &str, n: usize) -> Result<ContainerGrant, Rule> {
    let (name, access) = match entry.split_once(':') {
        Some((name, access)) => (name, Some(access)),
        None => (entry, None),
    };
    if validate_container(name).is_err() {
        return Err(Rule::Container(n));
    }
    match access {
        None => Ok(ContainerGrant::write(name)),
        Some(letters) => Rights::parse(letters)
            .map(|r| ContainerGrant::with(name, r))
            .ok_or(Rule::Access(n)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_grants_and_comments() {
        let p = parse_tokens("# ops\nabcdefghijklmnop0001\n  abcdefghijklmnop0002 data,logs\n\n");
        assert_eq!(p.skipped, []);
        assert_eq!(
            p.tokens[0],
            ("abcdefghijklmnop0001".into(), Grant::AnyContainer)
        );
        assert_eq!(
            p.tokens[1].1,
            Grant::Containers(vec![
                ContainerGrant::write("data"),
                ContainerGrant::write("logs")
            ])
        );
        assert_eq!(parse_tokens(""), Parsed::default());
    }

    #[test]
    fn read_grants_are_their_own() {
        let p = parse_tokens(
            "abcdefghijklmnop0001 data:rw,results:r,logs\nabcdefghijklmnop0002\nabcdefghijklmnop0003 logs:w,logs:r\n",
        );
        assert_eq!(p.skipped, []);
        let rw = &p.tokens[0].1;
        assert_eq!(
            rw,
            &Grant::Containers(vec![
                ContainerGrant::read_write("data"),
                ContainerGrant::read("results"),
                ContainerGrant::write("logs"),
            ])
        );
        assert!(rw.allows("data", Access::Read) && rw.allows("data", Access::Write));
        assert!(rw.allows("results", Access::Read) && !rw.allows("results", Access::Write));
        // A bare name keeps its old meaning: write only.
        assert!(!rw.allows("logs", Access::Read) && rw.allows("logs", Access::Write));
        assert!(!rw.allows("other", Access::Read) && !rw.allows("other", Access::Write));
        // A line without a list writes anything and reads nothing.
        let any = &p.tokens[1].1;
        assert!(any.allows("data", Access::Write) && !any.allows("data", Access::Read));
        // Named twice: both rights.
        assert_eq!(
            p.tokens[2].1,
            Grant::Containers(vec![ContainerGrant::read_write("logs")])
        );
    }

    #[test]
    fn an_unknown_access_or_a_bad_name_before_it_skips_the_line() {
        let p = parse_tokens(
            "abcdefghijklmnop0001 data:x\nabcdefghijklmnop0002 data,logs:R\nabcdefghijklmnop0003 Bad:r\nabcdefghijklmnop0004 data:\nabcdefghijklmnop0005 :r\n",
        );
        assert_eq!(p.tokens, []);
        let rules: Vec<Rule> = p.skipped.iter().map(|s| s.rule).collect();
        assert_eq!(
            rules,
            [
                Rule::Access(1),
                Rule::Access(2),
                Rule::Container(1),
                Rule::Access(1),
                Rule::Container(1)
            ]
        );
        assert_eq!(
            Rule::Access(2).to_string(),
            "container 2 of the list has an access other than the letters r, w and d (e.g. :r, :rw, :wd, :rwd)"
        );
        let p = parse_tokens("abcdefghijklmnop0001 data:rwdd\nabcdefghijklmnop0002 data:dx\n");
        assert_eq!(p.tokens, []);
        assert_eq!(p.skipped.len(), 2);
    }

    /// Deleting is its own letter: implied by neither writing nor reading,
    /// nor by a line without a list.
    #[test]
    fn deleting_is_a_grant_of_its_own() {
        let p = parse_tokens(
            "abcdefghijklmnop0001 data:rwd,logs:wd,old:d\nabcdefghijklmnop0002 data:rw\nabcdefghijklmnop0003\nabcdefghijklmnop0004 data:w,data:d\n",
        );
        assert_eq!(p.skipped, []);
        let all = &p.tokens[0].1;
        assert!(all.allows("data", Access::Delete) && all.allows("data", Access::Read));
        assert!(all.allows("logs", Access::Delete) && !all.allows("logs", Access::Read));
        assert!(all.allows("old", Access::Delete) && !all.allows("old", Access::Write));
        assert!(!all.allows("other", Access::Delete));
        let rw = &p.tokens[1].1;
        assert!(rw.allows("data", Access::Write) && !rw.allows("data", Access::Delete));
        assert!(!p.tokens[2].1.allows("data", Access::Delete));
        // Named twice: both rights.
        assert!(p.tokens[3].1.allows("data", Access::Delete));
        assert!(p.tokens[3].1.allows("data", Access::Write));
    }

    #[test]
    fn a_bad_line_is_skipped_with_its_number_and_rule_and_the_rest_stands() {
        let text = "\
abcdefghijklmnop0001
short-13-char
abcdefghijklmnop0002 Bad_Container
abcdefghijklmnop0003 data extra
abcdefghijklmnop0004 data,
tökenwithümlautsxx
abcdefghijklmnop0005 ,
abcdefghijklmnop0006 data,x
abcdefghijklmnop0007
";
        let p = parse_tokens(text);
        let kept: Vec<&str> = p.tokens.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(
            kept,
            [
                "abcdefghijklmnop0001",
                "abcdefghijklmnop0004",
                "abcdefghijklmnop0007"
            ]
        );
        assert_eq!(
            p.skipped,
            [
                Skipped {
                    line: 2,
                    rule: Rule::TooShort
                },
                Skipped {
                    line: 3,
                    rule: Rule::Container(1)
                },
                Skipped {
                    line: 4,
                    rule: Rule::ExtraFields
                },
                Skipped {
                    line: 6,
                    rule: Rule::Charset
                },
                Skipped {
                    line: 7,
                    rule: Rule::EmptyList
                },
                Skipped {
                    line: 8,
                    rule: Rule::Container(2)
                },
            ]
        );
        assert!(parse_tokens(&"x".repeat(257)).skipped[0].rule == Rule::TooLong);
        assert!(parse_tokens(&"x".repeat(256)).skipped.is_empty());
        assert!(parse_tokens(&"x".repeat(16)).skipped.is_empty());
    }

    #[test]
    fn reports_never_contain_the_line() {
        let secret = "s3cr3t-but-short";
        let text = format!("{secret}x data extra\n{} data\nab Bad\n", "q".repeat(10));
        for s in parse_tokens(&text).skipped {
            let msg = s.to_string();
            assert!(msg.starts_with(&format!("line {}: ", s.line)), "{msg}");
            for word in [secret, "qqqqqqqqqq", "Bad", "extra", "data"] {
                assert!(!msg.contains(word), "{msg}");
            }
        }
    }
}
