//! In-place edits of `config.yaml` for `config set`/`unset`: one key changes, every other byte (comments, blank
//! lines, quoting, order, hermes's own sections) stays as written. hermes-agent's example config is mostly
//! comments, and a rewrite through a YAML serializer drops them all.
//!
//! The editor is `yaml-edit` (lossless, pure Rust; `yamlpatch` was weighed too: it needs tree-sitter's YAML grammar
//! built from C, and its operations patch by route and fragment where berth sets one key). Its result is checked by parsing it back: an edit whose
//! meaning differs from the intended document is not used, and the caller falls back to a full rewrite.

use std::str::FromStr;

use serde_yaml_ng::Value as Yaml;
use yaml_edit::Document;

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
    match value {
        Some(v) => {
            let node = value_doc(v)?;
            match doc.get_mapping(section) {
                Some(m) => {
                    m.set(name, &node);
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
    (sections_normalized(reparsed) == sections_normalized(expected.clone())).then_some(text)
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
    fn an_edit_that_would_mean_something_else_is_refused() {
        // The caller's intended document disagrees with the edit: the caller then rewrites the file itself.
        let src = "terminal:\n  timeout: 1\n";
        assert_eq!(edited(src, "terminal", "timeout", Some(&Yaml::from(2)), &yaml("terminal:\n  timeout: 3\n")), None);
        assert_eq!(edited(src, "terminal", "lifetime_seconds", None, &yaml(src)), None);
    }
}
