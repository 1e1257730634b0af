//! `config set`/`unset` on `config.yaml`: the value is validated, the file locked, read, changed in one key and
//! written back (at a symlink's target, keeping the file's mode and owner).
//!
//! The write is an in-place edit: one key changes, every other byte (comments, blank lines, quoting, order,
//! hermes's own sections) stays as written. hermes-agent's example config is mostly comments, and a rewrite through
//! a YAML serializer drops them all.
//!
//! The editor is `yaml-edit` (lossless, pure Rust; `yamlpatch` was weighed too: it needs tree-sitter's YAML grammar
//! built from C, and its operations patch by route and fragment where berth sets one key). Its result is checked by
//! parsing it back: an edit whose meaning differs from the intended document is not used, and the caller falls back
//! to a full rewrite.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde_yaml_ng::Value as Yaml;
use yaml_edit::Document;

use crate::{ConfigError, Value, find, load_file, validate};

/// `config set`: validates the value, then writes it into the file, keeping every other section and key.
///
/// # Errors
/// An unknown key or invalid value (the file is not touched), or an unreadable/unwritable file.
pub fn set_in_file(path: &Path, key: &str, raw: &str) -> Result<Value, ConfigError> {
    let value = validate(key, raw)?;
    let path = &edit_target(path);
    let s = find(key).ok_or_else(|| ConfigError::UnknownKey(key.to_owned()))?;
    let _lock = lock_for(path)?;
    let mut doc = load_file(path)?.unwrap_or(Yaml::Mapping(Default::default()));
    let Yaml::Mapping(root) = &mut doc else {
        return Err(ConfigError::NotAMapping { path: path.to_owned() });
    };
    let section = root.entry(Yaml::String(s.section().to_owned())).or_insert_with(|| Yaml::Mapping(Default::default()));
    if !section.is_mapping() {
        *section = Yaml::Mapping(Default::default());
    }
    if let Yaml::Mapping(m) = section {
        m.insert(Yaml::String(s.name().to_owned()), value.to_yaml());
    }
    write_edit(path, &doc, s.key, Some(&value.to_yaml()))?;
    Ok(value)
}

/// `config unset`: removes the key from the file; returns whether it was there.
///
/// # Errors
/// An unknown key, or an unreadable/unwritable file.
pub fn unset_in_file(path: &Path, key: &str) -> Result<bool, ConfigError> {
    let s = find(key).ok_or_else(|| ConfigError::UnknownKey(key.to_owned()))?;
    let path = &edit_target(path);
    let _lock = lock_for(path)?;
    let Some(mut doc) = load_file(path)? else { return Ok(false) };
    let removed = doc.get_mut(s.section()).and_then(Yaml::as_mapping_mut).and_then(|m| m.remove(s.name())).is_some();
    if removed {
        write_edit(path, &doc, s.key, None)?;
    }
    Ok(removed)
}

/// Holds an exclusive lock on the config file's sibling `.config.yaml.lock` while a read-modify-write runs, so
/// concurrent `config set`s of different keys all land (the config file itself is replaced by rename, so it cannot
/// carry the lock).
fn lock_for(path: &Path) -> Result<std::fs::File, ConfigError> {
    let write_err = |source| ConfigError::Write { path: path.to_owned(), source };
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(write_err)?;
    let name = format!(".{}.lock", path.file_name().and_then(|n| n.to_str()).unwrap_or("config.yaml"));
    let file =
        std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(dir.join(name)).map_err(write_err)?;
    file.lock().map_err(write_err)?;
    Ok(file)
}

/// Writes `doc` into `path`: the file as it was with only `key` changed (set to `value`, or removed) when the
/// in-place editor can do that, else the whole document serialized anew; but a file with YAML anchors, aliases or
/// merge keys is never rewritten (a serializer expands them all and drops every comment): that edit is refused.
fn write_edit(path: &Path, doc: &Yaml, key: &str, value: Option<&Yaml>) -> Result<(), ConfigError> {
    let original = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(source) => return Err(ConfigError::Read { path: path.to_owned(), source }),
    };
    let (section, name) = key.split_once('.').unwrap_or(("", key));
    match edited(&original, section, name, value, doc) {
        Some(text) => write_text(path, &text),
        None if shares_nodes(&original) => {
            Err(ConfigError::SharedByAnchors { path: path.to_owned(), key: key.to_owned() })
        }
        None => {
            let text =
                serde_yaml_ng::to_string(doc).map_err(|source| ConfigError::Yaml { path: path.to_owned(), source })?;
            write_text(path, &text)
        }
    }
}

