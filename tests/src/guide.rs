//! The front door and the guide: the README stays short, every page of `docs/` is in the guide's table of contents,
//! and every relative link of the Markdown files (README, ARCHITECTURE, BENCHMARKS, the guide) reaches a file, and
//! its `#anchor` a heading of that file. The guide's command examples are checked in `crates/app/src/help_tests.rs`;
//! `cargo xtask guide` builds the book (`cargo xtask ci` runs it).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::support::workspace;

/// The Markdown files whose links are checked: the top-level ones and every page of the guide.
fn markdown_files() -> Vec<PathBuf> {
    let root = workspace();
    let mut files: Vec<PathBuf> =
        ["README.md", "ARCHITECTURE.md", "BENCHMARKS.md"].iter().map(|f| root.join(f)).collect();
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    pages.sort();
    files.extend(pages);
    files
}

/// A heading's anchor as GitHub and mdBook make it: lower case, spaces to `-`, punctuation but `-` and `_` dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The lines outside fenced code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|l| {
            if l.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    prose(text).iter().filter(|l| l.starts_with('#')).map(|l| slug(l.trim_start_matches('#'))).collect()
}

/// The targets of inline links `[text](target)` on a line, code spans left out.
fn link_targets(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_code = false;
    let bytes: Vec<char> = line.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            '`' => in_code = !in_code,
            ']' if !in_code && bytes.get(i + 1) == Some(&'(') => {
                let rest: String = bytes[i + 2..].iter().collect();
                if let Some(end) = rest.find(')') {
                    out.push(rest[..end].to_owned());
                }
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// Every broken relative link of `file`, as `file: target (why)`.
fn broken_links(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap();
    let mut broken = Vec::new();
    for line in prose(&text) {
        for target in link_targets(line) {
            if target.contains("://") || target.starts_with("mailto:") || target.starts_with('<') {
                continue;
            }
            let (path, anchor) = target.split_once('#').map_or((target.as_str(), None), |(p, a)| (p, Some(a)));
            let dest = if path.is_empty() { file.to_path_buf() } else { file.parent().unwrap().join(path) };
            if !dest.exists() {
                broken.push(format!("{}: {target} (no such file)", file.display()));
                continue;
            }
            if let Some(anchor) = anchor {
                let dest_text = std::fs::read_to_string(&dest).unwrap_or_default();
                if !anchors(&dest_text).contains(anchor) {
                    broken.push(format!("{}: {target} (no heading with that anchor)", file.display()));
                }
            }
        }
    }
    broken
}

#[test]
fn every_relative_link_reaches_a_file_and_a_heading() {
    let files = markdown_files();
    assert!(files.len() > 10, "the guide's pages were found: {files:?}");
    let broken: Vec<String> = files.iter().flat_map(|f| broken_links(f)).collect();
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_link_checker_finds_a_broken_file_and_a_broken_anchor() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.md"), "# A page\n\n## Two words\n").unwrap();
    let page = dir.path().join("b.md");
    std::fs::write(
        &page,
        "[ok](a.md) [ok](a.md#two-words) [gone](c.md) [bad](a.md#nothing) `[code](x.md)`\n```\n[x](y.md)\n```\n",
    )
    .unwrap();
    let broken = broken_links(&page);
    assert_eq!(broken.len(), 2, "{broken:?}");
    assert!(broken[0].contains("c.md (no such file)") && broken[1].contains("a.md#nothing (no heading"));
}

#[test]
fn every_page_of_the_guide_is_in_its_table_of_contents() {
    let docs = workspace().join("docs");
    let summary = std::fs::read_to_string(docs.join("SUMMARY.md")).expect("docs/SUMMARY.md exists");
    let listed: BTreeSet<String> = summary.lines().flat_map(link_targets).collect();
    let mut missing = Vec::new();
    for file in markdown_files().iter().filter(|f| f.starts_with(&docs)) {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        if name != "SUMMARY.md" && !listed.contains(&name) {
            missing.push(name);
        }
    }
    assert!(missing.is_empty(), "pages of docs/ missing from docs/SUMMARY.md: {missing:?}");
}

#[test]
fn the_readme_is_a_front_door() {
    let readme = std::fs::read_to_string(workspace().join("README.md")).unwrap();
    let lines = readme.lines().count();
    let words = readme.split_whitespace().count();
    assert!(lines <= 300 && words <= 3500, "README.md has {lines} lines and {words} words (at most 300 and 3 500)");
    for page in ["docs/running.md", "docs/board.md", "docs/gateway.md", "docs/hermes.md", "docs/settings.md"] {
        assert!(readme.contains(&format!("]({page}")), "README.md links the guide's {page}");
    }
}
