//! Failures and their exit codes: the one named table of codes ([`Exit`], [`EXIT_CODES`]) and the mapping of
//! library errors onto it.

use std::fmt;

/// Every exit code berth gives, named once (the way cargo-nextest writes its conventions down). `berth run` and the
/// built-in worker otherwise pass the command's own code through.
#[derive(Debug)]
pub struct Exit;

impl Exit {
    /// Success.
    pub const OK: u8 = 0;
    /// A failure after the command ran, or of a command that runs none.
    pub const FAILURE: u8 = 1;
    /// Bad usage or invalid input; nothing was changed.
    pub const USAGE: u8 = 2;
    /// `gateway status`: the gateway is not running (as `systemctl status` and LSB init scripts say it).
    pub const NOT_RUNNING: u8 = 3;
    /// The command ran past its timeout and was killed with everything it started.
    pub const TIMEOUT: u8 = 124;
    /// Berth or the container engine failed before the command ran.
    pub const ENGINE: u8 = 125;
    /// The command exists but cannot be executed (passed through from the sandbox).
    pub const NOT_EXECUTABLE: u8 = 126;
    /// The command was not found (passed through from the sandbox).
    pub const NOT_FOUND: u8 = 127;
    /// `berth run`'s stdout reader went away (128 + SIGPIPE's 13): the command was stopped, as a shell's
    /// pipeline ends a writer whose reader is gone.
    pub const BROKEN_PIPE: u8 = 141;
    /// Interrupted by SIGINT (128 + 2).
    pub const INTERRUPTED: u8 = 130;
    /// Stopped by SIGTERM (128 + 15).
    pub const TERMINATED: u8 = 143;
}

/// The table of [`Exit`] codes with their meaning, for the docs and their test.
pub const EXIT_CODES: &[(u8, &str)] = &[
    (Exit::OK, "success"),
    (Exit::FAILURE, "failure"),
    (Exit::USAGE, "usage or invalid input; nothing changed"),
    (Exit::NOT_RUNNING, "`gateway status`: the gateway is stopped"),
    (Exit::TIMEOUT, "the command timed out and was killed"),
    (Exit::ENGINE, "berth or the engine failed before the command ran"),
    (Exit::NOT_EXECUTABLE, "the command cannot be executed"),
    (Exit::NOT_FOUND, "the command was not found"),
    (Exit::BROKEN_PIPE, "`berth run`: stdout's reader went away; the command was stopped"),
    (Exit::INTERRUPTED, "interrupted (SIGINT)"),
    (Exit::TERMINATED, "terminated (SIGTERM)"),
];

/// A failure with the exit code it maps to and one actionable line.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
    /// The board or the engine could not be reached or failed on its side (`StoreError::is_transient`,
    /// `RuntimeError::is_infrastructure`): an outage to wait out, not a fault of what was asked.
    pub transient: bool,
}

impl Failure {
    /// Bad usage or invalid input (exit 2).
    pub fn usage(message: impl Into<String>) -> Self {
        Self { code: Exit::USAGE, message: message.into(), transient: false }
    }

    pub fn usage_of(e: impl fmt::Display) -> Self {
        Self::usage(e.to_string())
    }

    /// The container engine failed (exit 125).
    pub fn engine(message: impl Into<String>) -> Self {
        Self { code: Exit::ENGINE, message: message.into(), transient: false }
    }

    /// Anything else (exit 1).
    pub fn other(message: impl Into<String>) -> Self {
        Self { code: Exit::FAILURE, message: message.into(), transient: false }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<domain::ports::RuntimeError> for Failure {
    fn from(e: domain::ports::RuntimeError) -> Self {
        use domain::ports::RuntimeError as R;
        let mut f = match &e {
            R::Unavailable { .. } => Self::engine(format!("{e} (start it, or point DOCKER_HOST at a running engine)")),
            _ => Self::engine(e.to_string()),
        };
        // Whatever the engine's fault carries it through (an egress route's setup, a sandbox's request): not the
        // task's.
        f.transient = e.is_infrastructure();
        f
    }
}

impl From<domain::service::SandboxError> for Failure {
    fn from(e: domain::service::SandboxError) -> Self {
        use domain::service::SandboxError as S;
        match e {
            S::Runtime(r) => r.into(),
            S::StartFailed { name, source } => {
                let mut f = Self::engine(format!("container {name} was created but would not start: {source}"));
                f.transient = source.is_infrastructure();
                f
            }
            other => Self::engine(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::EXIT_CODES;

    #[test]
    fn every_exit_code_is_documented_in_the_guide() {
        let readme = include_str!("../../../../docs/running.md");
        let section = readme.split("## Exit codes").nth(1).expect("docs/running.md has an `## Exit codes` section");
        for (code, meaning) in EXIT_CODES {
            assert!(section.contains(&format!("| {code} | {meaning} |")), "docs/running.md lacks exit code {code}");
        }
    }
}
