//! Tidy checks of the workspace itself: dependency direction, module docs, and where settings are read.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::workspace;

/// Crates `domain` must never reach through its normal dependencies. (`serde_json` is a data format, not a runtime:
/// the board's events are serialized once, in `domain::board::event`.)
const FORBIDDEN_IN_DOMAIN: &[&str] =
    &["bollard", "rusqlite", "postgres", "tokio-postgres", "tokio", "clap", "hyper", "tracing-subscriber", "async-std"];

#[test]
fn domain_reaches_no_runtime_docker_sqlite_or_cli_crate() {
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["metadata", "--format-version", "1", "--locked"])
        .current_dir(workspace())
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: BTreeMap<&str, &str> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap()))
        .collect();
    let nodes: BTreeMap<&str, Vec<&str>> = meta["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            let normal: Vec<&str> = n["deps"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["dep_kinds"].as_array().unwrap().iter().any(|k| k["kind"].is_null()))
                .map(|d| d["pkg"].as_str().unwrap())
                .collect();
            (n["id"].as_str().unwrap(), normal)
        })
        .collect();
    let domain = names.iter().find(|(_, n)| **n == "domain").map(|(id, _)| *id).expect("domain is a package");
    let mut seen = BTreeSet::new();
    let mut stack = vec![domain];
    while let Some(id) = stack.pop() {
        if seen.insert(id) {
            stack.extend(nodes.get(id).into_iter().flatten());
        }
    }
    let reached: Vec<&str> = seen.iter().map(|id| names[id]).filter(|n| FORBIDDEN_IN_DOMAIN.contains(n)).collect();
    assert!(reached.is_empty(), "domain reaches {reached:?} through its normal dependencies");
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() && p.file_name() != Some("target".as_ref()) {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn every_rust_file_opens_with_a_module_doc() {
    let mut files = Vec::new();
    for dir in ["crates", "xtask", "tests"] {
        rust_files(&workspace().join(dir), &mut files);
    }
    let missing: Vec<_> = files.iter().filter(|f| !std::fs::read_to_string(f).unwrap().starts_with("//!")).collect();
    assert!(missing.is_empty(), "files without a //! line: {missing:?}");
}

#[test]
fn only_config_bridge_names_setting_variables() {
    let mut files = Vec::new();
    rust_files(&workspace().join("crates"), &mut files);
    let offenders: Vec<_> = files
        .iter()
        .filter(|f| !f.starts_with(workspace().join("crates/config-bridge")))
        .filter(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            text.contains("\"TERMINAL_") || text.contains("\"KANBAN_")
        })
        .collect();
    assert!(offenders.is_empty(), "setting variables named outside config-bridge: {offenders:?}");
}

#[test]
fn no_setting_is_looked_up_by_its_key_string_outside_config_bridge() {
    let mut files = Vec::new();
    for dir in ["crates", "xtask", "tests/src", "tests/benches"] {
        rust_files(&workspace().join(dir), &mut files);
    }
    let lookups: Vec<String> = ["bool", "int", "float", "string", "list", "map", "cap", "value"]
        .iter()
        .flat_map(|m| [format!(".{m}(\"terminal."), format!(".{m}(\"kanban.")])
        .chain(["settings.bool(", "settings.int(", "settings.string("].map(String::from))
        .collect();
    let offenders: Vec<_> = files
        .iter()
        .filter(|f| !f.starts_with(workspace().join("crates/config-bridge")) && !f.ends_with("tidy.rs"))
        .filter(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            lookups.iter().any(|l| text.contains(l.as_str()))
        })
        .collect();
    assert!(
        offenders.is_empty(),
        "settings looked up by key (use the typed `settings.<section>.<key>`): {offenders:?}"
    );
}

#[test]
fn no_ignored_or_should_panic_tests() {
    let mut files = Vec::new();
    for dir in ["crates", "tests"] {
        rust_files(&workspace().join(dir), &mut files);
    }
    let needle_a = ["#[", "ignore]"].concat();
    let needle_b = ["#[", "should_panic"].concat();
    let offenders: Vec<_> = files
        .iter()
        .filter(|f| {
            let t = std::fs::read_to_string(f).unwrap();
            t.contains(&needle_a) || t.contains(&needle_b)
        })
        .collect();
    assert!(offenders.is_empty(), "{offenders:?}");
}

