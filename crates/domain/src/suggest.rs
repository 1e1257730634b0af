//! "Did you mean": the nearest of some known names to a mistyped one, so a refusal can name the fix.

/// Edits (insertions, deletions, substitutions, and a swap of two neighbouring characters, the commonest typo:
/// `alpah` is one edit from `alpha`) from `a` to `b`, compared case-insensitively (`strsim`'s optimal string
/// alignment distance).
fn distance(a: &str, b: &str) -> usize {
    strsim::osa_distance(&a.to_lowercase(), &b.to_lowercase())
}

/// The known name nearest to `word`, when it is near enough to be a typo of it (about one edit in three
/// characters); `None` for an exact match or nothing close.
pub fn closest<'a>(word: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).max(1);
    known
        .into_iter()
        .map(|k| (distance(word, k), k))
        .filter(|(d, _)| *d > 0 && *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// `" (did you mean X?)"` for the nearest known name, else nothing: to append to a refusal.
pub fn did_you_mean<'a>(word: &str, known: impl IntoIterator<Item = &'a str>) -> String {
    closest(word, known).map(|k| format!(" (did you mean {k}?)")).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typos_find_their_names_and_strangers_find_none() {
        assert_eq!(closest("timout", ["timeout", "cwd"]), Some("timeout"));
        assert_eq!(closest("ncalph", ["ralph", "default"]), Some("ralph"));
        assert_eq!(closest("runing", ["ready", "running"]), Some("running"));
        assert_eq!(closest("nobody", ["ralph", "default"]), None);
        assert_eq!(closest("ralph", ["ralph"]), None);
        assert_eq!(did_you_mean("x", ["yy"]), "");
        assert_eq!(closest("alpah", ["alpha", "beta"]), Some("alpha"), "a swap of neighbours is one edit");
        assert_eq!(distance("ab", "ba"), 1);
        assert_eq!(distance("kitten", "sitting"), 3);
    }
}
