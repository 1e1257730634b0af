//! The dispatch report written as the plan is produced: a [`PlanSink`] that formats each decision at once (JSON or
//! text) into per-key lists, so no tree of every task is ever built. Each list stays in memory up to
//! [`SPILL_BYTES`] and then continues in an anonymous temporary file; at the end the lists are copied to the output
//! in the report's key order. Memory is bounded by the profiles, the spawns and the running tasks, not by the
//! ready tasks, while every per-task list stays complete.

use std::fs::File;
use std::io::{self, Seek, Write};

use domain::dispatcher::SpawnedWorker;
use domain::policy::dispatch::{Decision, DecisionRef, Housekeeping, PlanSink};
use serde::Serialize;

use crate::board::views::{SpawnFailedRow, SpawnedRow, WorkerRow};

/// How much of one list stays in memory before it moves to a temporary file.
const SPILL_BYTES: usize = 256 * 1024;

/// One list of the report: its items already formatted, in memory, then (past [`SPILL_BYTES`]) on disk.
#[derive(Default)]
struct Spill {
    buf: Vec<u8>,
    file: Option<File>,
    count: usize,
}

impl Spill {
    /// Appends one item, `sep` first unless it is the first.
    fn push(&mut self, sep: &[u8], item: impl FnOnce(&mut Vec<u8>)) {
        if self.count > 0 {
            self.buf.extend_from_slice(sep);
        }
        item(&mut self.buf);
        self.count += 1;
        if self.buf.len() >= SPILL_BYTES {
            if self.file.is_none() {
                // No temporary file (no writable temp dir): the list stays in memory, still correct.
                self.file = tempfile::tempfile().ok();
            }
            if let Some(f) = &mut self.file
                && f.write_all(&self.buf).is_ok()
            {
                self.buf.clear();
            }
        }
    }

    /// Copies the items to `out`.
    fn copy_to(&mut self, out: &mut dyn Write) -> io::Result<()> {
        if let Some(f) = &mut self.file {
            f.rewind()?;
            io::copy(f, out)?;
        }
        out.write_all(&self.buf)
    }

    /// The items as lines (the text report's explain table, which needs its widths first).
    fn for_each_line(&mut self, mut f: impl FnMut(&str) -> io::Result<()>) -> io::Result<()> {
        use std::io::{BufRead as _, Read as _};
        // One stream: a line may start in the file and end in memory.
        let head: Box<dyn io::Read + '_> = match &mut self.file {
            Some(file) => {
                file.rewind()?;
                Box::new(file)
            }
            None => Box::new(io::empty()),
        };
        for line in io::BufReader::new(head.chain(&self.buf[..])).lines() {
            f(&line?)?;
        }
        Ok(())
    }
}

/// What a report holds besides the plan: the board, the workers started (or, dry, planned) and what went wrong.
pub struct Extras<'a> {
    pub board: &'a str,
    pub dry_run: bool,
    /// The workers started; `None` in a dry run, where the planned spawns are the report's own.
    pub spawned: Option<&'a [SpawnedWorker]>,
    pub spawn_failed: &'a [(String, String)],
    /// Tasks the breaker blocked outside housekeeping (failed spawns).
    pub auto_blocked: &'a [String],
    pub default_assignee: Option<&'a str>,
    pub not_considered: Option<&'a (String, Decision)>,
}

#[derive(Serialize)]
struct Capped<'a> {
    task_id: &'a str,
    assignee: Option<&'a str>,
    current: u32,
}

#[derive(Serialize)]
struct Deferred<'a> {
    task_id: &'a str,
    assignee: Option<&'a str>,
    reason: &'a str,
}

#[derive(Serialize)]
struct Explained<'a, D: Serialize> {
    task_id: &'a str,
    code: &'a str,
    assignee: Option<&'a str>,
    detail: D,
}

