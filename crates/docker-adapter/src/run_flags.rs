//! `terminal.docker_extra_args`: `docker run` flags read into the domain's typed [`ExtraArgs`].
//!
//! hermes appends these flags to its `docker run` command line; berth speaks the Engine API, so every flag is
//! parsed here, in the Docker adapter, into the model the domain applies to the create spec (and checks: the mount
//! and host-access check reads the spec that results). A flag the create call can carry is mapped (devices, GPU
//! requests, ulimits, mounts, sysctls, …); a flag that has no API form, or that would break the sandbox contract,
//! is one [`SpecError`], never a silent drop, so a sandbox cannot quietly start without the GPUs or limits it was
//! asked for.
//!
//! This file walks the arguments (a flag, its value inline or next, the refused and the value-less ones);
//! `flags.rs` is the flag table and what each flag sets, `values.rs` the parsers of structured values, and
//! `mounts.rs` the `--mount` form.

use domain::ports::ExtraArgsParser;
use domain::sandbox::{ExtraArgs, SpecError};

mod flags;
mod mounts;
mod values;

pub use flags::MAPPED_FLAGS;
use values::bad;

/// The reader of `docker run` flags: the [`ExtraArgsParser`] of the Docker (and Podman) engine. It needs no
/// connection, so `config set` checks a value with it before any engine is reached.
#[derive(Clone, Copy, Debug, Default)]
pub struct DockerRunFlags;

impl ExtraArgsParser for DockerRunFlags {
    fn parse(&self, args: &[String]) -> Result<ExtraArgs, SpecError> {
        parse_run_flags(args)
    }
}

/// Reads `docker run`-style extra arguments in order, the last one winning, as upstream appends them last.
///
/// # Errors
/// [`SpecError::UnsupportedExtraArg`] for a flag the create call cannot carry, [`SpecError::BadExtraArg`] for a
/// value that does not parse.
fn parse_run_flags(args: &[String]) -> Result<ExtraArgs, SpecError> {
    let mut x = ExtraArgs::default();
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].as_str();
        i += 1;
        let (flag, inline) = split_flag(arg);
        if !flag.starts_with('-') {
            return Err(SpecError::UnsupportedExtraArg {
                flag: arg.to_owned(),
                why: "not a flag (an image or command cannot be given here)".into(),
            });
        }
        let flag = flags::canonical(flag);
        if let Some(why) = flags::refusal(flag) {
            return Err(SpecError::UnsupportedExtraArg { flag: flag.to_owned(), why: why.to_owned() });
        }
        if flags::is_bool_flag(flag) {
            let on = match inline.as_deref() {
                None => true,
                Some(b) => parse_flag_bool(b).ok_or_else(|| bad(flag, b, "expected true or false"))?,
            };
            flags::apply_bool(&mut x, flag, on);
            continue;
        }
        let v = match inline {
            Some(v) => v,
            None => {
                let Some(v) = args.get(i) else {
                    return Err(bad(flag, "", "needs a value"));
                };
                i += 1;
                v.clone()
            }
        };
        flags::apply_one(&mut x, flag, &v)?;
    }
    Ok(x)
}

/// Parses `--flag=<bool>` values as the docker CLI accepts them.
fn parse_flag_bool(raw: &str) -> Option<bool> {
    match raw.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "t" => Some(true),
        "false" | "0" | "f" => Some(false),
        _ => None,
    }
}

/// An argument's flag and the value given with it, if any: `--flag=value`, or a short flag with its value
/// attached (`-eA=1`, `-m512m`).
fn split_flag(arg: &str) -> (&str, Option<String>) {
    match arg.split_once('=') {
        Some((f, v)) if f.starts_with("--") => (f, Some(v.to_owned())),
        _ if arg.len() > 2 && arg.starts_with('-') && !arg.starts_with("--") => {
            let (f, v) = arg.split_at(2);
            (f, Some(v.strip_prefix('=').unwrap_or(v).to_owned()))
        }
        _ => (arg, None),
    }
}

#[cfg(test)]
mod tests;
