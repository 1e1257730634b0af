//! Failures and their exit codes: 2 usage or invalid input, 125 berth failed before the command ran, 1 otherwise.

use std::fmt;

/// A failure with the exit code it maps to and one actionable line.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    /// Bad usage or invalid input (exit 2).
    pub fn usage(message: impl Into<String>) -> Self {
        Self { code: 2, message: message.into() }
    }

    pub fn usage_of(e: impl fmt::Display) -> Self {
        Self::usage(e.to_string())
    }

    /// The container engine failed (exit 125).
    pub fn engine(message: impl Into<String>) -> Self {
        Self { code: 125, message: message.into() }
    }

    /// Anything else (exit 1).
    pub fn other(message: impl Into<String>) -> Self {
        Self { code: 1, message: message.into() }
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
        match &e {
            R::Unavailable { .. } => Self::engine(format!("{e} (start it, or point DOCKER_HOST at a running engine)")),
            _ => Self::engine(e.to_string()),
        }
    }
}

impl From<domain::service::SandboxError> for Failure {
    fn from(e: domain::service::SandboxError) -> Self {
        use domain::service::SandboxError as S;
        match e {
            S::Runtime(r) => r.into(),
            S::StartFailed { name, source } => {
                Self::engine(format!("container {name} was created but would not start: {source}"))
            }
            other => Self::engine(other.to_string()),
        }
    }
}