#[test]
fn architecture_md_names_every_crate() {
    let arch = std::fs::read_to_string(workspace().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md exists");
    for e in std::fs::read_dir(workspace().join("crates")).unwrap().flatten() {
        let name = e.file_name().into_string().unwrap();
        assert!(arch.contains(&format!("`crates/{name}`")), "ARCHITECTURE.md does not describe crates/{name}");
    }
    assert!(arch.contains("`xtask`") && arch.contains("`tests`"));
}

/// The direct normal dependencies of each workspace member, by package name (from `cargo metadata`).
fn direct_dependencies() -> BTreeMap<String, BTreeSet<String>> {
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["metadata", "--format-version", "1", "--locked", "--no-deps"])
        .current_dir(workspace())
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"].is_null())
                .map(|d| d["name"].as_str().unwrap().to_owned())
                .collect();
            (p["name"].as_str().unwrap().to_owned(), deps)
        })
        .collect()
}

/// The adapters are siblings around the core: none depends on another (the SQLite→PostgreSQL copy goes through a
/// dump of one and a load of the other, joined in `berth`), and only the SQLite store names the SQLite driver.
#[test]
fn no_adapter_depends_on_another_and_only_the_sqlite_store_uses_rusqlite() {
    let deps = direct_dependencies();
    let adapters = ["docker-adapter", "kanban-store", "kanban-postgres"];
    for a in adapters {
        let d = deps.get(a).unwrap_or_else(|| panic!("{a} is a workspace member"));
        for other in adapters.iter().chain(&["berth"]).filter(|o| **o != a) {
            assert!(!d.contains(*other), "{a} depends on {other}");
        }
    }
    // One core: the stores' only workspace dependency is `domain`, where the board's model, port and rules live.
    for store in ["kanban-store", "kanban-postgres"] {
        let internal: Vec<&String> = deps[store].iter().filter(|d| deps.contains_key(*d)).collect();
        assert_eq!(internal, ["domain"], "{store} depends on workspace crates other than domain");
    }
    let sqlite_users: Vec<&String> = deps
        .iter()
        .filter(|(n, d)| d.contains("rusqlite") && !["tests"].contains(&n.as_str()))
        .map(|(n, _)| n)
        .collect();
    assert_eq!(sqlite_users, ["kanban-store"], "rusqlite outside the SQLite store");
}

/// The settings a drift warning names for each create-spec field (`domain::sandbox::FIELD_SETTINGS`, which cannot
/// see the settings table) are real settings: a renamed setting fails here, not in an operator's warning.
#[test]
fn every_setting_a_drift_warning_names_is_in_the_table() {
    let known: BTreeSet<&str> = config_bridge::SETTINGS.iter().map(|s| s.key).collect();
    let mut named = 0;
    for (field, settings) in domain::sandbox::FIELD_SETTINGS {
        for key in settings.split(", ").filter(|k| k.starts_with("terminal.") || k.starts_with("kanban.")) {
            assert!(known.contains(key), "{field}: {key} is not a setting");
            named += 1;
        }
    }
    assert!(named > 15, "the table names settings ({named})");
}

/// `app`'s modules, each with the modules it names (`crate::a::b…`, `use crate::{…}` items, `super::…`), from the
/// source text before any `#[cfg(test)]`.
fn app_module_graph() -> BTreeMap<String, BTreeSet<String>> {
    module_graph(&workspace().join("crates/app/src"))
}