/// The report being written.
pub struct ReportWriter {
    json: bool,
    /// Print the `explain` list (`--explain`, or a `--task` that was not considered).
    explain: bool,
    /// Record a reason per decision: `--explain`, or `--task` (one decision at most), whose reasons are printed when
    /// the task turns out not to be considered.
    record_explain: bool,
    housekeeping: Vec<(String, Housekeeping)>,
    promoted: usize,
    /// Planned spawns (task, assignee): as many as the caps allow.
    spawns: Vec<(String, String)>,
    unassigned: Spill,
    nonspawnable: Spill,
    capped: Spill,
    auto_assigned: Spill,
    deferred: Spill,
    explained: Spill,
    /// Widths of the explain table's first three columns (text).
    widths: (usize, usize, usize),
}

fn json_str(buf: &mut Vec<u8>, s: &str) {
    let _ = serde_json::to_writer(buf, s);
}

const ITEM_SEP: &[u8] = b",\n    ";

impl ReportWriter {
    /// A writer for JSON or text; `only_task` is whether `--task` was given.
    pub fn new(json: bool, explain: bool, only_task: bool) -> Self {
        Self {
            json,
            explain,
            record_explain: explain || only_task,
            housekeeping: Vec::new(),
            promoted: 0,
            spawns: Vec::new(),
            unassigned: Spill::default(),
            nonspawnable: Spill::default(),
            capped: Spill::default(),
            auto_assigned: Spill::default(),
            deferred: Spill::default(),
            explained: Spill::default(),
            widths: ("TASK".len(), "REASON".len(), "ASSIGNEE".len()),
        }
    }

    /// An id into a list: a JSON string, or for text an item of a `, `-joined line.
    fn id(json: bool, list: &mut Spill, id: &str) {
        if json {
            list.push(ITEM_SEP, |b| json_str(b, id));
        } else {
            list.push(b", ", |b| b.extend_from_slice(id.as_bytes()));
        }
    }

    /// A row of the explain table: in text, `why` in words after the code and the assignee.
    fn explain_row(&mut self, task_id: &str, code: &str, assignee: Option<&str>, why: &str, detail: impl Serialize) {
        if self.json {
            self.explained.push(ITEM_SEP, |b| {
                let _ = serde_json::to_writer(b, &Explained { task_id, code, assignee, detail });
            });
        } else {
            let assignee = assignee.unwrap_or("-");
            let (w0, w1, w2) = self.widths;
            let width = |s: &str, w: usize| w.max(s.chars().count());
            self.widths = (width(task_id, w0), width(code, w1), width(assignee, w2));
            self.explained.push(b"\n", |b| {
                let _ = write!(b, "{task_id}\t{code}\t{assignee}\t{why}");
            });
        }
    }

    fn ids_where(&self, f: impl Fn(&Housekeeping) -> bool) -> Vec<&str> {
        self.housekeeping.iter().filter(|(_, h)| f(h)).map(|(id, _)| id.as_str()).collect()
    }

    /// Writes the whole report to `out`: the eleven upstream keys first, then berth's own (JSON), or the text
    /// report.
    ///
    /// # Errors
    /// The output's IO error (a closed pipe).
    pub fn finish(mut self, x: &Extras<'_>, out: &mut dyn Write) -> io::Result<()> {
        if let Some((id, why)) = x.not_considered {
            self.explain = true;
            // The text table says why in words ("not_ready: the task is blocked"); JSON keeps the code.
            let shown = if self.json { why.code().to_owned() } else { why.reason() };
            self.explain_row(id, &shown, None, "", why.reason());
        }
        let spawned: Vec<SpawnedWorker> = match x.spawned {
            Some(s) => s.to_vec(),
            None => self
                .spawns
                .iter()
                .map(|(t, a)| SpawnedWorker {
                    task_id: t.clone(),
                    assignee: a.clone(),
                    sandbox: String::new(),
                    pid: None,
                })
                .collect(),
        };
        let mut auto_blocked: Vec<&str> = self.ids_where(Housekeeping::gave_up);
        for id in x.auto_blocked {
            if !auto_blocked.contains(&id.as_str()) {
                auto_blocked.push(id);
            }
        }
        let auto_blocked: Vec<String> = auto_blocked.into_iter().map(str::to_owned).collect();
        if self.json {
            self.finish_json(x, &spawned, &auto_blocked, out)
        } else {
            self.finish_text(x, &spawned, &auto_blocked, out)
        }
    }

