//! The board beside the domain, in the sandbox half's shape: its model (`model.rs`: tasks, runs, events, boards,
//! hosts, schedules, as every store hands them out), its port (`port.rs`: [`BoardStore`], every operation any surface
//! uses), its error (`error.rs`), every event it writes (`event.rs`: [`BoardEvent`], one enum, one serialization),
//! the rules a store applies without deciding (`rules.rs`: a new task's status, the failure breaker's change), a
//! recurring schedule's slots and which is due (`recurring.rs`), the one writer of a run's end (`run_end.rs`:
//! [`record_run_end`]), the one edit rule (`edit.rs`) and the copy between stores (`copy.rs`). The stores are sibling
//! adapters that depend on this crate and `domain` alone: SQLite (`kanban-store`) and PostgreSQL (`kanban-postgres`)
//! translate these to their SQL and decide nothing.

mod copy;
mod edit;
mod error;
mod event;
mod model;
mod port;
pub mod recurring;
pub mod rules;
mod run_end;

pub use copy::{Cell, CopyReport, TABLES, TableRows};
pub use domain::kanban::{Claimed, SpawnRecord, TickOutcome, TickRequest, WorkerRef};
pub use edit::{EditableFields, TaskEdit};
pub use error::{Result, StoreError};
pub use event::{AssignedBy, BoardEvent};
pub use model::{Board, Confirmation, Created, Cron, Event, HostSeen, NewCron, NewTask, Run, RunDone, RunEnd, Task};
pub use port::BoardStore;
pub use run_end::{EX_TEMPFAIL, RunEnding, RunRecorded, ending_of_exit, record_run_end};