/// The file an edit of `path` changes: a symlink is followed (to its final target, as `echo >> config.yaml` would),
/// so the edit lands in the target and the link stays a link.
fn edit_target(path: &Path) -> PathBuf {
    let mut p = path.to_path_buf();
    // As many links as the kernel follows; a loop ends here and fails at the read or the write.
    for _ in 0..40 {
        let Ok(next) = std::fs::read_link(&p) else { break };
        p = match p.parent() {
            Some(dir) if next.is_relative() => dir.join(next),
            _ => next,
        };
    }
    p
}

/// Writes `text` to a unique temporary file next to `path`, with the mode and owner `path` has, and renames it over
/// `path`; the temporary is removed on any failure, so nothing is left behind. When the owner cannot be given to
/// the new file (another user's file, writable by us), the file is rewritten in place instead, so it stays theirs.
fn write_text(path: &Path, text: &str) -> Result<(), ConfigError> {
    use std::io::Write as _;
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let write = || -> std::io::Result<()> {
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let mut tmp = tempfile::Builder::new().prefix(".config.yaml.").suffix(".tmp").tempfile_in(dir)?;
        if let Ok(old) = std::fs::metadata(path) {
            let owned = std::os::unix::fs::fchown(tmp.as_file(), Some(old.uid()), Some(old.gid()));
            if owned.is_err() && tmp.as_file().metadata()?.uid() != old.uid() {
                drop(tmp);
                let mut file = std::fs::OpenOptions::new().write(true).truncate(true).open(path)?;
                file.write_all(text.as_bytes())?;
                return file.sync_all();
            }
            tmp.as_file().set_permissions(std::fs::Permissions::from_mode(old.mode() & 0o7777))?;
        }
        tmp.write_all(text.as_bytes())?;
        tmp.as_file().sync_all()?;
        tmp.persist(path).map_err(|e| e.error)?;
        Ok(())
    };
    write().map_err(|source| ConfigError::Write { path: path.to_owned(), source })
}

/// `original` with `section.name` set to `value` (removed when `None`), or `None` when the editor cannot do it so
/// that the text means `expected`.
pub(crate) fn edited(
    original: &str,
    section: &str,
    name: &str,
    value: Option<&Yaml>,
    expected: &Yaml,
) -> Option<String> {
    let doc = Document::from_str(original).ok()?;
    let alias = match doc.as_mapping().and_then(|m| m.get(section)) {
        Some(yaml_edit::YamlNode::Alias(a)) => Some(a.name()),
        _ => None,
    };
    match value {
        Some(v) => {
            let node = value_doc(v)?;
            match doc.get_mapping(section) {
                Some(m) => {
                    m.set(name, &node);
                }
                // `terminal: *base` becomes `terminal: {<<: *base, KEY: VALUE}`: the section still shares what
                // the anchor holds, and the key written in it wins over the merged one.
                None if alias.is_some() => {
                    let text = format!("<<: *{}\n{name}: {}\n", alias?, flow_text(v)?);
                    doc.set(section, &Document::from_str(&text).ok()?.as_mapping()?);
                }
                None => {
                    // A missing (or empty, or non-mapping) section becomes a mapping holding the one key.
                    let fresh = Document::from_str(&format!("{name}: {}\n", flow_text(v)?)).ok()?;
                    doc.set(section, &fresh.as_mapping()?);
                }
            }
        }
        None => {
            doc.get_mapping(section)?.remove(name)?;
        }
    }
    let text = doc.to_string();
    let reparsed: Yaml = if text.trim().is_empty() { Yaml::Null } else { serde_yaml_ng::from_str(&text).ok()? };
    (meaning(reparsed) == meaning(expected.clone())).then_some(text)
}

/// What a document means to its readers (berth, and hermes-agent through PyYAML): its merge keys applied, a section
/// left without keys read as empty. The edit is checked on this, so a change that reaches another mapping through
/// an anchor (the section's own, merged elsewhere) is caught.
fn meaning(mut doc: Yaml) -> Yaml {
    let unmerged = doc.clone();
    if crate::flatten_merges(&mut doc).is_err() {
        doc = unmerged;
    }
    sections_normalized(doc)
}

/// Whether the text has YAML anchors, aliases or merge keys (nodes shared between places).
fn shares_nodes(text: &str) -> bool {
    use yaml_edit::SyntaxKind as K;
    yaml_edit::lex(text).iter().any(|(kind, _)| matches!(kind, K::ANCHOR | K::REFERENCE | K::MERGE_KEY))
}