    fn finish_json(
        mut self,
        x: &Extras<'_>,
        spawned: &[SpawnedWorker],
        auto_blocked: &[String],
        out: &mut dyn Write,
    ) -> io::Result<()> {
        fn key(out: &mut dyn Write, first: bool, name: &str) -> io::Result<()> {
            write!(out, "{}\n  \"{name}\": ", if first { "{" } else { "," })
        }
        fn small<T: Serialize>(out: &mut dyn Write, items: &[T]) -> io::Result<()> {
            if items.is_empty() {
                return out.write_all(b"[]");
            }
            out.write_all(b"[")?;
            for (i, it) in items.iter().enumerate() {
                out.write_all(if i == 0 { b"\n    " } else { ITEM_SEP })?;
                serde_json::to_writer(&mut *out, it)?;
            }
            out.write_all(b"\n  ]")
        }
        fn list(out: &mut dyn Write, l: &mut Spill) -> io::Result<()> {
            if l.count == 0 {
                return out.write_all(b"[]");
            }
            out.write_all(b"[\n    ")?;
            l.copy_to(out)?;
            out.write_all(b"\n  ]")
        }
        let hk = |f: fn(&Housekeeping) -> bool| -> Vec<String> {
            self.housekeeping.iter().filter(|(_, h)| f(h)).map(|(id, _)| id.clone()).collect()
        };
        let (crashed, timed_out, stale) = (
            hk(|h| matches!(h, Housekeeping::Crashed { .. })),
            hk(|h| matches!(h, Housekeeping::TimedOut { .. })),
            hk(|h| matches!(h, Housekeeping::Stale { .. })),
        );
        let (extended, lapsed) =
            (hk(|h| matches!(h, Housekeeping::ExtendClaim)), hk(|h| matches!(h, Housekeeping::LeaseExpired { .. })));
        let reclaimed = self.housekeeping.iter().filter(|(_, h)| matches!(h, Housekeeping::Reclaim { .. })).count();
        key(out, true, "reclaimed")?;
        write!(out, "{reclaimed}")?;
        key(out, false, "crashed")?;
        small(out, &crashed)?;
        key(out, false, "timed_out")?;
        small(out, &timed_out)?;
        key(out, false, "stale")?;
        small(out, &stale)?;
        key(out, false, "auto_blocked")?;
        small(out, auto_blocked)?;
        key(out, false, "promoted")?;
        write!(out, "{}", self.promoted)?;
        key(out, false, "spawned")?;
        let rows: Vec<SpawnedRow<'_>> = spawned
            .iter()
            .map(|w| SpawnedRow { task_id: &w.task_id, assignee: &w.assignee, workspace: &w.sandbox })
            .collect();
        small(out, &rows)?;
        key(out, false, "skipped_unassigned")?;
        list(out, &mut self.unassigned)?;
        key(out, false, "skipped_nonspawnable")?;
        list(out, &mut self.nonspawnable)?;
        key(out, false, "skipped_per_profile_capped")?;
        list(out, &mut self.capped)?;
        key(out, false, "auto_assigned_default")?;
        list(out, &mut self.auto_assigned)?;
        key(out, false, "board")?;
        serde_json::to_writer(&mut *out, x.board)?;
        key(out, false, "dry_run")?;
        write!(out, "{}", x.dry_run)?;
        key(out, false, "claim_extended")?;
        small(out, &extended)?;
        key(out, false, "lease_expired")?;
        small(out, &lapsed)?;
        key(out, false, "deferred")?;
        list(out, &mut self.deferred)?;
        key(out, false, "spawn_failed")?;
        let failed: Vec<SpawnFailedRow<'_>> =
            x.spawn_failed.iter().map(|(t, e)| SpawnFailedRow { task_id: t, error: e }).collect();
        small(out, &failed)?;
        key(out, false, "workers")?;
        let workers: Vec<WorkerRow<'_>> =
            spawned.iter().filter_map(|w| w.pid.map(|pid| WorkerRow { task_id: &w.task_id, pid })).collect();
        small(out, &workers)?;
        if self.explain {
            key(out, false, "explain")?;
            list(out, &mut self.explained)?;
        }
        out.write_all(b"\n}\n")?;
        out.flush()
    }

