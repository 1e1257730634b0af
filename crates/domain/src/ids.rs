//! Newtypes for the strings that have rules: task ids, profile names and board slugs.

use std::fmt;

use thiserror::Error;

/// A raw task id, kept exactly as the user gave it.
///
/// Any string is accepted (the sanitizer makes it label-safe); only its length is bounded so labels and names stay
/// small. Distinct raw ids never share a sandbox, even when their sanitized labels collide.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId(String);

/// Why a string is not a valid id or name.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum IdError {
    /// The task id is longer than [`TaskId::MAX_LEN`] bytes.
    #[error("task id is {0} bytes long; the limit is 4096")]
    TaskIdTooLong(usize),
    /// The profile name breaks the profile-name rules.
    #[error("invalid profile name {name:?}: {why}")]
    Profile { name: String, why: &'static str },
    /// The board slug breaks the slug rules.
    #[error("invalid board slug {slug:?}: use 1-64 of a-z, 0-9, '-', '_', starting with a letter or digit")]
    BoardSlug { slug: String },
}

impl TaskId {
    /// The longest raw task id accepted, in bytes.
    pub const MAX_LEN: usize = 4096;

    /// Parses a raw task id; any content is allowed, the length is bounded.
    ///
    /// # Errors
    /// [`IdError::TaskIdTooLong`] when `raw` is longer than [`TaskId::MAX_LEN`] bytes.
    pub fn parse(raw: &str) -> Result<Self, IdError> {
        if raw.len() > Self::MAX_LEN {
            return Err(IdError::TaskIdTooLong(raw.len()));
        }
        Ok(Self(raw.to_owned()))
    }

    /// The id of the default sandbox.
    pub fn default_task() -> Self {
        Self("default".to_owned())
    }

    /// Returns the raw id.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The id as the stem of a file name (a task's log is `<logs>/<id>.log`), when it can be one: not empty, not `.`
    /// or `..`, and no `/`, `\` or NUL. An id from outside (a URL's path) that names another file is refused here.
    pub fn as_file_stem(&self) -> Option<&str> {
        let s = self.0.as_str();
        let safe = !s.is_empty() && s != "." && s != ".." && !s.contains(['/', '\\', '\0']);
        safe.then_some(s)
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A profile name: a directory under `<home>/profiles/`, so it must be a safe path component.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProfileName(String);

impl ProfileName {
    /// Parses a profile name: 1-64 characters of ASCII `[A-Za-z0-9_.-]`, not starting with `.` or `-`.
    ///
    /// # Errors
    /// [`IdError::Profile`] naming the rule that was broken.
    pub fn parse(raw: &str) -> Result<Self, IdError> {
        let why = if raw.is_empty() {
            Some("it is empty")
        } else if raw.len() > 64 {
            Some("it is longer than 64 characters")
        } else if !raw.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')) {
            Some("use only letters, digits, '_', '.' and '-'")
        } else if raw.starts_with(['.', '-']) {
            Some("it must not start with '.' or '-'")
        } else {
            None
        };
        match why {
            Some(why) => Err(IdError::Profile { name: raw.to_owned(), why }),
            None => Ok(Self(raw.to_owned())),
        }
    }

    /// The profile that always exists.
    pub fn default_profile() -> Self {
        Self("default".to_owned())
    }

    /// Returns the name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ProfileName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A board slug: lower-case `^[a-z0-9][a-z0-9_-]{0,63}$`, as upstream.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BoardSlug(String);

impl BoardSlug {
    /// Parses a slug after trimming and lower-casing it, as upstream does.
    ///
    /// # Errors
    /// [`IdError::BoardSlug`] when the slug breaks the rules.
    pub fn parse(raw: &str) -> Result<Self, IdError> {
        let s = raw.trim().to_ascii_lowercase();
        let ok = !s.is_empty()
            && s.len() <= 64
            && s.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
        if ok { Ok(Self(s)) } else { Err(IdError::BoardSlug { slug: raw.to_owned() }) }
    }

    /// The board that always exists.
    pub fn default_board() -> Self {
        Self("default".to_owned())
    }

    /// Returns the slug.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for BoardSlug {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_names() {
        for ok in ["default", "alpha", "research-bot", "a.b_c-1", "A"] {
            assert!(ProfileName::parse(ok).is_ok(), "{ok}");
        }
        for bad in ["", "a/b", "..", ".hidden", "-x", "a b", "é", "a\nb", &"x".repeat(65)] {
            assert!(ProfileName::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn board_slugs() {
        assert_eq!(BoardSlug::parse(" Main ").unwrap().as_str(), "main");
        assert!(BoardSlug::parse("_x").is_err());
        assert!(BoardSlug::parse("a/b").is_err());
        assert!(BoardSlug::parse("").is_err());
    }

    #[test]
    fn a_task_id_is_a_file_stem_only_when_it_names_no_other_file() {
        let stem = |raw: &str| TaskId::parse(raw).unwrap().as_file_stem().map(str::to_owned);
        assert_eq!(stem("t_0123456789ab").as_deref(), Some("t_0123456789ab"));
        assert_eq!(stem("with:colon").as_deref(), Some("with:colon"));
        for bad in ["", ".", "..", "../../etc/x", "a/b", "a\\b", "a\0b"] {
            assert_eq!(stem(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn task_ids_accept_anything_bounded() {
        assert!(TaskId::parse("").is_ok());
        assert!(TaskId::parse("a\nb=c,d/😀").is_ok());
        assert_eq!(TaskId::parse(&"x".repeat(5000)), Err(IdError::TaskIdTooLong(5000)));
    }
}
