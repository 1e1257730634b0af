//! The third trust round (issue 38), the board's secrets from outside: the gateway's environment (the board's
//! password, forwarded secrets) is not readable through `/proc/<pid>/environ` by another process of its user, a
//! task's command cannot record a result for another task through that task's worker socket, and `-c` refuses a
//! board password on the command line.

use crate::support::{Gateway, Home, berth_bin, wait_until};
use std::os::unix::fs::MetadataExt;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const PASSWORD: &str = "pw-Sekr1t";

/// The uid and gid of `nobody`: a user with no capability, as an operator's service user is.
const NOBODY: &str = "65534";

fn as_nobody(program: &std::path::Path) -> Command {
    let mut c = Command::new("setpriv");
    c.args(["--reuid", NOBODY, "--regid", NOBODY, "--clear-groups", "--"]).arg(program);
    c
}

fn chown_tree(path: &std::path::Path) {
    let out = Command::new("chown").args(["-R", &format!("{NOBODY}:{NOBODY}")]).arg(path).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The attack of issue 38: a gateway run by a user (here `nobody`) with the board's URL and a forwarded secret in
/// its environment; a second process of the same user (what a task's command is) reads `/proc/<pid>/environ`.
/// Before, it read the password; now the gateway is non-dumpable and the read is refused.
#[test]
fn the_gateways_environment_is_not_readable_by_a_process_of_its_user() {
    let home = Home::new();
    chown_tree(home.path());
    assert_eq!(std::fs::metadata(home.path()).unwrap().uid(), 65534);
    let url = format!("postgres://berth:{PASSWORD}@127.0.0.1:1/board");
    let mut cmd = as_nobody(&berth_bin());
    for var in config_bridge::hermetic_vars() {
        cmd.env_remove(var);
    }
    cmd.env("BERTH_HOME", home.path())
        .env("BERTH_PROFILE", &home.profile)
        .env("KANBAN_DATABASE_URL", &url)
        .env("TERMINAL_DOCKER_FORWARD_ENV", r#"["API_TOKEN"]"#)
        .env("API_TOKEN", format!("tok-{PASSWORD}"))
        .env("DOCKER_HOST", "unix:///nonexistent.sock")
        .args(["-c", "kanban.dispatch_in_gateway=false"]);
    let gateway = Gateway::start_with(&home, &mut cmd);
    let pid = gateway.pid();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert!(uid_line.split_whitespace().nth(1) == Some(NOBODY), "the gateway runs as nobody: {uid_line}");
    // The read the attack makes, as the gateway's own user.
    let read: Output = as_nobody(std::path::Path::new("/bin/cat"))
        .arg(format!("/proc/{pid}/environ"))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let seen = String::from_utf8_lossy(&read.stdout);
    assert!(!seen.contains(PASSWORD), "a process of the gateway's user read its environment: {seen}");
    assert!(!read.status.success(), "the read is refused");
    drop(gateway);
}

/// `-c kanban.database_url=…` with a password puts it in the process's arguments, which any local user reads:
/// refused in one line naming the safe ways, on every command, the password not echoed; a URL without a password
/// is taken as before.
#[test]
fn a_board_password_given_with_dash_c_is_refused() {
    let home = Home::new();
    home.ok(&["kanban", "create", "x", "--assignee", &home.profile, "--command", "true"]);
    let before = home.json(&["kanban", "ls"]);
    for url in [
        format!("postgres://berth:{PASSWORD}@127.0.0.1:1/board"),
        format!("host=127.0.0.1 port=1 user=berth password={PASSWORD} dbname=board"),
        format!("postgres://berth@127.0.0.1:1/board?password={PASSWORD}"),
    ] {
        let set = format!("kanban.database_url={url}");
        for args in [&["kanban", "ls"][..], &["gateway", "status"], &["config", "ls"]] {
            let out = home.cmd().args(["-c", &set]).args(args).output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?} {url}: {err}");
            assert_eq!(err.trim().lines().count(), 1, "{err}");
            assert!(err.contains("KANBAN_DATABASE_URL") && err.contains("config.yaml"), "{err}");
            assert!(!err.contains(PASSWORD), "{err}");
        }
    }
    assert_eq!(home.json(&["kanban", "ls"]), before, "the board is as it was");
    // Without a password the setting is taken (here it fails to connect, as it should).
    let out =
        home.cmd().args(["-c", "kanban.database_url=postgres://berth@127.0.0.1:1/board", "kanban", "ls"]).output();
    let err = String::from_utf8_lossy(&out.unwrap().stderr).into_owned();
    assert!(err.contains("cannot reach the board database"), "{err}");
}

/// The forgery of issue 38: on a PostgreSQL board, one task's command finds the other running task's worker socket
/// (its name is in `/proc/net/unix` and in that task's command's environment, which a process of the same user
/// reads) and asks it to complete that task. Before, the victim was completed with the
/// forged result; now its worker answers only processes below its own command, and the victim runs on.
#[test]
fn a_tasks_command_cannot_complete_another_task_through_its_worker_socket() {
    let Some(home) = Home::on_postgres() else { return };
    let bin = berth_bin();
    let script = home.path().join("work.sh");
    let s = script.display();
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nif [ \"$1\" = \"$(cat {s}.victim)\" ]; then echo $$ > {s}.running; i=0\n\
             while [ ! -e {s}.stop ] && [ $i -lt 900 ]; do sleep 0.1; i=$((i+1)); done\n\
             exec {bin} kanban complete \"$1\" --result own; fi\n\
             sock=$(tr '\\0' '\\n' < /proc/$(cat {s}.running)/environ | sed -n 's/^BERTH_WORKER_SOCKET=//p')\n\
             grep -q \"$sock\" /proc/net/unix && echo listed >> {s}.attack\n\
             BERTH_WORKER_SOCKET=\"$sock\" {bin} kanban complete \"$(cat {s}.victim)\" --result forged >> {s}.attack 2>&1\n\
             echo tried >> {s}.attack\n{bin} kanban complete \"$1\" --result attacker\n",
            bin = bin.display(),
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    home.ok(&["config", "set", "kanban.worker_command", &format!("{s} {{task_id}}")]);
    let create = |title: &str| {
        let v = home.json(&["kanban", "create", title, "--assignee", &home.profile]);
        v["id"].as_str().unwrap().to_owned()
    };
    let victim = create("victim");
    std::fs::write(format!("{s}.victim"), &victim).unwrap();
    let gw = Gateway::start(&home, &[]);
    wait_until("the victim to run", Duration::from_secs(60), || std::path::Path::new(&format!("{s}.running")).exists());
    let attacker = create("attacker");
    wait_until("the attacker done", Duration::from_secs(60), || {
        home.json(&["kanban", "show", &attacker])["task"]["status"] == "done"
    });
    let attack = std::fs::read_to_string(format!("{s}.attack")).unwrap();
    assert!(attack.contains("listed") && attack.contains("tried"), "{attack}");
    let task = home.json(&["kanban", "show", &victim])["task"].clone();
    assert_eq!(task["status"], "running", "the victim was completed by another task's command: {task}\n{attack}");
    assert!(attack.contains("answers its own command only"), "{attack}");
    // The victim's own command still completes it.
    std::fs::write(format!("{s}.stop"), "").unwrap();
    wait_until("the victim done", Duration::from_secs(60), || {
        home.json(&["kanban", "show", &victim])["task"]["status"] == "done"
    });
    assert_eq!(home.json(&["kanban", "show", &victim])["task"]["result"], "own");
    drop(gw);
}

/// A re-attack of issue 38: any process of the user could connect to the home's runner, say hello with a command of
/// its choosing, start it as another task's run and claim the run confirmed: the runner ran the forger's command as
/// that task and recorded its result. The runner now takes "confirmed" only from its own executable; a forger's start
/// is confirmed on the board, where the run its real worker holds is refused, and nothing of the forger's runs.
#[test]
fn a_forged_start_on_the_runners_socket_runs_nothing_and_records_nothing() {
    use std::io::{BufRead, BufReader, Write};
    let home = Home::new();
    home.ok(&["profile", "create", "alpha"]);
    home.ok(&["config", "set", "kanban.worker_command", "sleep 30"]);
    home.ok(&["config", "set", "kanban.worker_exit_outcome", "true"]);
    let id = home.json(&["kanban", "create", "victim", "--assignee", "alpha"])["id"].as_str().unwrap().to_owned();
    home.ok(&["kanban", "dispatch"]);
    let run = wait_until("the victim confirmed", Duration::from_secs(20), || {
        let t = home.json(&["kanban", "show", &id])["task"].clone();
        t["confirmed_at"].is_string().then(|| t["current_run_id"].as_i64()).flatten()
    });
    let marker = home.path().join("forged-ran");
    let board = home.path().join(kanban_store::BOARD_FILE).display().to_string();
    let hello = serde_json::json!({
        "board": domain::sha256::hex_digest(board.as_bytes()),
        "template": format!("touch {}; echo FORGED", marker.display()),
        "env": [["BERTH_HOME", home.path().display().to_string()], ["KANBAN_WORKER_EXIT_OUTCOME", "true"],
                ["PATH", std::env::var("PATH").unwrap_or_default()]],
        "failure_limit": 2,
    });
    let start = serde_json::json!({
        "task": id, "run": run, "assignee": "alpha", "board": "default",
        "log": home.path().join("forged.log"), "workdir": home.path(),
        "env": [["BERTH_KANBAN_TASK", id], ["BERTH_KANBAN_RUN_ID", run.to_string()]],
    });
    let mut conn = std::os::unix::net::UnixStream::connect(home.path().join("kanban/sockets/runner.sock")).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut answers = BufReader::new(conn.try_clone().unwrap()).lines();
    writeln!(conn, "{hello}").unwrap();
    let said: serde_json::Value = serde_json::from_str(&answers.next().unwrap().unwrap()).unwrap();
    assert!(said["error"].is_null() && said["nonce"].is_string(), "the hello was taken, challenged: {said}");
    writeln!(conn, "{start}").unwrap();
    let said = answers.next().unwrap().unwrap();
    writeln!(conn, "{}", serde_json::json!({"confirmed": true})).unwrap();
    drop(conn);
    eprintln!("the runner answered the forged start: {said}");
    // The forged worker is let go or refused within its confirmation; give it time to have run, were it allowed.
    for _ in 0..30 {
        let t = home.json(&["kanban", "show", &id])["task"].clone();
        assert_eq!(t["status"], "running", "the victim is untouched: {t}");
        assert!(!marker.exists(), "the forger's command ran");
        std::thread::sleep(Duration::from_millis(100)); // scenario: the window the forged start had
    }
    home.ok(&["kanban", "archive", &id]);
}

/// A test database's URL without a password and with [`PASSWORD`]: the test server trusts its local connections, so
/// both reach it.
fn with_password(url: &str) -> (String, String) {
    let (scheme, rest) = url.split_once("://").unwrap();
    let (user, at) = rest.split_once('@').unwrap();
    let user = user.split(':').next().unwrap();
    (format!("{scheme}://{user}@{at}"), format!("{scheme}://{user}:{PASSWORD}@{at}"))
}

/// What the forger of [`a_forger_that_execs_berth_is_not_taken_for_the_dispatcher`] runs: it connects to the runner,
/// forks, and its parent (the socket's peer) becomes berth, while the child says hello, answers the challenge with
/// the best proof it can make (keyed by the URL it has, without the password), starts the victim's run and claims it
/// confirmed.
const FORGER: &str = r#"
import hashlib, hmac, json, os, socket, sys, time
path, berth, url, hello, start, out, runner = sys.argv[1:8]
s = socket.socket(socket.AF_UNIX); s.connect(path)
f = s.makefile("rwb", buffering=0)
r, w = os.pipe()
if os.fork():
    os.dup2(r, 0)
    os.execv(berth, [berth, "kanban", "create", "--from", "-"])
os.close(r)
time.sleep(1)  # // scenario: the parent has become berth
f.write((hello + "\n").encode()); said = [f.readline()]
nonce = json.loads(said[0])["nonce"]
proof = hmac.new(url.encode(), f"{nonce}:{runner}".encode(), hashlib.sha256).hexdigest()
f.write((json.dumps({"proof": proof}) + "\n").encode())
f.write((start + "\n").encode()); said.append(f.readline())
f.write(b'{"confirmed": true}\n')
open(out, "w").write("".join(x.decode() for x in said))
s.close(); time.sleep(3); os.close(w)  # // scenario: berth, the socket's peer, outlives the forged release
"#;

/// The third attack (F2): a process of the user connected to the runner, forked, and exec'd berth in the parent (the
/// pid the socket names), so the runner took the child's "confirmed" for the dispatcher's and recorded the forger's
/// command as a running task's completion. The runner now takes that word only with the answer to its challenge,
/// which needs the board's password; the forged start is confirmed on the board instead, and refused.
/// And (F1) a process standing in for the runner's socket hears no password in the launcher's hello.
#[test]
fn a_forger_that_execs_berth_is_not_taken_for_the_dispatcher() {
    let Some(db) = crate::pg::TestDb::create() else { return };
    // The password is the runner's key, not the server's check.
    let (bare, url) = with_password(&db.url);
    let mut home = Home::new();
    home.board_url = Some(url);
    home.ok(&["config", "set", "kanban.worker_command", "sleep 30"]);
    home.ok(&["config", "set", "kanban.worker_exit_outcome", "true"]);
    let id = home.json(&["kanban", "create", "victim", "--assignee", &home.profile])["id"].as_str().unwrap().to_owned();
    home.ok(&["kanban", "dispatch"]);
    let run = wait_until("the victim confirmed", Duration::from_secs(20), || {
        let t = home.json(&["kanban", "show", &id])["task"].clone();
        t["confirmed_at"].is_string().then(|| t["current_run_id"].as_i64()).flatten()
    });
    let marker = home.path().join("forged-ran");
    let hello = serde_json::json!({
        "board": domain::sha256::hex_digest(kanban_postgres::without_password(&bare).as_bytes()),
        "template": format!("touch {}; echo FORGED", marker.display()),
        "env": [["BERTH_HOME", home.path().display().to_string()], ["KANBAN_WORKER_EXIT_OUTCOME", "true"],
                ["PATH", std::env::var("PATH").unwrap_or_default()], ["KANBAN_DATABASE_URL", bare.clone()]],
        "failure_limit": 2,
    });
    let start = serde_json::json!({
        "task": id, "run": run, "assignee": home.profile, "board": "default",
        "log": home.path().join("forged.log"), "workdir": home.path(),
        "env": [["BERTH_KANBAN_TASK", id], ["BERTH_KANBAN_RUN_ID", run.to_string()]],
    });
    let (script, said) = (home.path().join("forger.py"), home.path().join("forger.out"));
    std::fs::write(&script, FORGER).unwrap();
    let sock = home.path().join("kanban/sockets/runner.sock");
    let forger = Command::new("python3")
        .arg(&script)
        .args([sock.display().to_string(), berth_bin().display().to_string(), bare.clone()])
        .args([hello.to_string(), start.to_string(), said.display().to_string()])
        .arg(crate::support::runner_of(&home).expect("the home's runner").to_string())
        .status()
        .unwrap();
    assert!(forger.success());
    let said = std::fs::read_to_string(&said).unwrap();
    assert!(said.lines().count() == 2 && !said.contains("serves another board"), "the forger was heard: {said}");
    // The forged worker is let go or refused within its confirmation; give it time to have run, were it allowed.
    for _ in 0..30 {
        let t = home.json(&["kanban", "show", &id])["task"].clone();
        assert_eq!(t["status"], "running", "the victim is untouched: {t}");
        assert!(!marker.exists(), "the forger's command ran: {said}");
        std::thread::sleep(Duration::from_millis(100)); // scenario: the window the forged start had
    }

    // F1: a listener standing in for the runner hears the launcher's hello, which holds no password.
    std::fs::remove_file(&sock).unwrap();
    let fake = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let listen = std::thread::spawn(move || {
        use std::io::{BufRead, BufReader};
        let (conn, _) = fake.accept().unwrap();
        let mut hello = String::new();
        BufReader::new(conn).read_line(&mut hello).unwrap();
        hello
    });
    home.json(&["kanban", "create", "second", "--assignee", &home.profile]);
    home.ok(&["kanban", "dispatch"]);
    let heard = listen.join().unwrap();
    assert!(heard.contains("\"env\"") && heard.contains(&bare), "the hello: {heard}");
    assert!(!heard.contains(PASSWORD), "the hello held the board's password: {heard}");
    home.ok(&["kanban", "archive", &id]);
}

/// A re-attack of issue 38: `config set kanban.database_url postgres://u:PASSWORD@…` put the password in the
/// command line (world-readable while it runs). It is refused in one line, the file untouched; `-` reads the value
/// from standard input instead, and it is stored (and echoed masked).
#[test]
fn config_set_takes_a_board_password_from_standard_input_only() {
    use std::io::Write;
    let home = Home::new();
    let url = "postgres://berth:S3CRET-PW@%2Ftmp%2Fnowhere:5432/postgres";
    let out = home.run(&["config", "set", "kanban.database_url", url]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("standard input") && !err.contains("S3CRET-PW"), "{err}");
    assert!(!home.path().join("config.yaml").exists(), "the refused value was written");
    let mut child = home
        .cmd()
        .args(["config", "set", "kanban.database_url", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(child.stdin.take().unwrap(), "{url}").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("S3CRET-PW"), "echoed masked");
    let file = std::fs::read_to_string(home.path().join("config.yaml")).unwrap();
    assert!(file.contains(url), "{file}");
}

/// What the poller of [`no_process_berth_starts_shows_the_board_password`] does, as a process of the gateway's
/// user (a task's command): reads `environ` and `cmdline` of every process newer than itself from its first moment
/// until it is past its `main` (exec'd and non-dumpable), and writes a line for each read that held the password and
/// one for each berth worker or runner whose environment it could read at all (caught in its window).
const POLLER: &str = r#"
import os, sys, time
secret, out, stop, home = bytes.fromhex(sys.argv[1]), open(sys.argv[2], "a"), sys.argv[3], sys.argv[4].encode()
def read(pid, part):
    try:
        with open(f"/proc/{pid}/{part}", "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None
    except OSError:
        return b""
pid_max = int(open("/proc/sys/kernel/pid_max").read())
nxt = int(open("/proc/sys/kernel/ns_last_pid").read()) + 1
watched, caught = set(), set()
open(sys.argv[2] + ".ready", "w").close()
# Until told to stop, or its test is gone (its home removed), or five minutes passed.
until = time.monotonic() + 300
while not os.path.exists(stop) and os.path.isdir(sys.argv[4]) and time.monotonic() < until:
    for ahead in range(64):
        pid = (nxt + ahead) % pid_max or 300
        if os.path.exists(f"/proc/{pid}"):
            watched.add(pid)
            nxt = pid + 1
    for pid in list(watched):
        cmd = read(pid, "cmdline")
        if cmd is None or b"berth" not in cmd:
            watched.discard(pid)
            continue
        env = read(pid, "environ") or b""
        args = cmd.split(bytes(1))
        # This test's home only (another test may run a gateway of the same user beside it).
        mine = home in cmd or home in env
        for part, data in (("environ", env), ("cmdline", cmd)):
            if secret in data and mine:
                out.write(f"SEEN {pid} {part} {b' '.join(args).decode(errors='replace')}\n")
                out.flush()
        if env and b"worker" in args[1:3] and pid not in caught:
            caught.add(pid)
            out.write(f"CAUGHT {pid} {b' '.join(args).decode(errors='replace')}\n")
            out.flush()
        # Before its exec a child shows its parent's command line; exec'd and non-dumpable, it is past its `main`.
        stat = read(pid, "stat") or b")"
        ppid = int((stat.rsplit(b")", 1)[-1].split() or [b"", b"0"])[1])
        if not env and cmd != read(ppid, "cmdline"):
            watched.discard(pid)
"#;

/// A process read with the password: its pid, its parent's pid and its command line.
type Reading = (u32, u32, String);

/// What the window between a process's exec and its `main` shows of the processes of `nobody` (the gateway's user
/// in [`no_process_berth_starts_shows_the_board_password`]): read as root, which may read a process's initial
/// environment and command line for as long as it lives, so no process that lives a few milliseconds is missed.
/// Every process of `home` (its environment names it) whose reading held `secret` (its pid, its parent's and its
/// command line), and how
/// many berth processes of the gateway's (`worker …`, the commands' `kanban …`) were read, until `stop`.
fn read_as_root(
    home: &std::path::Path,
    secret: &'static str,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<(Vec<Reading>, usize)> {
    let home = format!("BERTH_HOME={}", home.display()).into_bytes();
    std::thread::spawn(move || {
        let (mut seen, mut workers) = (Vec::new(), std::collections::BTreeSet::new());
        while !stop.load(std::sync::atomic::Ordering::Acquire) {
            let Ok(dir) = std::fs::read_dir("/proc") else { break };
            for pid in dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok()) {
                // Cheapest first: berth processes only, then the gateway's user, then this test's home.
                let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                if !cmd.windows(5).any(|w| w == b"berth") {
                    continue;
                }
                let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
                let uid = status.lines().find_map(|l| l.strip_prefix("Uid:")).unwrap_or_default();
                if uid.split_whitespace().next() != Some(NOBODY) {
                    continue;
                }
                let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
                if !env.split(|b| *b == 0).any(|v| v == home.as_slice()) {
                    continue;
                }
                let args: Vec<String> =
                    cmd.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
                if args.get(1).is_some_and(|a| a == "worker" || a == "kanban") {
                    workers.insert(pid);
                }
                let holds = |d: &[u8]| d.windows(secret.len()).any(|w| w == secret.as_bytes());
                if holds(&env) || holds(&cmd) {
                    // Its parent too: a child between its spawn and its exec shows its parent's memory.
                    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                    let ppid = stat.rsplit(')').next().and_then(|r| r.split_whitespace().nth(1)?.parse().ok());
                    seen.push((pid, ppid.unwrap_or(0), args.join(" ")));
                }
            }
            std::thread::sleep(Duration::from_millis(10)); // scenario: the reader's pace
        }
        seen.sort();
        seen.dedup();
        (seen, workers.len())
    })
}

/// The re-attack of issue 38 (F1, F3): the gateway is non-dumpable, but each berth process it starts (the runner, a
/// `berth worker run` where none can be had, and the `berth kanban complete` of each task's command) is open to its
/// user from its exec until its `main` makes it non-dumpable, and it had the board's URL in its environment then. A
/// poller of the gateway's user reads `/proc/*/environ` and `cmdline` of every process through a burst of dispatches
/// of tasks completing themselves and then of exit outcomes; it catches berth processes in that window, and never
/// sees the password (before: in the caught workers' environment).
#[test]
fn no_process_berth_starts_shows_the_board_password() {
    let Some(db) = crate::pg::TestDb::create() else { return };
    // The password is there to be stolen, not checked.
    let (_, url) = with_password(&db.url);
    let mut home = Home::new();
    home.board_url = Some(url.clone());
    let bin = berth_bin();
    home.ok(&["config", "set", "kanban.worker_command", &format!("{} kanban complete {{task_id}}", bin.display())]);
    let create = |n: usize| {
        for i in 0..n {
            home.ok(&["kanban", "create", &format!("t{i}"), "--assignee", &home.profile]);
        }
    };
    create(20);
    chown_tree(home.path());
    let (hits, stop) = (home.path().join("hits"), home.path().join("stop"));
    std::fs::write(home.path().join("poll.py"), POLLER).unwrap();
    let poller = as_nobody(std::path::Path::new("/usr/bin/python3"))
        .arg(home.path().join("poll.py"))
        // Spelled in hex: the poller's own command line holds no password.
        .arg(PASSWORD.bytes().map(|b| format!("{b:02x}")).collect::<String>())
        .args([hits.display().to_string(), stop.display().to_string(), home.path().display().to_string()])
        .spawn()
        .unwrap();
    // Ended with the test, whatever happens to it.
    struct Ends(std::process::Child);
    impl Drop for Ends {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let poller = Ends(poller);
    wait_until("the poller", Duration::from_secs(10), || home.path().join("hits.ready").exists());
    let gateway = |extra: &[&str]| {
        let mut cmd = as_nobody(&bin);
        for var in config_bridge::hermetic_vars() {
            cmd.env_remove(var);
        }
        cmd.env("BERTH_HOME", home.path())
            .env("BERTH_PROFILE", &home.profile)
            .env("KANBAN_DATABASE_URL", &url)
            .env("DOCKER_HOST", "unix:///nonexistent.sock")
            .args(["-c", "kanban.dispatch_interval_seconds=1"])
            .args(extra);
        crate::support::Gateway::start_with(&home, &mut cmd)
    };
    let done = |n: usize| {
        let tasks = home.json(&["kanban", "ls", "--status", "done"]);
        (tasks.as_array().map_or(0, Vec::len) == n).then_some(()).ok_or(tasks)
    };
    let mut started = Vec::new();
    let stop_reading = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = read_as_root(home.path(), PASSWORD, std::sync::Arc::clone(&stop_reading));
    let gw = gateway(&[]);
    started.push(gw.pid());
    wait_until("the workers' tasks done", Duration::from_secs(120), || done(20));
    drop(gw);
    // Exit outcomes: the runner's tasks with no berth process in them.
    create(5);
    chown_tree(home.path());
    let gw = gateway(&["-c", "kanban.worker_exit_outcome=true", "-c", "kanban.worker_command=true"]);
    started.push(gw.pid());
    wait_until("the runner's tasks done", Duration::from_secs(120), || done(25));
    drop(gw);
    std::fs::write(&stop, "").unwrap();
    stop_reading.store(true, std::sync::atomic::Ordering::Release);
    let mut poller = poller;
    poller.0.wait().unwrap();
    let (read, workers) = reader.join().unwrap();
    let seen = std::fs::read_to_string(&hits).unwrap_or_default();
    // The gateways themselves were started by the test with the URL in their environment, as an operator does.
    let leaks: Vec<&str> = seen
        .lines()
        .filter(|l| l.starts_with("SEEN "))
        .filter(|l| !started.iter().any(|p| l.split(' ').nth(1) == Some(&p.to_string())))
        .collect();
    assert!(leaks.is_empty(), "a process of the gateway's user read the board password:\n{}", leaks.join("\n"));
    let caught = seen.lines().filter(|l| l.starts_with("CAUGHT ")).count();
    eprintln!("the poller caught {caught} berth workers in their window; {workers} workers read as root");
    // A gateway's own environment, seen in it or in a child of its not yet exec'd (which shares its memory and is
    // non-dumpable as it is), is the operator's: what the test gave it.
    let read: Vec<String> = read
        .into_iter()
        .filter(|(p, parent, c)| !(started.contains(p) || started.contains(parent) && c.contains("gateway run")))
        .map(|(p, _, c)| format!("{p} {c}"))
        .collect();
    assert!(read.is_empty(), "berth started a process with the board password in its window:\n{}", read.join("\n"));
    // A berth process lives a few milliseconds at least (most of the 20 commands' are read; fewer on a loaded
    // machine).
    assert!(workers >= 5, "the runner and the commands' berth processes were read: {workers}");
}
