//! `berth --version`: the version, the commit it was built from, and the Engine API version it negotiates with the
//! engine `DOCKER_HOST` names (or `engine unreachable`), asked within [`ENGINE_BOUND`] so a hung engine cannot hang
//! it.

use std::time::Duration;

/// How long `--version` waits for the engine's ping.
pub const ENGINE_BOUND: Duration = Duration::from_secs(2);

/// The commit berth was built from (`build.rs`; `unknown` outside a git checkout).
pub const COMMIT: &str = env!("BERTH_COMMIT");

/// The first line: `berth 0.0.0 (commit 1a2b3c4d5e6f)`.
pub fn line() -> String {
    format!("berth {} (commit {COMMIT})", env!("CARGO_PKG_VERSION"))
}

/// The engine line: `engine: API 1.41 at unix:///var/run/docker.sock`, or `engine: unreachable at …: reason`.
pub fn engine_line(env: &config_bridge::EnvMap) -> String {
    let endpoint = env.get("DOCKER_HOST").filter(|h| !h.is_empty()).unwrap_or(crate::edge::open::DEFAULT_ENDPOINT);
    let asked = tokio::runtime::Builder::new_current_thread().enable_all().build().map(|rt| {
        rt.block_on(async { tokio::time::timeout(ENGINE_BOUND, crate::edge::open::open_engine(endpoint)).await })
    });
    match asked {
        Ok(Ok(Ok(rt))) => format!("engine: API {} at {endpoint}", rt.api_version()),
        Ok(Ok(Err(e))) => format!("engine unreachable: {e}"),
        Ok(Err(_)) => format!("engine unreachable at {endpoint}: no answer within {}s", ENGINE_BOUND.as_secs()),
        Err(e) => format!("engine unreachable: cannot start the async runtime: {e}"),
    }
}

/// Prints both lines on stdout.
pub fn print(env: &config_bridge::EnvMap) {
    crate::edge::output::line(&line());
    crate::edge::output::line(&engine_line(env));
}