    fn finish_text(
        mut self,
        x: &Extras<'_>,
        spawned: &[SpawnedWorker],
        auto_blocked: &[String],
        out: &mut dyn Write,
    ) -> io::Result<()> {
        fn counted(out: &mut dyn Write, label: &str, ids: &[&str]) -> io::Result<()> {
            writeln!(out, "{label:<14}{}", ids.len())?;
            if !ids.is_empty() {
                writeln!(out, "  {}", ids.join(", "))?;
            }
            Ok(())
        }
        fn joined(out: &mut dyn Write, label: &str, l: &mut Spill) -> io::Result<()> {
            if l.count > 0 {
                write!(out, "{label}")?;
                l.copy_to(out)?;
                writeln!(out)?;
            }
            Ok(())
        }
        fn lines(out: &mut dyn Write, l: &mut Spill) -> io::Result<()> {
            if l.count > 0 {
                l.copy_to(out)?;
                writeln!(out)?;
            }
            Ok(())
        }
        // A dry run says so first, and what it would start is "would spawn": nothing ran.
        if x.dry_run {
            writeln!(out, "Dry run: nothing was written, started or signalled; a tick now would do this:")?;
        }
        let reclaimed = self.housekeeping.iter().filter(|(_, h)| matches!(h, Housekeeping::Reclaim { .. })).count();
        writeln!(out, "{:<14}{reclaimed}", "Reclaimed:")?;
        counted(out, "Crashed:", &self.ids_where(|h| matches!(h, Housekeeping::Crashed { .. })))?;
        counted(out, "Timed out:", &self.ids_where(|h| matches!(h, Housekeeping::TimedOut { .. })))?;
        counted(out, "Stale:", &self.ids_where(|h| matches!(h, Housekeeping::Stale { .. })))?;
        counted(out, "Lease lapsed:", &self.ids_where(|h| matches!(h, Housekeeping::LeaseExpired { .. })))?;
        counted(out, "Auto-blocked:", &auto_blocked.iter().map(String::as_str).collect::<Vec<_>>())?;
        writeln!(out, "{:<14}{}", "Promoted:", self.promoted)?;
        writeln!(out, "{:<14}{}", if x.dry_run { "Would spawn:" } else { "Spawned:" }, spawned.len())?;
        for w in spawned {
            if x.dry_run {
                writeln!(out, "  - {}  ->  {}", w.task_id, w.assignee)?;
            } else {
                let ws = if w.sandbox.is_empty() { "-" } else { &w.sandbox };
                writeln!(out, "  - {}  ->  {}  @ {ws}", w.task_id, w.assignee)?;
            }
        }
        let label = format!("Auto-assigned to kanban.default_assignee='{}': ", x.default_assignee.unwrap_or(""));
        joined(out, &label, &mut self.auto_assigned)?;
        joined(out, "Skipped (unassigned): ", &mut self.unassigned)?;
        lines(out, &mut self.capped)?;
        joined(
            out,
            "Skipped (assignee is no profile: a lane for someone else, or `berth profile create NAME`): ",
            &mut self.nonspawnable,
        )?;
        lines(out, &mut self.deferred)?;
        for (t, e) in x.spawn_failed {
            writeln!(out, "Spawn failed: {t}: {e}")?;
        }
        if self.explain {
            writeln!(out)?;
            let (w0, w1, w2) = self.widths;
            writeln!(out, "{:<w0$}  {:<w1$}  {:<w2$}  WHY", "TASK", "REASON", "ASSIGNEE")?;
            let empty = self.explained.count == 0;
            self.explained.for_each_line(|l| {
                let mut cells = l.splitn(4, '\t');
                let mut cell = || cells.next().unwrap_or("");
                let (t, c, a, why) = (cell(), cell(), cell(), cell());
                if why.is_empty() {
                    writeln!(out, "{t:<w0$}  {c:<w1$}  {a}")
                } else {
                    writeln!(out, "{t:<w0$}  {c:<w1$}  {a:<w2$}  {why}")
                }
            })?;
            if empty {
                writeln!(
                    out,
                    "(no ready task: blocked, triage, done and archived tasks are not dispatched; `berth kanban ls \
                     --status blocked` lists the blocked, `berth kanban dispatch --explain --task ID` says why one \
                     is not)"
                )?;
            }
        }
        out.flush()
    }
}

