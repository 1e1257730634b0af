//! A bind mount or volume as data ([`Bind`]): what `terminal.docker_volumes`, `-v`/`--volume` and berth's own
//! folders hand the engine, read as source, target and options rather than as `host:container[:opts]` text.
//!
//! It renders (and serializes) as exactly the text it was parsed from, so a spec's fingerprint and field digests,
//! which cover the binds, are the ones the string form gave: typing them recreates no sandbox.

use std::fmt;

use serde::{Serialize, Serializer};

/// One bind: `source:target[:options]`, or a bare `target` (an anonymous volume).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bind {
    /// The host path, or a named volume (no slash); `None` for an anonymous volume (`-v /path`).
    pub source: Option<String>,
    /// Where it appears inside the container.
    pub target: String,
    /// The options as given (`ro`, `rw,z`, a propagation, …); `None` when none were.
    pub options: Option<String>,
}

impl Bind {
    /// A bind of `source` at `target`, with no options.
    pub fn new(source: impl Into<String>, target: impl Into<String>) -> Self {
        Self { source: Some(source.into()), target: target.into(), options: None }
    }

    /// Reads `source:target[:options]` as the engine does (the first two colons split it); a text without a colon
    /// is an anonymous volume's target. Every text parses, and [`Bind`]'s `Display` gives it back unchanged.
    pub fn parse(text: &str) -> Self {
        let mut parts = text.splitn(3, ':');
        let first = parts.next().unwrap_or_default().to_owned();
        match parts.next() {
            None => Self { source: None, target: first, options: None },
            Some(target) => {
                Self { source: Some(first), target: target.to_owned(), options: parts.next().map(str::to_owned) }
            }
        }
    }

    /// Whether the options make it read-only (`ro` among them).
    pub fn read_only(&self) -> bool {
        self.options.as_deref().is_some_and(|o| o.split(',').any(|x| x.trim() == "ro"))
    }

    /// The source the mount check reads: the host path or volume name, or for an anonymous volume its target
    /// (checked as a host path too, as the string form was).
    pub fn checked_source(&self) -> &str {
        self.source.as_deref().unwrap_or(&self.target)
    }
}

impl fmt::Display for Bind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(source) = &self.source {
            write!(f, "{source}:")?;
        }
        f.write_str(&self.target)?;
        if let Some(options) = &self.options {
            write!(f, ":{options}")?;
        }
        Ok(())
    }
}

/// As its text: the fingerprint's encoding of a bind is the string's.
impl Serialize for Bind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_text_parses_and_renders_back_unchanged() {
        for text in ["/a:/b", "/a:/b:ro", "/opt/x:/x:rw,z", "named:/v", "/anon", "a:b:c:d", "a:", ":b", "", "::"] {
            assert_eq!(Bind::parse(text).to_string(), text);
            let encoded = postcard::to_allocvec(&[Bind::parse(text)]).unwrap();
            assert_eq!(encoded, postcard::to_allocvec(&[text.to_owned()]).unwrap(), "{text}");
        }
        let b = Bind::parse("/h:/c:rw,ro");
        assert_eq!((b.source.as_deref(), b.target.as_str(), b.read_only()), (Some("/h"), "/c", true));
        assert_eq!(Bind::parse("/anon").checked_source(), "/anon");
        assert!(!Bind::new("/h", "/c").read_only());
    }
}
