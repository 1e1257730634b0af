//! Why a worker's run in its sandbox gave no exit code: the container engine did not answer (infrastructure, not
//! the task: its run is requeued without counting a failure) or anything else (the task's failure).

use domain::service;

use crate::edge::error::Failure;

/// Why a run in the sandbox gave no exit code.
pub enum SandboxFault {
    /// The container engine did not answer (unreachable, or a call ran past its bound): infrastructure, not the task.
    Infra(Failure),
    Other(Failure),
}

impl SandboxFault {
    /// The failure, whichever kind.
    pub fn into_failure(self) -> Failure {
        match self {
            Self::Infra(f) | Self::Other(f) => f,
        }
    }
}

impl From<Failure> for SandboxFault {
    fn from(f: Failure) -> Self {
        Self::Other(f)
    }
}

impl From<service::SandboxError> for SandboxFault {
    fn from(e: service::SandboxError) -> Self {
        use domain::ports::RuntimeError as R;
        match e {
            service::SandboxError::Runtime(r @ (R::Unavailable { .. } | R::Timeout(_))) => Self::Infra(r.into()),
            other => Self::Other(other.into()),
        }
    }
}