impl PlanSink for ReportWriter {
    fn housekeeping(&mut self, task_id: &str, action: &Housekeeping) {
        self.housekeeping.push((task_id.to_owned(), action.clone()));
    }

    fn promoted(&mut self, _task_id: &str) {
        self.promoted += 1;
    }

    fn decision(&mut self, d: &DecisionRef<'_>) {
        let json = self.json;
        match &d.decision {
            Decision::Spawn => self.spawns.push((d.task_id.to_owned(), d.assignee.unwrap_or_default().to_owned())),
            Decision::SkippedUnassigned => Self::id(json, &mut self.unassigned, d.task_id),
            Decision::SkippedNonspawnable => Self::id(json, &mut self.nonspawnable, d.task_id),
            Decision::SkippedPerProfileCapped { current, .. } => {
                let current = *current;
                if json {
                    self.capped.push(ITEM_SEP, |b| {
                        let _ = serde_json::to_writer(b, &Capped { task_id: d.task_id, assignee: d.assignee, current });
                    });
                } else {
                    self.capped.push(b"\n", |b| {
                        let _ = write!(
                            b,
                            "Deferred ({} at per-profile cap, {current} running): {}",
                            d.assignee.unwrap_or(""),
                            d.task_id
                        );
                    });
                }
            }
            Decision::DeferredMaxInProgress { .. }
            | Decision::DeferredMaxSpawn { .. }
            | Decision::DeferredRateLimited { .. }
            | Decision::DeferredSandboxElsewhere { .. }
            | Decision::DeferredEngineUnavailable { .. }
            | Decision::DeferredScheduled { .. } => {
                let reason = d.decision.code();
                if json {
                    self.deferred.push(ITEM_SEP, |b| {
                        let _ =
                            serde_json::to_writer(b, &Deferred { task_id: d.task_id, assignee: d.assignee, reason });
                    });
                } else {
                    self.deferred.push(b"\n", |b| {
                        let _ =
                            write!(b, "Deferred ({reason}): {} ({})", d.task_id, d.assignee.unwrap_or("unassigned"));
                    });
                }
            }
            Decision::NotReady { .. } | Decision::AlreadyRunning | Decision::WaitingOnParents => {}
        }
        if d.auto_assigned {
            Self::id(json, &mut self.auto_assigned, d.task_id);
        }
        if self.record_explain {
            let why = if self.json { String::new() } else { super::why::words(&d.decision, d.assignee) };
            self.explain_row(d.task_id, d.decision.code(), d.assignee, &why, &d.decision);
        }
    }
}

#[cfg(test)]
mod tests {
    use domain::policy::dispatch::{TaskDecision, TickPlan};
    use serde_json::Value as Json;

    use super::*;