/// A section left with no keys reads as empty (`terminal:`) or `{}` depending on who wrote it; both mean the same.
fn sections_normalized(mut doc: Yaml) -> Yaml {
    if let Yaml::Mapping(m) = &mut doc {
        for (_, v) in m.iter_mut() {
            if v.as_mapping().is_some_and(serde_yaml_ng::Mapping::is_empty) {
                *v = Yaml::Null;
            }
        }
    }
    doc
}

/// A value as YAML text on one line: scalars as the serializer writes them (quoted only when needed), lists and
/// maps in flow style (JSON is valid flow YAML), so they fit on the key's own line at any indentation.
fn flow_text(v: &Yaml) -> Option<String> {
    match v {
        Yaml::Sequence(_) | Yaml::Mapping(_) => serde_json::to_string(v).ok(),
        _ => Some(serde_yaml_ng::to_string(v).ok()?.trim_end().to_owned()),
    }
}

fn value_doc(v: &Yaml) -> Option<Document> {
    Document::from_str(&flow_text(v)?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(text: &str) -> Yaml {
        serde_yaml_ng::from_str(text).unwrap()
    }

    #[test]
    fn one_key_changes_and_comments_stay() {
        let src = "# top\nterminal:\n  # why\n  timeout: 180   # s\n\nkanban:\n  failure_limit: 2\n";
        let want = src.replace("180", "30");
        assert_eq!(edited(src, "terminal", "timeout", Some(&Yaml::from(30)), &yaml(&want)).as_deref(), Some(&*want));
    }

    #[test]
    fn lists_and_maps_are_written_in_flow_style() {
        let src = "terminal:\n  timeout: 1 # keep\n";
        let list = yaml("[\"/a:/b\", \"c d\"]");
        let mut expected = yaml(src);
        expected["terminal"]["docker_volumes"] = list.clone();
        let text = edited(src, "terminal", "docker_volumes", Some(&list), &expected).unwrap();
        assert!(text.starts_with(src) && text.contains("docker_volumes: [\"/a:/b\",\"c d\"]"), "{text}");
    }

    #[test]
    fn a_missing_file_or_section_gets_the_key() {
        let expected = yaml("kanban:\n  failure_limit: 3\n");
        let text = edited("", "kanban", "failure_limit", Some(&Yaml::from(3)), &expected).unwrap();
        assert_eq!(text, "kanban:\n  failure_limit: 3\n");
        let text = edited("# only a comment\n", "kanban", "failure_limit", Some(&Yaml::from(3)), &expected);
        assert!(text.as_deref().is_none_or(|t| t.contains("# only a comment")), "{text:?}");
    }

    #[test]
    fn unsetting_a_sections_last_key_keeps_the_comments() {
        let src = "# top\nterminal:\n  timeout: 1 # x\n# end\n";
        let text = edited(src, "terminal", "timeout", None, &yaml("terminal: {}\n")).unwrap();
        assert!(text.starts_with("# top\nterminal:") && text.contains("# end") && !text.contains("timeout"), "{text}");
    }

    #[test]
    fn an_aliased_section_becomes_a_merge_and_a_shared_anchor_is_not_edited() {
        let src = "s: &s\n  timeout: 1 # c\nterminal: *s\n";
        let mut expected = yaml(src);
        expected["terminal"]["lifetime_seconds"] = Yaml::from(5);
        let text = edited(src, "terminal", "lifetime_seconds", Some(&Yaml::from(5)), &expected);
        assert_eq!(text.as_deref(), Some("s: &s\n  timeout: 1 # c\nterminal:\n  <<: *s\n  lifetime_seconds: 5\n"));
        // Editing `terminal` would change `other` too, which merges it.
        let shared = "terminal: &t\n  timeout: 1\nother:\n  <<: *t\n";
        let mut expected = yaml(shared);
        expected["terminal"]["timeout"] = Yaml::from(2);
        assert_eq!(edited(shared, "terminal", "timeout", Some(&Yaml::from(2)), &expected), None);
        assert!(shares_nodes(shared) && shares_nodes(src) && shares_nodes("a:\n  <<: {b: 1}\n"));
        assert!(!shares_nodes("terminal:\n  cwd: 'a&b *c' # &d *e\n"));
    }

    #[test]
    fn an_edit_that_would_mean_something_else_is_refused() {
        // The caller's intended document disagrees with the edit: the caller then rewrites the file itself.
        let src = "terminal:\n  timeout: 1\n";
        assert_eq!(edited(src, "terminal", "timeout", Some(&Yaml::from(2)), &yaml("terminal:\n  timeout: 3\n")), None);
        assert_eq!(edited(src, "terminal", "lifetime_seconds", None, &yaml(src)), None);
    }
}
