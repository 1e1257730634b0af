//! The board half, in the sandbox half's shape: its values (`values.rs`: statuses, the snapshot a tick plans over,
//! the failure breaker), the rows every store hands out (`model.rs`), its one port (`port.rs`: [`KanbanStore`] for the
//! dispatcher, [`BoardStore`] for every surface), its error (`error.rs`), every event it writes (`event.rs`:
//! [`BoardEvent`], one enum, one serialization), the transition table (`transitions.rs`), the liveness judge
//! (`liveness.rs`), the rules a store applies without deciding (`rules.rs`), a recurring schedule's slots
//! (`recurring.rs`), the one writer of a run's end (`run_end.rs`: [`record_run_end`]), the edit rule (`edit.rs`) and
//! the copy between stores (`copy.rs`). The planner is a dispatch policy (`policy::dispatch`). The stores are sibling
//! adapters that depend on `domain` alone: SQLite (`kanban-store`) and PostgreSQL (`kanban-postgres`) translate
//! these to their SQL and decide nothing.

mod copy;
mod edit;
mod error;
mod event;
pub mod liveness;
mod model;
mod port;
pub mod recurring;
pub mod rules;
mod run_end;
pub mod transitions;
mod values;

pub use copy::{Cell, CopyReport, TABLES, TableRows};
pub use edit::{EditableFields, TaskEdit};
pub use error::{Result, StoreError};
pub use event::{AssignedBy, BoardEvent};
pub use model::{Board, Confirmation, Created, Cron, Event, HostSeen, NewCron, NewTask, Run, RunEnd, Stopped, Task};
pub use port::{BoardStore, KanbanStore};
pub use run_end::{EX_TEMPFAIL, RunEnding, RunRecorded, ending_of_exit, record_run_end};
pub use values::*;