    /// `n` decisions cycling through spawn, capped, unassigned and deferred; every fifth auto-assigned.
    fn plan(n: usize) -> TickPlan {
        let decisions = (0..n)
            .map(|i| TaskDecision {
                task_id: format!("t_{i:06}"),
                assignee: (i % 4 != 2).then(|| format!("p{}", i % 7)),
                auto_assigned: i % 5 == 0 && i % 4 != 2,
                decision: match i % 4 {
                    0 => Decision::Spawn,
                    1 => Decision::SkippedPerProfileCapped { current: 3, cap: 3 },
                    2 => Decision::SkippedUnassigned,
                    _ => Decision::DeferredMaxSpawn { cap: 9 },
                },
            })
            .collect();
        TickPlan { decisions, ..TickPlan::default() }
    }

    fn extras() -> Extras<'static> {
        Extras {
            board: "default",
            dry_run: true,
            spawned: None,
            spawn_failed: &[],
            auto_blocked: &[],
            default_assignee: Some("p0"),
            not_considered: None,
        }
    }

    fn write(p: &TickPlan, json: bool) -> String {
        let mut w = ReportWriter::new(json, true, false);
        p.replay(&mut w);
        let mut out = Vec::new();
        w.finish(&extras(), &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn lists_past_the_spill_threshold_stay_complete_and_in_order() {
        let n = 40_000;
        let p = plan(n);
        let v: Json = serde_json::from_str(&write(&p, true)).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).take(11).collect();
        assert_eq!(
            keys,
            [
                "reclaimed",
                "crashed",
                "timed_out",
                "stale",
                "auto_blocked",
                "promoted",
                "spawned",
                "skipped_unassigned",
                "skipped_nonspawnable",
                "skipped_per_profile_capped",
                "auto_assigned_default"
            ]
        );
        let ids = |want: fn(&Decision) -> bool| -> Vec<String> {
            p.decisions.iter().filter(|d| want(&d.decision)).map(|d| d.task_id.clone()).collect()
        };
        let listed = |key: &str, field: Option<&str>| -> Vec<String> {
            v[key].as_array().unwrap().iter().map(|x| field.map_or(x, |f| &x[f]).as_str().unwrap().to_owned()).collect()
        };
        let capped = ids(|d| matches!(d, Decision::SkippedPerProfileCapped { .. }));
        assert!(capped.len() * 40 > SPILL_BYTES, "the list must spill for this test");
        assert_eq!(listed("skipped_per_profile_capped", Some("task_id")), capped);
        assert_eq!(v["skipped_per_profile_capped"][0]["current"], 3);
        assert_eq!(listed("skipped_unassigned", None), ids(|d| *d == Decision::SkippedUnassigned));
        assert_eq!(listed("deferred", Some("task_id")), ids(|d| matches!(d, Decision::DeferredMaxSpawn { .. })));
        assert_eq!(listed("spawned", Some("task_id")), ids(|d| *d == Decision::Spawn));
        let auto: Vec<String> = p.decisions.iter().filter(|d| d.auto_assigned).map(|d| d.task_id.clone()).collect();
        assert_eq!(listed("auto_assigned_default", None), auto);
        assert_eq!(listed("explain", Some("task_id")).len(), n);
        assert_eq!(v["explain"][1]["detail"]["code"], "skipped_per_profile_capped");
    }

    #[test]
    fn the_text_report_lists_every_task_and_aligns_the_explain_table() {
        let n = 30_000;
        let text = write(&plan(n), false);
        let capped = text.lines().filter(|l| l.starts_with("Deferred (p") && l.contains("per-profile cap")).count();
        assert_eq!(capped, n / 4);
        let unassigned = text.lines().find(|l| l.starts_with("Skipped (unassigned): ")).unwrap();
        assert_eq!(unassigned.split(", ").count(), n / 4);
        let header = text.lines().position(|l| l.starts_with("TASK")).unwrap();
        let table: Vec<&str> = text.lines().skip(header).collect();
        assert_eq!(table.len(), n + 1);
        let at = table[0].find("REASON").unwrap();
        assert!(table.iter().skip(1).all(|row| row[at..].starts_with(|c: char| c.is_ascii_lowercase())), "misaligned");
        assert!(table[2].starts_with("t_000001  skipped_per_profile_capped  p1"), "{}", table[2]);
    }
}
