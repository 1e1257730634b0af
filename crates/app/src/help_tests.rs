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
