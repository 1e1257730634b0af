//! Reuse selection: which existing container (if any) a sandbox acquire attaches to, starts or replaces.

use serde::Serialize;

use crate::container::{ContainerState, ContainerSummary};
use crate::egress::BERTH_EGRESS_PREFIX;
use crate::label::{EGRESS_OFF, LABEL_EGRESS, LABEL_FIELDS, LABEL_MODE};
use crate::sandbox::{SandboxIdentity, changed_fields};

/// What acquire should do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum ReuseDecision {
    /// A running match: attach, no start, no create.
    Attach { id: String },
    /// A stopped or created match: start it, then attach.
    Start { id: String, prior: ContainerState },
    /// A match that breaks a security setting (a networked container when `docker_network: false` asks for an
    /// air-gapped one, whoever made it): remove it and create anew. `reason` is one line for the user.
    Replace { id: String, reason: String },
    /// A match whose spec fingerprint differs from the current one: remove it and create anew. `changed` names the
    /// fields that differ and their settings (empty when the container predates berth's per-field label).
    Recreate { id: String, old: String, new: String, changed: Vec<String> },
    /// Nothing to reuse: create a container.
    Create { reason: CreateReason },
}

/// Why acquire creates a container.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CreateReason {
    /// `docker_persist_across_processes` is false: no lookup, always fresh.
    OptOut,
    /// No container carries this identity's labels.
    NoMatch,
}

/// The inputs of [`select_reusable`] besides the candidates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReusePolicy {
    pub persist_across_processes: bool,
    pub recreate_on_config_change: bool,
    /// The fingerprint of the spec acquire would create now.
    pub fingerprint: String,
    /// The same spec's fingerprint in the encoding berth used before (`CreateSpec::legacy_fingerprint`): a container
    /// carrying it has not drifted, only been labelled by an older berth.
    pub legacy_fingerprint: Option<String>,
    /// `terminal.docker_network` is false: only a container whose network mode is `none` may be reused.
    pub air_gapped: bool,
    /// The internal network of berth's egress proxy the spec is on, when `terminal.docker_egress` lists
    /// destinations: only a container on that network may be reused.
    pub egress_network: Option<String>,
    /// The per-field digests of the spec acquire would create now (`CreateSpec::field_digests`), to name what drifted.
    pub fields: String,
}

/// Whether `c` may serve `identity`: same upstream labels, and either it is the identity's own berth container
/// ([`SandboxIdentity::owns`]: this home's, or an older berth's with no home label) or it has no berth identity (made
/// by hermes-agent, accepted as it is). Another home's container never matches. Ephemeral containers of other
/// processes never match.
pub fn is_candidate(identity: &SandboxIdentity, c: &ContainerSummary) -> bool {
    c.is_managed()
        && c.task_label() == Some(identity.task_label().as_str())
        && c.profile_label() == Some(identity.profile_label().as_str())
        && (c.identity().is_none() || identity.owns(c))
        && c.in_home(identity.home.as_deref())
        && c.label(LABEL_MODE) != Some("ephemeral")
        // hermes 0.21 keys reuse on its egress posture too; a container routed through its egress proxy is not
        // berth's to take over (berth has no proxy and would drop the routing).
        // berth's own proxied sandboxes (`berth-…`) are berth's: reused, or recreated on drift.
        && c.label(LABEL_EGRESS).is_none_or(|e| e == EGRESS_OFF || e.starts_with(BERTH_EGRESS_PREFIX))
        && !matches!(c.state, ContainerState::Removing | ContainerState::Dead)
}

/// Chooses what acquire does with the listed containers: running first, then the first listed, else create.
pub fn select_reusable(identity: &SandboxIdentity, listed: &[ContainerSummary], policy: &ReusePolicy) -> ReuseDecision {
    if !policy.persist_across_processes {
        return ReuseDecision::Create { reason: CreateReason::OptOut };
    }
    let candidates: Vec<&ContainerSummary> = listed.iter().filter(|c| is_candidate(identity, c)).collect();
    let Some(chosen) = candidates.iter().find(|c| c.state == ContainerState::Running).or(candidates.first()) else {
        return ReuseDecision::Create { reason: CreateReason::NoMatch };
    };
    // The lockdown check comes before the fingerprint and holds with `recreate_on_config_change: false` too: a
    // networked container must never serve an air-gapped request. An unknown mode fails closed.
    if policy.air_gapped && chosen.network_mode.as_deref() != Some("none") {
        let mode = chosen.network_mode.as_deref().unwrap_or("unknown");
        return ReuseDecision::Replace {
            id: chosen.id.clone(),
            reason: format!(
                "container {} is on network {mode:?} but terminal.docker_network is false; replacing it with an air-gapped one",
                &chosen.id[..12.min(chosen.id.len())]
            ),
        };
    }
    if let Some(net) = &policy.egress_network
        && chosen.network_mode.as_deref() != Some(net.as_str())
    {
        let mode = chosen.network_mode.as_deref().unwrap_or("unknown");
        return ReuseDecision::Replace {
            id: chosen.id.clone(),
            reason: format!(
                "container {} is on network {mode:?} but terminal.docker_egress routes it through {net}; replacing it",
                &chosen.id[..12.min(chosen.id.len())]
            ),
        };
    }
    if policy.recreate_on_config_change
        && let Some(old) = chosen.fingerprint()
        && old != policy.fingerprint
        && policy.legacy_fingerprint.as_deref() != Some(old)
    {
        return ReuseDecision::Recreate {
            id: chosen.id.clone(),
            old: old.to_owned(),
            new: policy.fingerprint.clone(),
            changed: changed_fields(chosen.label(LABEL_FIELDS), &policy.fields),
        };
    }
    if chosen.state == ContainerState::Running {
        ReuseDecision::Attach { id: chosen.id.clone() }
    } else {
        ReuseDecision::Start { id: chosen.id.clone(), prior: chosen.state.clone() }
    }
}
