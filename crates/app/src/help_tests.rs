//! Help that teaches: every command, argument and option of the CLI says what it is for.

use clap::CommandFactory;

use crate::cli::Cli;

/// Paths (`berth kanban create --parent`) of arguments and commands without help text.
fn missing_help(cmd: &clap::Command, path: &str, out: &mut Vec<String>) {
    for arg in cmd.get_arguments() {
        let id = arg.get_id().as_str();
        if arg.is_hide_set() || id == "help" || id == "version" {
            continue;
        }
        if arg.get_help().is_none() && arg.get_long_help().is_none() {
            out.push(format!("{path} <{id}>"));
        }
    }
    for sub in cmd.get_subcommands() {
        let here = format!("{path} {}", sub.get_name());
        if sub.get_about().is_none() && sub.get_long_about().is_none() {
            out.push(here.clone());
        }
        missing_help(sub, &here, out);
    }
}

#[test]
fn every_command_argument_and_option_has_help() {
    let mut missing = Vec::new();
    missing_help(&Cli::command(), "berth", &mut missing);
    assert!(missing.is_empty(), "without help text:\n{}", missing.join("\n"));
}

#[test]
fn the_cli_is_well_formed() {
    Cli::command().debug_assert();
}

/// Every `(path, long name)` of an option whose short form is `c`, over the whole command tree.
fn shorts(cmd: &clap::Command, path: &str, c: char, out: &mut Vec<(String, String)>) {
    for arg in cmd.get_arguments().filter(|a| a.get_short() == Some(c)) {
        out.push((path.to_owned(), arg.get_long().unwrap_or("").to_owned()));
    }
    for sub in cmd.get_subcommands() {
        shorts(sub, &format!("{path} {}", sub.get_name()), c, out);
    }
}

/// README: "`-t` means `--tty` wherever it exists; `--task` has no short form". Found by a new user (issue 25):
/// `sandbox denials -t ID` took `-t` for `--task`.
#[test]
fn short_t_is_tty_everywhere() {
    let mut found = Vec::new();
    shorts(&Cli::command(), "berth", 't', &mut found);
    let wrong: Vec<_> = found.iter().filter(|(_, long)| long != "tty").collect();
    assert!(wrong.is_empty(), "-t is not --tty in: {wrong:?}");
    assert!(found.iter().any(|(p, _)| p == "berth run"), "{found:?}");
}

/// The words of one shell command line, split at the first unquoted separator of another command (`|`, `&`, `;`,
/// `>`, `<`, `#`): quotes and backslashes as the shell takes them, variables left as they are.
fn shell_segments(line: &str) -> Vec<Vec<String>> {
    let (mut segments, mut words, mut word) = (Vec::new(), Vec::new(), None::<String>);
    let mut chars = line.chars().peekable();
    let mut quote = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.get_or_insert_with(String::new).push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                word.get_or_insert_with(String::new);
            }
            (None, '\\') => word.get_or_insert_with(String::new).extend(chars.next()),
            (None, ' ' | '\t') => words.extend(word.take()),
            (None, '|' | '&' | ';' | '>' | '<' | '#') => {
                words.extend(word.take());
                segments.push(std::mem::take(&mut words));
                if c == '#' {
                    break;
                }
            }
            (None, c) => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    segments.push(words);
    segments.into_iter().filter(|s| !s.is_empty()).collect()
}

/// The `berth …` commands of the README's and the guide's shell examples (```sh blocks), with where they are.
fn documented_commands() -> Vec<(String, Vec<String>)> {
    let docs = [
        ("README.md", include_str!("../../../README.md")),
        ("docs/running.md", include_str!("../../../docs/running.md")),
        ("docs/board.md", include_str!("../../../docs/board.md")),
        ("docs/gateway.md", include_str!("../../../docs/gateway.md")),
        ("docs/dashboard.md", include_str!("../../../docs/dashboard.md")),
        ("docs/sandboxes.md", include_str!("../../../docs/sandboxes.md")),
        ("docs/egress.md", include_str!("../../../docs/egress.md")),
        ("docs/configuration.md", include_str!("../../../docs/configuration.md")),
        ("docs/hermes.md", include_str!("../../../docs/hermes.md")),
    ];
    let mut out = Vec::new();
    for (file, text) in docs {
        let mut in_sh = false;
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("```") {
                in_sh = !in_sh && line.trim_start().trim_start_matches('`').starts_with("sh");
                continue;
            }
            if !in_sh {
                continue;
            }
            for words in shell_segments(line) {
                // `for i in …; do berth …` and `sudo berth …` reach berth after a keyword.
                let start = words.iter().position(|w| w == "berth");
                if let Some(start) =
                    start.filter(|&i| words[..i].iter().all(|w| ["do", "then", "sudo"].contains(&w.as_str())))
                {
                    out.push((format!("{file}:{}", n + 1), words[start..].to_vec()));
                }
            }
        }
    }
    out
}

#[test]
fn every_command_the_readme_and_the_guide_show_parses() {
    use clap::Parser;
    let commands = documented_commands();
    assert!(commands.len() > 40, "the examples were found: {}", commands.len());
    let mut wrong = Vec::new();
    for (place, words) in &commands {
        let Err(e) = Cli::try_parse_from(words) else { continue };
        if !matches!(e.kind(), clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion) {
            let why = e.render().to_string();
            wrong.push(format!("{place}: {}: {}", words.join(" "), why.lines().next().unwrap_or("")));
        }
    }
    assert!(wrong.is_empty(), "examples that berth refuses:\n{}", wrong.join("\n"));
}

#[test]
fn shell_segments_split_as_the_shell_does() {
    let s = shell_segments(r#"berth kanban create "a b" --command 'x | y' && berth kanban ls # note"#);
    assert_eq!(s, vec![vec!["berth", "kanban", "create", "a b", "--command", "x | y"], vec!["berth", "kanban", "ls"]]);
    assert_eq!(shell_segments("for i in 1 2; do berth run --task t$i -- true; done")[1][..3], ["do", "berth", "run"]);
}