/// Each module of the crate whose sources are in `src` (its production part) with the modules it names.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let src = src.to_path_buf();
    let mut files = Vec::new();
    let mut dirs = vec![src.clone()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    let name = |p: &Path| -> String {
        let rel = p.strip_prefix(&src).unwrap().with_extension("");
        let parts: Vec<String> = rel.iter().map(|c| c.to_string_lossy().into_owned()).collect();
        let parts: Vec<String> = parts.into_iter().filter(|c| c != "mod" && c != "lib").collect();
        parts.join("::")
    };
    let modules: BTreeSet<String> = files.iter().map(|f| name(f)).collect();
    let resolve = |path: &str| -> Option<String> {
        let parts: Vec<&str> = path.split("::").collect();
        (1..=parts.len()).rev().map(|k| parts[..k].join("::")).find(|c| modules.contains(c))
    };
    let mut graph = BTreeMap::new();
    for f in &files {
        let m = name(f);
        let text = std::fs::read_to_string(f).unwrap();
        let text = text.split("#[cfg(test)]").next().unwrap_or_default();
        let parent = if f.ends_with("mod.rs") { m.clone() } else { m.rsplit_once("::").map_or("", |p| p.0).to_owned() };
        let mut named = BTreeSet::new();
        let words = |prefix: &str| -> Vec<String> {
            text.match_indices(prefix)
                .map(|(i, _)| {
                    text[i + prefix.len()..]
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                        .collect()
                })
                .collect()
        };
        for w in words("crate::") {
            named.extend(resolve(w.trim_end_matches(':')));
        }
        for group in text.split("use crate::{").skip(1) {
            for item in group.split('}').next().unwrap_or_default().split(',') {
                named.extend(resolve(item.trim().split("::{").next().unwrap_or_default().trim_end_matches(':')));
            }
        }
        for w in words("super::") {
            let full = if parent.is_empty() { w } else { format!("{parent}::{w}") };
            named.extend(resolve(full.trim_end_matches(':')));
        }
        named.remove(&m);
        graph.insert(m, named);
    }
    graph
}

/// Whether `graph` has a cycle (a depth-first search that meets a module on its own path).
fn has_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        g: &BTreeMap<String, BTreeSet<String>>,
        n: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == n) {
            return Some(path[i..].to_vec());
        }
        if !done.insert(n.to_owned()) {
            return None;
        }
        path.push(n.to_owned());
        for next in g.get(n).into_iter().flatten() {
            if let Some(c) = visit(g, next, path, done) {
                return Some(c);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|n| visit(graph, n, &mut Vec::new(), &mut done))
}

/// `app` is laid out by surface (edge ← sandbox ← board ← gateway ← web) with at most eight files at its top, and no
/// module imports one that imports it back, between surfaces or between files.
#[test]
fn app_is_laid_out_by_surface_without_import_cycles() {
    let files = graph_top_files();
    assert!(files.len() <= 8, "app has {} files at its top: {files:?}", files.len());
    let graph = app_module_graph();
    assert!(graph.len() > 40, "the module graph was read ({} modules)", graph.len());
    assert_eq!(has_cycle(&graph), None, "a cycle between app's files");
    let mut surfaces: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, named) in &graph {
        let top = m.split("::").next().unwrap_or_default().to_owned();
        let others: Vec<String> =
            named.iter().map(|n| n.split("::").next().unwrap_or_default().to_owned()).filter(|n| *n != top).collect();
        surfaces.entry(top).or_default().extend(others);
    }
    assert_eq!(has_cycle(&surfaces), None, "a cycle between app's surfaces");
    // The checker itself finds a cycle when there is one.
    let two = BTreeMap::from([
        ("a".to_owned(), BTreeSet::from(["b".to_owned()])),
        ("b".to_owned(), BTreeSet::from(["a".to_owned()])),
    ]);
    assert!(has_cycle(&two).is_some());
}

