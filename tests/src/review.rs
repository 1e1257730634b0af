//! Review and typed blocks (issue 40), through the binary on SQLite and PostgreSQL: a `--review` task waits in
//! review, `request-changes` runs it again with the note on its record and in the run's environment, `approve` makes
//! it done and promotes its child; `review` on a running task stops its worker; a typed block: a dependency waits
//! in todo (or stays blocked as needs-input), the same block twice lands in triage, a positional reason is recorded,
//! an unknown kind is refused in one line with the task untouched.
//!
//! Each home's worker is `kanban.worker_command` under the home's runner (`kanban.worker_exit_outcome`): a script that
//! appends the run's `BERTH_REVIEW_NOTE` (or `-`) to a file, blocks its own task with a kind when a `block-<task>`
//! file exists (on PostgreSQL through its worker's socket), then sleeps while a `slow-<task>` file exists.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::{Home, wait_until};

/// A home with profile `alpha` and the worker script; the file each run's note goes to.
fn home_with_worker(home: Home) -> (Home, PathBuf) {
    home.ok(&["profile", "create", "alpha"]);
    let notes = home.path().join("notes");
    let script = home.path().join("worker.sh");
    let dir = home.path().display().to_string();
    let berth = crate::support::berth_bin().display().to_string();
    let text = format!(
        "printf '%s\\n' \"${{BERTH_REVIEW_NOTE:--}}\" >> '{}'\n\
         if [ -e '{dir}/block-'\"$BERTH_KANBAN_TASK\" ]; then\n\
           '{berth}' kanban block \"$BERTH_KANBAN_TASK\" 'needs a key' --kind needs-input || exit 9\n\
         fi\n\
         while [ -e '{dir}/slow-'\"$BERTH_KANBAN_TASK\" ]; do sleep 0.1; done\nexit 0\n",
        notes.display()
    );
    std::fs::write(&script, text).unwrap();
    home.ok(&["config", "set", "kanban.worker_command", &format!("sh {}", script.display())]);
    home.ok(&["config", "set", "kanban.worker_exit_outcome", "true"]);
    (home, notes)
}

fn notes_of(notes: &Path) -> Vec<String> {
    std::fs::read_to_string(notes).unwrap_or_default().lines().map(str::to_owned).collect()
}

fn create(home: &Home, args: &[&str]) -> String {
    let mut all = vec!["kanban", "create", "--assignee", "alpha"];
    all.extend_from_slice(args);
    home.json(&all)["id"].as_str().unwrap().to_owned()
}

fn task(home: &Home, id: &str) -> serde_json::Value {
    home.json(&["kanban", "show", id])["task"].clone()
}

fn status(home: &Home, id: &str) -> String {
    task(home, id)["status"].as_str().unwrap_or_default().to_owned()
}

fn events(home: &Home, id: &str) -> Vec<serde_json::Value> {
    home.json(&["kanban", "show", id])["events"].as_array().unwrap().clone()
}

/// A refusal: exit 2, one line on stderr.
fn refused(home: &Home, args: &[&str]) -> String {
    let out = home.run(args);
    let err = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    assert_eq!((out.status.code(), err.lines().count()), (Some(2), 1), "{args:?}: {err}");
    err
}

fn a_review_task_waits_in_review_and_request_changes_runs_it_again_with_the_note(home: Home) {
    let (home, notes) = home_with_worker(home);
    let id = create(&home, &["look at me", "--review"]);
    let child = create(&home, &["after", "--parent", &id]);
    assert_eq!(task(&home, &id)["review"], true);
    home.ok(&["kanban", "dispatch"]);
    wait_until("the first run in review", Duration::from_secs(30), || status(&home, &id) == "review");
    assert_eq!(notes_of(&notes), ["-"], "the first run has no note");
    assert_eq!(status(&home, &child), "todo", "a task in review promotes no child");
    let listed = home.json(&["kanban", "ls", "--status", "review"]);
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert!(home.ok(&["kanban", "ls"]).contains("review"), "ls shows the status");

    let err = refused(&home, &["kanban", "request-changes", &id, "--note", "  "]);
    assert!(err.contains("note"), "{err}");
    refused(&home, &["kanban", "request-changes", &id]);
    refused(&home, &["kanban", "approve", &child]);
    assert_eq!(status(&home, &id), "review", "refusals change nothing");

    let v = home.json(&["kanban", "request-changes", &id, "--note", "use the v2 API"]);
    assert_eq!((v["status"].as_str(), v["review_note"].as_str()), (Some("ready"), Some("use the v2 API")), "{v}");
    let text = home.ok(&["kanban", "show", &id]);
    assert!(text.contains("changes:   use the v2 API"), "{text}");
    let asked = events(&home, &id).into_iter().find(|e| e["kind"] == "changes_requested").unwrap();
    assert_eq!(asked["payload"]["note"], "use the v2 API");
    home.ok(&["kanban", "dispatch"]);
    wait_until("the second run in review", Duration::from_secs(30), || status(&home, &id) == "review");
    assert_eq!(notes_of(&notes), ["-", "use the v2 API"], "the second run was given the note");

    let v = home.json(&["kanban", "approve", &id]);
    assert_eq!(v["status"], "done", "{v}");
    assert_eq!(status(&home, &child), "ready", "approving promotes the child as done does");
    refused(&home, &["kanban", "approve", &id]);
    // A done task goes back to review by hand.
    assert_eq!(home.json(&["kanban", "review", &id, "--note", "one more look"])["status"], "review");
    let back = events(&home, &id).into_iter().rfind(|e| e["kind"] == "review_requested").unwrap();
    assert_eq!(
        (back["payload"]["prev_status"].as_str(), back["payload"]["note"].as_str()),
        (Some("done"), Some("one more look"))
    );
}

