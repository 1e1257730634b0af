//! Egress by allowlist at the edge: setting up a policy's internal network and proxy before a sandbox is created on
//! it, the proxy itself (`proxy.rs`, `dns.rs`), and `berth sandbox denials`, which shows what the proxies refused.

pub mod credentials;
mod denial_log;
mod dns;
pub mod intercept;
pub mod proxy;
mod shared;
mod tls;

use std::collections::HashMap;
use std::path::PathBuf;

use domain::egress::{EgressPolicy, EgressRoute, LABEL_EGRESS_PROXY, egress_name};
use domain::label::LABEL_HOME;
use domain::ports::{EgressSetup, Engine};

use crate::edge::context::Ctx;
use crate::edge::error::Failure;
use crate::edge::output;

/// The denial log every proxy of a home appends to (JSON lines), under `<home>/egress/`.
pub fn log_dir(ctx: &Ctx) -> PathBuf {
    ctx.home.join("egress")
}

const LOG_FILE: &str = "denied.jsonl";

/// Makes sure `policy`'s internal network and proxy run; returns where the sandbox attaches.
///
/// # Errors
/// A usage failure on Podman (refused), an engine failure, or one line when the proxy does not stay up.
pub async fn ensure_route(ctx: &Ctx, rt: &dyn Engine, policy: &EgressPolicy) -> Result<EgressRoute, Failure> {
    if rt.is_podman().await? {
        return Err(Failure::usage(
            "terminal.docker_egress lists destinations, which berth enforces with an internal Docker network and its own proxy container; Podman's compatible socket cannot create that here: use docker_egress all or none with Podman",
        ));
    }
    let outside = ctx.settings.terminal.docker_egress_network.trim().to_owned();
    let outside = if outside.is_empty() { "bridge".to_owned() } else { outside };
    let home = ctx.home_id();
    let name = egress_name(&home, policy, &outside);
    let dir = log_dir(ctx);
    std::fs::create_dir_all(&dir).map_err(|e| Failure::other(format!("cannot create {}: {e}", dir.display())))?;
    let exe = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .map_err(|e| Failure::other(format!("cannot find berth's own binary for the egress proxy: {e}")))?;
    let digest = name.rsplit('-').next().unwrap_or_default().to_owned();
    let setup = EgressSetup {
        name: name.clone(),
        labels: HashMap::from([(LABEL_HOME.to_owned(), home), (LABEL_EGRESS_PROXY.to_owned(), digest.clone())]),
        image: ctx.settings.terminal.docker_image.clone(),
        exe: exe.display().to_string(),
        log_dir: dir.display().to_string(),
        user: Some(crate::edge::process::user_spec()),
        outside,
        args: ["egress-proxy", "--policy", &policy.to_string(), "--log", &format!("/egress/{LOG_FILE}")]
            .map(String::from)
            .to_vec(),
        seed: u8::from_str_radix(&digest[..2.min(digest.len())], 16).unwrap_or(0),
    };
    // One setup at a time per home: engines before API 1.44 create a second network of the same name when two
    // processes race (bollard cannot ask them not to), and every name here is this home's.
    let _lock = setup_lock(&dir).await?;
    let route = rt.ensure_egress(&setup).await?;
    if let Some(words) = rt.proxy_down(&format!("{name}-proxy")).await? {
        return Err(Failure::other(format!(
            "the egress proxy {name}-proxy is not running (image {}): {words}",
            setup.image
        )));
    }
    Ok(route)
}

/// Takes `<home>/egress/.setup.lock` (released when the file is dropped), waiting off the runtime's thread.
async fn setup_lock(dir: &std::path::Path) -> Result<std::fs::File, Failure> {
    let path = dir.join(".setup.lock");
    let fail = |e: std::io::Error| Failure::other(format!("cannot lock {}: {e}", dir.join(".setup.lock").display()));
    let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path).map_err(fail)?;
    tokio::task::spawn_blocking(move || file.lock().map(|()| file))
        .await
        .map_err(|e| Failure::other(format!("cannot lock {}: {e}", path.display())))?
        .map_err(fail)
}

/// `berth sandbox denials`: what the egress proxies of this home refused, oldest first (the log and the older file
/// its rotation kept). `--tail N` reads from the end: N rows cost N rows, whatever the log's size.
///
/// # Errors
/// A failure when the log exists but cannot be read.
pub fn denials(ctx: &Ctx, task: Option<&str>, tail: Option<usize>) -> Result<u8, Failure> {
    let path = log_dir(ctx).join(LOG_FILE);
    let wanted = task.map(|t| domain::label::LabelValue::sanitize(t).as_str().to_owned());
    let limit = tail.unwrap_or(usize::MAX);
    let mut rows: Vec<serde_json::Value> = Vec::new();
    for file in [path.clone(), denial_log::rotated(&path)] {
        if rows.len() >= limit {
            break;
        }
        denial_log::lines_from_end(&file, |line| {
            let row = serde_json::from_slice::<serde_json::Value>(line).ok();
            if let Some(v) = row.filter(|v| wanted.as_deref().is_none_or(|t| v["task"].as_str() == Some(t))) {
                rows.push(v);
            }
            rows.len() < limit
        })
        .map_err(|e| Failure::other(format!("cannot read {}: {e}", file.display())))?;
    }
    rows.reverse();
    if ctx.json {
        output::json(&serde_json::Value::Array(rows));
        return Ok(0);
    }
    let field = |v: &serde_json::Value, k: &str| v[k].as_str().unwrap_or("").to_owned();
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|v| {
            let count = v["count"].as_u64().unwrap_or(1).to_string();
            let mut row: Vec<String> =
                ["time", "task", "source", "kind", "destination", "reason"].iter().map(|k| field(v, k)).collect();
            row.push(count);
            row
        })
        .collect();
    output::table(&["TIME", "TASK", "SOURCE", "KIND", "DESTINATION", "REASON", "COUNT"], &table);
    Ok(0)
}