/// The `.rs` files directly in `crates/app/src`.
fn graph_top_files() -> Vec<String> {
    std::fs::read_dir(workspace().join("crates/app/src"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// The lines of `text` (1-based) that build a JSON object by its keys (`json!({`), before its `#[cfg(test)]` module.
fn json_objects_by_key(text: &str) -> Vec<usize> {
    let production = text.split("#[cfg(test)]").next().unwrap_or_default();
    production.lines().enumerate().filter(|(_, l)| l.contains("json!({")).map(|(i, _)| i + 1).collect()
}

/// Every output of the board, sandbox, gateway and web surfaces, and of `config …` and `profile …`, is a typed view (a
/// `Serialize` struct) that `--json`, the text and the dashboard print: none builds its JSON object key by key with
/// `json!`.
#[test]
fn app_outputs_are_typed_views_not_json_objects_built_by_key() {
    let mut files = vec![workspace().join("crates/app/src/config_cmd.rs")];
    for surface in ["board", "sandbox", "gateway", "web"] {
        rust_files(&workspace().join("crates/app/src").join(surface), &mut files);
    }
    let found: Vec<String> = files
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            json_objects_by_key(&text).into_iter().map(move |n| format!("{}:{n}", f.display()))
        })
        .collect();
    assert!(found.is_empty(), "JSON objects built by key instead of a typed view: {found:?}");
    // The checker itself finds one, and leaves a test module alone.
    let sample = "fn a() {}\nfn b() { json!({\"k\": 1}); }\n#[cfg(test)]\nmod tests { json!({\"k\": 1}); }\n";
    assert_eq!(json_objects_by_key(sample), vec![2]);
}

/// The longest production file and function allowed, in lines.
const FILE_MAX: usize = 600;
const FUNCTION_MAX: usize = 100;

/// Whether `path` holds test code only: a file named `tests.rs`, `*_tests.rs` or `test_util.rs`, or one under a
/// `tests` or `test_util` folder.
fn is_test_file(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    name == "tests.rs"
        || name.ends_with("_tests.rs")
        || name == "test_util.rs"
        || path.components().any(|c| matches!(c.as_os_str().to_str(), Some("tests" | "test_util")))
}

/// The production lines of a source file: those before its test module (a `#[cfg(test)]` at the line's start
/// followed by an inline `mod … {`); a `#[cfg(test)]` item inside an `impl` or a `mod NAME;` declaration does not end
/// them.
fn production_lines(text: &str) -> Vec<&str> {
    let lines: Vec<&str> = text.lines().collect();
    let end = (0..lines.len())
        .find(|&i| {
            lines[i] == "#[cfg(test)]"
                && lines.get(i + 1).is_some_and(|next| next.starts_with("mod ") && next.trim_end().ends_with('{'))
        })
        .unwrap_or(lines.len());
    lines[..end].to_vec()
}

/// Each function of `lines` (rustfmt-formatted) as (1-based line of its `fn`, name, length in lines from its `fn`
/// line to its closing brace). A body ends at the first `}` alone at the `fn` line's indent; a declaration without
/// a body (ending in `;`) is not a function here.
fn functions(lines: &[&str]) -> Vec<(usize, String, usize)> {
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let code = line.trim_start();
        let indent = &line[..line.len() - code.len()];
        let Some(at) = code.find("fn ") else { continue };
        let before = &code[..at];
        let qualifiers = ["pub", "pub(crate)", "pub(super)", "const", "async", "unsafe", "extern", "\"C\""];
        if !before.split_whitespace().all(|w| qualifiers.contains(&w) || w.starts_with("pub(")) {
            continue;
        }
        let name: String = code[at + 3..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if name.is_empty() {
            continue;
        }
        // Find where the signature ends: a body's `{` at a line's end, or `;` for a declaration.
        let Some(open) = (i..lines.len()).find(|&j| {
            let l = lines[j].trim_end();
            l.ends_with('{') || l.ends_with(';') || (j == i && l.ends_with('}'))
        }) else {
            continue;
        };
        let l = lines[open].trim_end();
        if l.ends_with(';') && !l.ends_with('{') {
            continue;
        }
        if open == i && l.ends_with('}') {
            found.push((i + 1, name, 1));
            continue;
        }
        let close = format!("{indent}}}");
        if let Some(end) = (open + 1..lines.len()).find(|&j| lines[j].trim_end() == close) {
            found.push((i + 1, name, end - i + 1));
        }
    }
    found
}

/// What a reader takes in at once: no production file over [`FILE_MAX`] lines and no production function over
/// [`FUNCTION_MAX`], in `crates/` and `xtask/` (test modules, `tests.rs`, `*_tests.rs`, `test_util` and `tests`
/// folders excluded).
#[test]
fn no_production_file_over_600_lines_nor_function_over_100() {
    let mut files = Vec::new();
    for dir in ["crates", "xtask"] {
        rust_files(&workspace().join(dir), &mut files);
    }
    files.sort();
    let mut over = Vec::new();
    let mut counted = 0;
    for f in files.iter().filter(|f| !is_test_file(f)) {
        let text = std::fs::read_to_string(f).unwrap();
        let lines = production_lines(&text);
        let rel = f.strip_prefix(workspace()).unwrap_or(f).display().to_string();
        if lines.len() > FILE_MAX {
            over.push(format!("{rel}: {} lines", lines.len()));
        }
        for (at, name, len) in functions(&lines) {
            counted += 1;
            if len > FUNCTION_MAX {
                over.push(format!("{rel}:{at}: fn {name}: {len} lines"));
            }
        }
    }
    assert!(counted > 1000, "the functions were read ({counted})");
    assert!(over.is_empty(), "over {FILE_MAX} lines a file or {FUNCTION_MAX} a function:\n{}", over.join("\n"));
}

/// The size checker itself: it measures a function from `fn` to its brace, skips declarations and one-liners' bodies,
/// and stops a file's production part at its test module only.
#[test]
fn the_size_checker_measures_functions_and_stops_at_the_test_module() {
    let sample = "impl A {\n    #[cfg(test)]\n    pub(crate) async fn a(\n        x: u8,\n    ) -> u8 {\n        x\n    }\n    fn \
                  b(&self);\n    fn c() {}\n}\n#[cfg(test)]\nmod x;\n#[cfg(test)]\nmod tests {\n    fn d() {\n    }\n}\n";
    let lines = production_lines(sample);
    assert_eq!(lines.len(), 12);
    assert_eq!(functions(&lines), vec![(3, "a".to_owned(), 5), (9, "c".to_owned(), 1)]);
    assert!(is_test_file(Path::new("crates/domain/src/test_util/fake_store.rs")));
    assert!(is_test_file(Path::new("crates/app/src/help_tests.rs")));
    assert!(!is_test_file(Path::new("crates/app/src/board/logs.rs")));
}

/// The marker that makes a `sleep(` in a test part of its scenario (a TTL that must lapse, a pause that is the fault,
/// a random kill point), on the line or the one above.
const SCENARIO_MARKER: &str = "// scenario:";

/// Hand-written polls not yet moved onto `support::wait_until`, by file: the count may shrink, never grow.
/// `exactly_once.rs`: `wait_progress` (which also fails on a stall, not only at a deadline) and the verdict poll of a
/// host's death (which records problems rather than panicking); `browser.rs`: two async polls of the page.
const POLLS_LEFT: &[(&str, usize)] = &[("exactly_once.rs", 2), ("browser.rs", 2)];

/// The lines of `text` (1-based) with a `sleep(` that carries no [`SCENARIO_MARKER`] on it or on the line above.
fn bare_sleeps(text: &str) -> Vec<usize> {
    let lines: Vec<&str> = text.lines().collect();
    (0..lines.len())
        .filter(|&i| lines[i].contains("sleep(") && !lines[i].trim_start().starts_with("//"))
        .filter(|&i| {
            let marked_above = i > 0 && lines[i - 1].contains(SCENARIO_MARKER);
            !lines[i].contains(SCENARIO_MARKER) && !marked_above
        })
        .map(|i| i + 1)
        .collect()
}

/// No sleep stands for "wait until": a test waits through `support::wait_until` (the one deadline poll, in
/// `support.rs`), and a `sleep(` elsewhere in `tests/src` is part of the scenario, marked `// scenario:` on its line or
/// the line above.
#[test]
fn tests_wait_by_polling_and_sleep_only_as_a_marked_scenario() {
    let mut files = Vec::new();
    rust_files(&workspace().join("tests/src"), &mut files);
    let mut found = Vec::new();
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        if name == "support.rs" || name == "tidy.rs" {
            continue;
        }
        let bare = bare_sleeps(&std::fs::read_to_string(f).unwrap());
        let allowed = POLLS_LEFT.iter().find(|(n, _)| *n == name).map_or(0, |(_, k)| *k);
        if bare.len() > allowed {
            found.push(format!("{name}: lines {bare:?} (allowed {allowed})"));
        }
    }
    assert!(
        found.is_empty(),
        "sleep( without `{SCENARIO_MARKER}` (poll with support::wait_until):\n{}",
        found.join("\n")
    );
    // The checker itself: a bare sleep is found; one marked on its line or the line above is not.
    let sample = "a();\nstd::thread::sleep(d);\n// scenario: a TTL lapses\nsleep(d);\nsleep(d); // scenario: a pause\n";
    assert_eq!(bare_sleeps(sample), vec![2]);
}

