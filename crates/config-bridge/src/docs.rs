//! The generated settings reference (`docs/settings.md`), rendered from the one table, and the precedence note
//! `config ls` prints; a test holds the checked-in file equal to [`settings_doc`].

use std::fmt::Write as _;

use crate::table::SETTINGS;

/// Berth's precedence and where hermes-agent differs, for `config ls` and the settings reference.
pub const PRECEDENCE_NOTE: &str = "precedence: default < config file < the profile's profiles/NAME/config.yaml < \
environment < -c; hermes-agent differs: there a `terminal:` key in config.yaml overrides its TERMINAL_* variable, here the environment wins over the file";

/// The sandbox lifecycle from create to reap, with the settings of each step (the guide's docs/sandboxes.md carries the same story).
const LIFECYCLE_DOC: &str = "
## Sandbox lifecycle

From create to reap, and the settings of each step:

1. **Create**: the first `berth run`/`sandbox ensure` of a task creates its sandbox (`terminal.docker_image`, the
   resource and mount settings); with `terminal.container_persistent` its `/root` and `/workspace` live in the host
   folder `<terminal.sandbox_dir>/docker/<profile>/<task>-<digest>`.
2. **Reuse**: later processes attach to it, start it when stopped, recreate it on drift
   (`terminal.docker_recreate_on_config_change`), but never while a command runs in it (the process that asked
   exits 125 with one line). With `terminal.docker_persist_across_processes: false` each process
   gets a throw-away sandbox, removed with its folder at release (`berth run --keep-files` keeps the folder).
3. **Idle stop**: `terminal.docker_idle_stop_seconds` (0: off; per profile
   `terminal.docker_idle_stop_seconds_overrides`): the gateway stops (never removes) a running persistent sandbox
   of any profile of its home with nothing inside but its keep-alive for that profile's period.
4. **Suspend**: `berth sandbox suspend` (or the gateway, with `terminal.docker_suspend_after_seconds`, 0: off; per
   profile `terminal.docker_suspend_after_seconds_overrides`; after that long idle as idle stop counts it, or stopped
   that long) snapshots the sandbox's files to a local image and removes its container; its folder stays and
   `sandbox ls` lists it `suspended`. The next `berth run`, worker or `sandbox ensure` of its task resumes it from its
   newest snapshot. A sandbox keeps `terminal.docker_snapshot_keep` snapshots; they go with it (`sandbox rm`, a
   release that removes it, the reaper removing its container); a suspended sandbox is never reaped nor its folder
   swept.
5. **Remove**: `berth sandbox rm` removes the sandbox and its folder (`--keep-files` keeps it; a task on a board keeps
   its folder), as root through a one-shot helper container when the sandbox's root user left files there, never
   through a symlink.
6. **Reap**: at each process's first sandbox (`terminal.docker_orphan_reaper`) and on every gateway cleanup pass
   (`terminal.docker_reap_interval_seconds`, 0: `max(60, terminal.lifetime_seconds)`): stopped sandboxes older than
   `2 × max(60, terminal.lifetime_seconds)`, and running throw-away ones whose owner died: on this host by pid, on
   another host sharing the engine by a lease the owner renews inside the sandbox every third of
   `terminal.docker_lease_seconds` (hosts need clocks in step).
7. **Folders**: the same pass (and `berth sandbox reap`) removes sandbox folders no container claims and no board task
   owns, once untouched for the reaper's threshold.
8. **Finished tasks' output**: a done task's workspace folder and worker log stay `kanban.retention_days` (0: until
   archived), or until the task is archived or removed, whichever comes first; `berth kanban prune [--dry-run]` does
   it now, the gateway on each cleanup pass (one line per pass).
";

