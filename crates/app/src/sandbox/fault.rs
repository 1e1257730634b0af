//! Why a worker's run in its sandbox gave no exit code: the container engine failed (infrastructure, not the task:
//! its run is requeued without counting a failure; which engine errors count, `RuntimeError::is_infrastructure`) or
//! anything else (the task's failure).

use domain::service;

use crate::edge::error::Failure;

/// Why a run in the sandbox gave no exit code.
pub enum SandboxFault {
    /// The container engine failed (unreachable, a call ran past its bound, a server error): infrastructure.
    Infra(Failure),
    /// The sandbox was stopped or removed under the command (an operator's `berth sandbox stop|rm`, `docker stop`,
    /// the engine's restart): not the task's failure. Its name and the command's exit code.
    Stopped(String, i64),
    Other(Failure),
}

impl SandboxFault {
    /// The failure, whichever kind.
    pub fn into_failure(self) -> Failure {
        match self {
            Self::Infra(f) | Self::Other(f) => f,
            Self::Stopped(name, code) => {
                Failure::other(format!("the sandbox {name} was stopped under the command (exit {code})"))
            }
        }
    }
}

impl From<Failure> for SandboxFault {
    /// An engine fault met on the way (setting up the egress route, building the request) stays infrastructure.
    fn from(f: Failure) -> Self {
        if f.transient { Self::Infra(f) } else { Self::Other(f) }
    }
}

impl From<service::SandboxError> for SandboxFault {
    fn from(e: service::SandboxError) -> Self {
        use service::SandboxError as S;
        match e {
            S::Runtime(r) if r.is_infrastructure() => Self::Infra(r.into()),
            S::StartFailed { ref source, .. } if source.is_infrastructure() => Self::Infra(e.into()),
            other => Self::Other(other.into()),
        }
    }
}