/// The files of `app` that open an adapter, and so may name its types: the engine's and the board's opener, and the
/// board's change watch.
const ADAPTER_OPENERS: &[&str] = &["edge/open.rs", "edge/watch.rs"];

/// Whether `text` names `ident` as a whole word.
fn names_ident(text: &str, ident: &str) -> bool {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(ident).any(|(i, _)| {
        !text[..i].chars().next_back().is_some_and(word) && !text[i + ident.len()..].chars().next().is_some_and(word)
    })
}

/// `app` holds the engine as `dyn Engine` and the board as `dyn BoardStore`: the adapters' own types (every public
/// type of `docker-adapter`, `kanban-store` and `kanban-postgres`: `DockerRuntime`, `SqliteKanbanStore`,
/// `PgKanbanStore`, `PgBoardListener`, …) are named only in the files that open them.
#[test]
fn adapter_types_are_named_in_app_only_by_their_openers() {
    let mut adapter_files = Vec::new();
    for adapter in ["docker-adapter", "kanban-store", "kanban-postgres"] {
        rust_files(&workspace().join("crates").join(adapter).join("src"), &mut adapter_files);
    }
    let types: BTreeSet<String> = adapter_files
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            text.lines()
                .filter_map(|l| ["pub struct ", "pub enum ", "pub trait "].iter().find_map(|p| l.strip_prefix(p)))
                .map(|rest| rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>())
                .collect::<Vec<_>>()
        })
        .collect();
    for known in ["DockerRuntime", "SqliteKanbanStore", "PgKanbanStore"] {
        assert!(types.contains(known), "the adapters' public types were not found: {types:?}");
    }
    let app = workspace().join("crates/app/src");
    let mut files = Vec::new();
    rust_files(&app, &mut files);
    let found: Vec<String> = files
        .iter()
        .filter(|f| !ADAPTER_OPENERS.iter().any(|o| f.ends_with(o)))
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            let rel = f.strip_prefix(&app).unwrap().display().to_string();
            let named: Vec<String> = types.iter().filter(|t| names_ident(&text, t)).cloned().collect();
            named.into_iter().map(move |t| format!("{rel} names {t}"))
        })
        .collect();
    assert!(found.is_empty(), "adapter types named outside their openers ({ADAPTER_OPENERS:?}): {found:?}");
    assert!(names_ident("x: &DockerRuntime,", "DockerRuntime") && !names_ident("MyDockerRuntimeX", "DockerRuntime"));
}