/// Renders `docs/settings.md` from the table: the precedence, a row per setting, the sandbox lifecycle and the
/// `docker_extra_args` flags the engine's parser maps (`mapped_flags`: the Docker adapter's `MAPPED_FLAGS`).
pub fn settings_doc(mapped_flags: &[&str]) -> String {
    let mut s = String::from(
        "# Settings\n\n<!-- Generated from crates/config-bridge/src/table.rs by `cargo test`; do not edit. -->\n\n\
         Precedence: default < config file (`<home>/config.yaml`) < the profile's own file \
         (`<home>/profiles/<name>/config.yaml`, as in hermes-agent, where a profile is a home of its own) < \
         environment < `berth -c key=value`. A profile's file cannot set `kanban.database_url` or `kanban.host_id` \
         (the home's); a task's worker takes its assignee's `terminal.*` settings, the board's `kanban.*` ones are \
         the dispatcher's. A running gateway applies a change to either file at its next tick (see the guide's gateway page, docs/gateway.md).\n\
         hermes-agent differs: there a `terminal:` key in `config.yaml` overrides its `TERMINAL_*` variable; in berth \
         the environment wins over the file (`berth config ls` shows which source each value came from).\n\
         Booleans accept true/false/1/0/yes/no/on/off in any case.\n\
         Lists and maps are JSON in the environment and `-c` (`[\"a\",\"b\"]`, `{\"k\":\"v\"}`), native YAML in the file.\n\
         Invalid file or environment values warn and fall back to the default; a cap below 1 means no cap (as in \
         hermes-agent), but a cap that is not a whole number, or a per-profile cap map that does not parse, refuses \
         every command except `berth config …` (which fixes it) with one line naming the key, the value and where it \
         is set.\n\
         A key of `terminal:` or `kanban:` in the file that berth does not know is warned about on every command, with \
         the nearest setting; keys hermes-agent reads there (`terminal.backend`, `env_type`, `persistent_shell`, \
         `sudo_password`, `env_passthrough`, `shell_init_files`, `auto_source_bashrc`, `home_mode`, \
         `daemon_term_grace_seconds`, `credential_files`, `docker_snap_compat`, `ssh_*`, `singularity_*`, `modal_*`, \
         `daytona_*`, `vercel_*`; `kanban.orchestrator_profile`, `auto_decompose`, `auto_decompose_per_tick`, \
         `auto_promote_children`, `auto_subscribe_on_create`, `diagnostics`, `done_sub_retention_days`, \
         `acceptance_checks`, `dispatch_profiles`, `review_dispatch`, `reconcile_orphans`: every key hermes-agent \
         0.19–0.21 reads there) and other sections (hermes-agent's) are left alone.\n\n\
         | key | environment variable | type | default | meaning |\n|---|---|---|---|---|\n",
    );
    let mut rows = String::new();
    for e in SETTINGS {
        let default = if e.default.is_empty() { "(unset)".to_owned() } else { format!("`{}`", e.default) };
        let _ = writeln!(
            rows,
            "| `{}` | `{}` | {} | {} | {} |",
            e.key,
            e.env_var(),
            e.kind.as_str(),
            default,
            e.doc.replace('|', "\\|")
        );
    }
    s.push_str(&rows);
    s.push_str(LIFECYCLE_DOC);
    s.push_str(
        "\n## `terminal.docker_extra_args`\n\n\
         Berth creates sandboxes through the Engine API, so each `docker run` flag is mapped onto the create call. \
         Flags mapped (values as `docker run` takes them, `--flag value` or `--flag=value`):\n\n",
    );
    for flag in mapped_flags {
        let _ = writeln!(s, "- `{flag}`");
    }
    s.push_str(
        "\nAny other flag is refused with one line naming it, and nothing is created: client-side flags (`--rm`, \
         `-d`, `-i`, `-t`, `--env-file`, `--pull`, …) and flags that would break the sandbox (`--name`, \
         `--entrypoint`). With `terminal.docker_network: false`, a `--network` other than `none` is refused too.\n",
    );
    s.push_str(
        "\nWithout `terminal.docker_allow_host_access` (or its older name `terminal.docker_allow_host_mounts`), what \
         reaches the host past any mount is refused (one line naming the opt-in, at create and at `config set`, \
         however it is spelled: the check reads the create spec the flags made): `--privileged`; a `--cap-add` \
         beyond the engine's default capabilities, but for those that act only inside the sandbox's own namespaces \
         (listed below; `ALL` too; any case, with or without `CAP_`; behind an egress allowlist `NET_ADMIN` and \
         `NET_RAW` too, at create); a `--security-opt` that switches a confinement off (`apparmor`, `seccomp` \
         or `systempaths` `unconfined`, a seccomp profile other than `builtin`, `label=disable` or an unconfined \
         SELinux type, `writable-cgroups=true`, `no-new-privileges=false`); any `--cgroup-parent`; any `--device` \
         and `--device-cgroup-rule`; and `host` or `container:…` for `--pid`, `--ipc`, `--uts`, `--userns`, \
         `--cgroupns` and `--network`. `--gpus` needs no opt-in. The default capabilities: ",
    );
    let caps: Vec<String> = domain::sandbox::ENGINE_DEFAULT_CAPABILITIES.iter().map(|c| format!("`{c}`")).collect();
    let _ = write!(s, "{}. Those that act only inside the sandbox's own namespaces: ", caps.join(", "));
    let inside: Vec<String> = domain::sandbox::NAMESPACED_CAPABILITIES.iter().map(|c| format!("`{c}`")).collect();
    let _ = writeln!(
        s,
        "{} (tracing, its own network, priorities and locked memory of its own processes).",
        inside.join(", ")
    );
    s
}