fn review_on_a_running_task_stops_its_worker(home: Home) {
    let (home, _) = home_with_worker(home);
    let id = create(&home, &["long"]);
    std::fs::write(home.path().join(format!("slow-{id}")), "").unwrap();
    home.ok(&["kanban", "dispatch"]);
    let pid = wait_until("the worker confirmed", Duration::from_secs(30), || {
        let t = task(&home, &id);
        t["confirmed_at"].is_string().then(|| t["worker_pid"].as_i64()).flatten()
    });
    let alive = |pid: i64| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z") && !s.contains(") X"))
    };
    assert!(alive(pid), "the worker runs");
    let v = home.json(&["kanban", "review", &id]);
    assert_eq!(v["status"], "review", "{v}");
    wait_until("the worker stopped", Duration::from_secs(15), || !alive(pid));
    let t = task(&home, &id);
    assert!(t["worker_pid"].is_null() && t["claim_lock"].is_null(), "the claim is cleared: {t}");
    let runs = home.json(&["kanban", "show", &id])["runs"].clone();
    assert_eq!(runs[0]["outcome"], "review_requested", "{runs}");
    refused(&home, &["kanban", "review", &id]);
}

fn typed_blocks_wait_for_parents_repeat_into_triage_and_refuse_an_unknown_kind(home: Home) {
    home.ok(&["profile", "create", "alpha"]);
    let mk = |title: &str, extra: &[&str]| {
        let mut args = vec![title, "--command", "true"];
        args.extend_from_slice(extra);
        create(&home, &args)
    };
    // A positional reason is recorded, on the task and its event.
    let t = mk("t", &[]);
    home.ok(&["kanban", "block", &t, "waits for a human"]);
    assert_eq!(task(&home, &t)["block_reason"], "waits for a human");
    let blocked = events(&home, &t).into_iter().find(|e| e["kind"] == "blocked").unwrap();
    assert_eq!(blocked["payload"]["reason"], "waits for a human");

    // The same kind and reason a second time: triage.
    home.ok(&["kanban", "unblock", &t]);
    let v = home.json(&["kanban", "block", &t, "the API key", "--kind", "needs-input"]);
    assert_eq!((v["status"].as_str(), v["block_kind"].as_str()), (Some("blocked"), Some("needs-input")), "{v}");
    let text = home.ok(&["kanban", "show", &t]);
    assert!(text.contains("block:     needs-input: the API key"), "{text}");
    home.ok(&["kanban", "unblock", &t]);
    let v = home.json(&["kanban", "block", &t, "--reason", "the API key", "--kind", "needs_input"]);
    assert_eq!(v["status"], "triage", "the same block twice: {v}");
    let last = events(&home, &t).into_iter().rfind(|e| e["kind"] == "blocked").unwrap();
    assert_eq!(
        (last["payload"]["kind"].as_str(), last["payload"]["status"].as_str()),
        (Some("needs-input"), Some("triage"))
    );
    home.ok(&["kanban", "promote", &t]);
    let v = home.json(&["kanban", "block", &t, "another cause", "--kind", "needs-input"]);
    assert_eq!(v["status"], "blocked", "another reason is a new block: {v}");

    // A dependency waits for an open parent in todo; with none it stays blocked as needs-input.
    let parent = mk("parent", &["--triage"]);
    let child = mk("child", &["--parent", &parent]);
    let lone = mk("lone", &[]);
    let v = home.json(&["kanban", "block", &child, "needs the parent", "--kind", "dependency"]);
    assert_eq!((v["status"].as_str(), v["block_kind"].as_str()), (Some("todo"), Some("dependency")), "{v}");
    let v = home.json(&["kanban", "block", &lone, "--kind", "dependency"]);
    assert_eq!((v["status"].as_str(), v["block_kind"].as_str()), (Some("blocked"), Some("needs-input")), "{v}");
    home.ok(&["kanban", "complete", &parent]);
    assert_eq!(status(&home, &child), "ready", "the dependency's parent done: the child is promoted");

    // An unknown kind: one line, exit 2, nothing written.
    let ready = mk("ready", &[]);
    let before = events(&home, &ready).len();
    let err = refused(&home, &["kanban", "block", &ready, "why", "--kind", "dependancy"]);
    assert!(err.contains("dependency"), "names the kinds: {err}");
    assert_eq!((status(&home, &ready), events(&home, &ready).len()), ("ready".to_owned(), before));
}

fn a_worker_command_blocks_its_own_task_with_a_kind(home: Home) {
    let (home, _) = home_with_worker(home);
    let id = create(&home, &["stuck"]);
    std::fs::write(home.path().join(format!("block-{id}")), "").unwrap();
    home.ok(&["kanban", "dispatch"]);
    wait_until("the task blocked by its command", Duration::from_secs(30), || status(&home, &id) == "blocked");
    let t = task(&home, &id);
    assert_eq!(
        (t["block_kind"].as_str(), t["block_reason"].as_str()),
        (Some("needs-input"), Some("needs a key")),
        "{t}"
    );
    // The command's exit 0 after it blocked its task completes nothing (its run was ended by the block).
    let log = home.path().join(format!("kanban/logs/{id}.log"));
    let said = "the command's exit is not the outcome";
    wait_until("the exit recorded", Duration::from_secs(15), || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains(said))
    });
    assert_eq!(status(&home, &id), "blocked");
}

on_both_stores!(
    a_worker_command_blocks_its_own_task_with_a_kind,
    a_review_task_waits_in_review_and_request_changes_runs_it_again_with_the_note,
    review_on_a_running_task_stops_its_worker,
    typed_blocks_wait_for_parents_repeat_into_triage_and_refuse_an_unknown_kind,
);