/// `docs/settings.md` is the table's rendering, with the `docker_extra_args` flags the Docker adapter maps.
#[test]
fn settings_doc_is_current() {
    let path = workspace().join("docs/settings.md");
    let want = config_bridge::settings_doc(docker_adapter::MAPPED_FLAGS);
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    if have != want {
        std::fs::write(&path, &want).unwrap();
        panic!("docs/settings.md was out of date and has been regenerated; commit it");
    }
}

/// The Docker adapter implements each port method in the trait's impl, never also as an inherent method of
/// `DockerRuntime` that the impl delegates to: one place per operation, reached through the port.
#[test]
fn the_docker_adapter_has_no_inherent_twin_of_a_port_method() {
    let mut ports = Vec::new();
    rust_files(&workspace().join("crates/domain/src/ports"), &mut ports);
    ports.push(workspace().join("crates/domain/src/ports.rs"));
    let fn_name = |l: &str| -> Option<String> {
        let l = l.trim_start();
        let l = l.strip_prefix("pub(crate) ").or_else(|| l.strip_prefix("pub ")).unwrap_or(l);
        let rest = l.strip_prefix("async fn ").or_else(|| l.strip_prefix("fn "))?;
        Some(rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect())
    };
    let port_methods: BTreeSet<String> = ports
        .iter()
        .flat_map(|f| std::fs::read_to_string(f).unwrap().lines().filter_map(fn_name).collect::<Vec<_>>())
        .collect();
    assert!(port_methods.contains("exec_io") && port_methods.contains("kill_marked"), "{port_methods:?}");
    let mut files = Vec::new();
    rust_files(&workspace().join("crates/docker-adapter/src"), &mut files);
    let mut twins = Vec::new();
    for f in &files {
        let mut inherent = false;
        for l in std::fs::read_to_string(f).unwrap().lines() {
            if l.starts_with("impl ") {
                inherent = l.starts_with("impl DockerRuntime {");
            } else if l == "}" {
                inherent = false;
            } else if inherent && l.starts_with("    ") && !l.starts_with("     ") {
                twins.extend(fn_name(l).filter(|n| port_methods.contains(n)).map(|n| format!("{}: {n}", f.display())));
            }
        }
    }
    assert!(twins.is_empty(), "inherent methods of DockerRuntime named like a port's: {twins:?}");
}

/// The lines of `text` that write a run's end past `record_run_end`: a store's `complete`, `fail` or `requeue` called
/// on a board handle (`b`, `s`, `store`, `board`).
fn run_end_writes(text: &str) -> Vec<usize> {
    let calls = ["complete(", "fail(", "requeue("];
    let handles = ["b.", "s.", "board.", "(**b).", "(**s)."];
    production_lines(text)
        .iter()
        .enumerate()
        .filter(|(_, l)| {
            handles
                .iter()
                .any(|h| calls.iter().any(|c| l.contains(&format!("{h}{c}")) && !l.contains(&format!("self.{c}"))))
        })
        .map(|(i, _)| i + 1)
        .collect()
}

#[test]
fn every_run_end_in_app_goes_through_record_run_end() {
    let mut files = Vec::new();
    rust_files(&workspace().join("crates/app/src"), &mut files);
    let found: Vec<String> = files
        .iter()
        .filter(|f| !is_test_file(f))
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            run_end_writes(&text).into_iter().map(move |n| format!("{}:{n}", f.display()))
        })
        .collect();
    assert!(found.is_empty(), "a run's end written past domain::board::record_run_end: {found:?}");
    // The checker finds one, and leaves the worker's own method alone.
    assert_eq!(run_end_writes("fn a() {\n    b.complete(t, None, None, None, now)\n}\n"), vec![2]);
    assert!(run_end_writes("fn a() {\n    self.fail(\"failed\", e, None)\n}\n").is_empty());
}

/// The largest set of modules that all reach each other in `graph` (a strongly connected component).
fn largest_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> BTreeSet<String> {
    let reach = |from: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_owned()];
        while let Some(n) = todo.pop() {
            for next in graph.get(&n).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    todo.push(next.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&String, BTreeSet<String>> = graph.keys().map(|n| (n, reach(n))).collect();
    graph
        .keys()
        .map(|n| {
            let mut scc: BTreeSet<String> =
                reached[n].iter().filter(|m| reached.get(m).is_some_and(|r| r.contains(n))).cloned().collect();
            scc.insert(n.clone());
            scc
        })
        .max_by_key(BTreeSet::len)
        .unwrap_or_default()
}

/// `domain`'s files import each other in one direction, but for pairs (a module and the one it was split from).
#[test]
fn domain_has_no_import_cycle_of_more_than_two_files() {
    let graph = module_graph(&workspace().join("crates/domain/src"));
    assert!(graph.len() > 30, "the module graph was read ({} modules)", graph.len());
    let cycle = largest_cycle(&graph);
    assert!(cycle.len() <= 2, "{} of domain's files import each other: {cycle:?}", cycle.len());
    let three = BTreeMap::from([
        ("a".to_owned(), BTreeSet::from(["b".to_owned()])),
        ("b".to_owned(), BTreeSet::from(["c".to_owned()])),
        ("c".to_owned(), BTreeSet::from(["a".to_owned()])),
    ]);
    assert_eq!(largest_cycle(&three).len(), 3, "the checker finds a cycle of three");
}
