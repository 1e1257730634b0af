//! The blocking client the board calls: tokio-postgres on a current-thread runtime of the connection's own, with
//! every round trip bounded (`kanban.database_timeout_seconds`): connecting (start-up and authentication included),
//! each statement, a transaction's begin, commit and rollback, a wait for notifications. A server that accepts the
//! connection and never answers, or goes silent mid-session while the kernel still acknowledges, costs a call its
//! bound and one line, never a hang.
//!
//! A call that runs past its bound leaves the connection in an unknown state (a request may be half-answered), so the
//! connection is not used again: [`Client::is_closed`] says so and the store connects anew at its next call.
//!
//! The runtime runs only inside a call (`block_on`), like the blocking `postgres` crate's; the connection's task,
//! driven there, hands the notifications it receives to [`Client::notification`].

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use domain::board::StoreError;
use tokio::runtime::Runtime;
use tokio::sync::mpsc;
use tokio_postgres::GenericClient as _;
use tokio_postgres::tls::NoTlsStream;
use tokio_postgres::types::ToSql;
use tokio_postgres::{
    AsyncMessage, Config, Connection, IsolationLevel, NoTls, Notification, Row, SimpleQueryMessage, Socket, Statement,
};

use crate::{PgErr, PgResult};

/// How long closing a connection waits for its goodbye (`Terminate`) to be written.
const CLOSE_BOUND: Duration = Duration::from_secs(1);

/// A connection's runtime and its bound.
pub(crate) struct Link {
    rt: Runtime,
    bound: Duration,
    /// The server's URL without its password, for messages.
    shown: String,
    /// Set when a call ran past its bound: the connection is not used again.
    broken: Cell<bool>,
    /// The connection's prepared statements by their text: a statement is parsed and described once per connection,
    /// and every later call is one round trip (Bind, Execute) instead of two.
    statements: RefCell<HashMap<String, Statement>>,
}

/// At most this many statements are kept per connection (texts built at run time, such as a listing's filters, are
/// many but finite); past it the cache starts over.
const KEPT_STATEMENTS: usize = 256;
/// A longer text is a one-off (a batch built for its rows, as `kanban migrate` copies them): prepared, used, closed.
const KEPT_STATEMENT_LEN: usize = 4096;

impl Link {
    /// Runs one round trip within the bound.
    fn run<T>(&self, call: impl Future<Output = Result<T, tokio_postgres::Error>>) -> PgResult<T> {
        self.run_within(self.bound, call)
    }

    fn run_within<T>(
        &self,
        bound: Duration,
        call: impl Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> PgResult<T> {
        if self.broken.get() {
            return Err(self.silent(bound));
        }
        match within(&self.rt, bound, call) {
            Ok(result) => Ok(result?),
            Err(_) => {
                self.broken.set(true);
                Err(self.silent(bound))
            }
        }
    }

    /// The statement for `sql` on this connection, prepared at its first use.
    fn prepared<P: tokio_postgres::GenericClient + Sync>(&self, pg: &P, sql: &str) -> PgResult<Statement> {
        if let Some(s) = self.statements.borrow().get(sql) {
            return Ok(s.clone());
        }
        let s = self.run(pg.prepare(sql))?;
        if sql.len() > KEPT_STATEMENT_LEN {
            return Ok(s);
        }
        let mut kept = self.statements.borrow_mut();
        if kept.len() >= KEPT_STATEMENTS {
            kept.clear();
        }
        kept.insert(sql.to_owned(), s.clone());
        Ok(s)
    }

    /// Runs `call` on the statement for `sql` within the bound. A statement the server no longer takes as prepared
    /// (the schema changed under it: "cached plan must not change result type", or it is gone) is forgotten, so the
    /// next call prepares it again.
    fn on<P, T, Fut>(&self, pg: &P, sql: &str, call: impl FnOnce(Statement) -> Fut) -> PgResult<T>
    where
        P: tokio_postgres::GenericClient + Sync,
        Fut: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        use tokio_postgres::error::SqlState;
        let statement = self.prepared(pg, sql)?;
        self.run(async {
            let result = call(statement).await;
            if let Err(e) = &result
                && e.code().is_some_and(|c| {
                    [SqlState::FEATURE_NOT_SUPPORTED, SqlState::INVALID_SQL_STATEMENT_NAME].contains(c)
                })
            {
                self.statements.borrow_mut().remove(sql);
            }
            result
        })
    }

    /// The board is unavailable (an outage, not the caller's fault): the server did not answer in time.
    fn silent(&self, bound: Duration) -> PgErr {
        PgErr(StoreError::Unreachable(format!(
            "the server at {} did not answer within {}s (kanban.database_timeout_seconds)",
            self.shown,
            bound.as_secs()
        )))
    }
}

/// Runs `call` on `rt` for at most `bound` (the timer is made inside the runtime, which it needs).
fn within<F: Future>(rt: &Runtime, bound: Duration, call: F) -> Result<F::Output, tokio::time::error::Elapsed> {
    rt.block_on(async { tokio::time::timeout(bound, call).await })
}

/// One connection to the server.
pub(crate) struct Client {
    link: Link,
    /// `None` only while closing.
    pg: Option<tokio_postgres::Client>,
    notes: mpsc::UnboundedReceiver<Notification>,
    driver: Option<tokio::task::JoinHandle<()>>,
}

/// Why a connection was not made.
pub(crate) enum ConnectError {
    /// The server (or the network) refused or failed.
    Pg(tokio_postgres::Error),
    /// Nothing answered within the bound.
    Silent,
    /// No runtime could be built.
    Runtime(std::io::Error),
}

impl Client {
    /// Connects within `connect_bound` (start-up and authentication included); calls are bounded by `bound`.
    pub(crate) fn connect(
        config: &Config,
        shown: &str,
        bound: Duration,
        connect_bound: Duration,
    ) -> Result<Self, ConnectError> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(ConnectError::Runtime)?;
        let (pg, connection) = match within(&rt, connect_bound, config.connect(NoTls)) {
            Ok(Ok(made)) => made,
            Ok(Err(e)) => return Err(ConnectError::Pg(e)),
            Err(_) => return Err(ConnectError::Silent),
        };
        let (tx, notes) = mpsc::unbounded_channel();
        let driver = rt.spawn(drive(connection, tx));
        let link =
            Link { rt, bound, shown: shown.to_owned(), broken: Cell::new(false), statements: RefCell::default() };
        Ok(Self { link, pg: Some(pg), notes, driver: Some(driver) })
    }

    fn pg(&self) -> &tokio_postgres::Client {
        self.pg.as_ref().unwrap_or_else(|| unreachable!("taken only when closing"))
    }

    /// Whether the connection can no longer be used: the server or the network closed it, or a call ran past its
    /// bound.
    pub(crate) fn is_closed(&self) -> bool {
        self.link.broken.get() || self.pg().is_closed()
    }

    /// Whether a call ran past its bound.
    pub(crate) fn timed_out(&self) -> bool {
        self.link.broken.get()
    }

    /// A simple query bounded by `bound` instead of the connection's (the first query, within the connect bound).
    pub(crate) fn simple_query_within(&self, bound: Duration, sql: &str) -> PgResult<Vec<SimpleQueryMessage>> {
        self.link.run_within(bound, self.pg().simple_query(sql))
    }

    /// Begins a transaction (`BEGIN`).
    pub(crate) fn transaction(&mut self) -> PgResult<Transaction<'_>> {
        let pg = self.pg.as_mut().unwrap_or_else(|| unreachable!("taken only when closing"));
        let tx = self.link.run(pg.transaction())?;
        Ok(Transaction { link: &self.link, tx })
    }

    /// Begins a read-only repeatable-read transaction (one snapshot for all its reads).
    pub(crate) fn snapshot_transaction(&mut self) -> PgResult<Transaction<'_>> {
        let pg = self.pg.as_mut().unwrap_or_else(|| unreachable!("taken only when closing"));
        let start = pg.build_transaction().read_only(true).isolation_level(IsolationLevel::RepeatableRead).start();
        let tx = self.link.run(start)?;
        Ok(Transaction { link: &self.link, tx })
    }

    /// The next notification, waiting at most `wait`: `Ok(None)` when none came, `Err(())` when the connection has
    /// ended.
    pub(crate) fn notification(&mut self, wait: Duration) -> Result<Option<Notification>, ()> {
        if self.link.broken.get() {
            return Err(());
        }
        match within(&self.link.rt, wait, self.notes.recv()) {
            Ok(Some(note)) => Ok(Some(note)),
            Ok(None) => Err(()),
            Err(_) => Ok(None),
        }
    }
}

impl Drop for Client {
    /// Says goodbye to the server (briefly: a silent one is not waited for); dropping the runtime then closes the
    /// socket.
    fn drop(&mut self) {
        drop(self.pg.take());
        if let Some(driver) = self.driver.take()
            && !self.link.broken.get()
        {
            let _ = within(&self.link.rt, CLOSE_BOUND.min(self.link.bound), driver);
        }
    }
}

/// The connection's task: reads and writes for the client's calls, keeps the notifications for
/// [`Client::notification`], ends with the connection.
async fn drive(mut connection: Connection<Socket, NoTlsStream>, notes: mpsc::UnboundedSender<Notification>) {
    while let Some(message) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
        match message {
            Ok(AsyncMessage::Notification(note)) => {
                let _ = notes.send(note);
            }
            Ok(AsyncMessage::Notice(notice)) => tracing::debug!("board server: {}", notice.message()),
            Ok(_) => {}
            Err(e) => {
                tracing::debug!("board connection ended: {e}");
                return;
            }
        }
    }
}

/// A transaction on a [`Client`]; dropped without [`commit`](Self::commit), it is rolled back (the `ROLLBACK` goes
/// out with the connection's next call).
pub(crate) struct Transaction<'a> {
    link: &'a Link,
    tx: tokio_postgres::Transaction<'a>,
}

impl Transaction<'_> {
    pub(crate) fn commit(self) -> PgResult<()> {
        self.link.run(self.tx.commit())
    }
}

/// The calls a connection and a transaction share, each one bounded round trip.
pub(crate) trait GenericClient {
    type Pg: tokio_postgres::GenericClient + Sync;

    fn parts(&self) -> (&Link, &Self::Pg);

    fn execute(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> PgResult<u64> {
        let (link, pg) = self.parts();
        link.on(pg, sql, |s| async move { pg.execute(&s, params).await })
    }

    fn query(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> PgResult<Vec<Row>> {
        let (link, pg) = self.parts();
        link.on(pg, sql, |s| async move { pg.query(&s, params).await })
    }

    fn query_one(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> PgResult<Row> {
        let (link, pg) = self.parts();
        link.on(pg, sql, |s| async move { pg.query_one(&s, params).await })
    }

    fn query_opt(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> PgResult<Option<Row>> {
        let (link, pg) = self.parts();
        link.on(pg, sql, |s| async move { pg.query_opt(&s, params).await })
    }

    fn batch_execute(&mut self, sql: &str) -> PgResult<()> {
        let (link, pg) = self.parts();
        link.run(pg.batch_execute(sql))
    }

    fn simple_query(&mut self, sql: &str) -> PgResult<Vec<SimpleQueryMessage>> {
        let (link, pg) = self.parts();
        link.run(pg.simple_query(sql))
    }
}

impl GenericClient for Client {
    type Pg = tokio_postgres::Client;

    fn parts(&self) -> (&Link, &Self::Pg) {
        (&self.link, self.pg())
    }
}

impl<'a> GenericClient for Transaction<'a> {
    type Pg = tokio_postgres::Transaction<'a>;

    fn parts(&self) -> (&Link, &Self::Pg) {
        (self.link, &self.tx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection to the test server, or `None` (and a skip, counted by `cargo xtask ci`; a failure under CI).
    fn connect() -> Option<Client> {
        let Ok(url) = std::env::var("BERTH_TEST_POSTGRES_URL") else {
            assert!(std::env::var_os("CI").is_none(), "BERTH_TEST_POSTGRES_URL is not set under CI");
            let reason = "BERTH_TEST_POSTGRES_URL is not set (`.ci/run` starts a server)";
            eprintln!("skipped: {reason}");
            if let Some(path) = std::env::var_os("BERTH_TEST_SKIP_LOG") {
                use std::io::Write as _;
                let line = format!("kanban-postgres::client::tests\t{reason}\n");
                let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap();
                f.write_all(line.as_bytes()).unwrap();
            }
            return None;
        };
        let (config, shown) = crate::open::config(&url, "berth-test").unwrap();
        let bound = Duration::from_secs(10);
        Client::connect(&config, &shown, bound, bound).ok()
    }

    #[test]
    fn a_statement_is_prepared_once_per_connection_and_forgotten_when_the_server_drops_it() {
        let Some(mut c) = connect() else { return };
        // Asked as a simple query: the question keeps no statement of its own on the connection.
        let count = |c: &mut Client, sql: &str| -> i64 {
            let rows = c.simple_query(sql).unwrap();
            rows.iter()
                .find_map(|m| match m {
                    SimpleQueryMessage::Row(r) => r.get(0)?.parse().ok(),
                    _ => None,
                })
                .unwrap()
        };
        let prepared = |c: &mut Client| {
            count(c, "SELECT count(*) FROM pg_prepared_statements WHERE statement = 'SELECT $1::int + 1'")
        };
        for n in 0..3 {
            let row = c.query_one("SELECT $1::int + 1", &[&n]).unwrap();
            assert_eq!(row.get::<_, i32>(0), n + 1);
        }
        assert_eq!(prepared(&mut c), 1, "three calls, one statement kept on the server");
        {
            let mut tx = c.transaction().unwrap();
            assert_eq!(tx.query_one("SELECT $1::int + 1", &[&9]).unwrap().get::<_, i32>(0), 10);
            tx.commit().unwrap();
        }
        assert_eq!(prepared(&mut c), 1, "a transaction uses the connection's statement");
        // One first prepared in a transaction rolled back is still the connection's.
        {
            let mut tx = c.transaction().unwrap();
            assert_eq!(tx.query_one("SELECT $1::int + 2", &[&1]).unwrap().get::<_, i32>(0), 3);
        }
        assert_eq!(c.query_one("SELECT $1::int + 2", &[&2]).unwrap().get::<_, i32>(0), 4);
        // The server forgets it (as after a schema change): the call fails once, the next prepares it again.
        c.batch_execute("DEALLOCATE ALL").unwrap();
        assert!(c.query_one("SELECT $1::int + 1", &[&1]).is_err());
        assert_eq!(c.query_one("SELECT $1::int + 1", &[&1]).unwrap().get::<_, i32>(0), 2);
        assert_eq!(prepared(&mut c), 1);
        // A one-off text past the kept length (a batch built for its rows) is not kept.
        let long = format!("SELECT $1::int + 3 -- {}", "x".repeat(KEPT_STATEMENT_LEN));
        assert_eq!(c.query_one(&long, &[&1]).unwrap().get::<_, i32>(0), 4);
        let sql = "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE 'SELECT $1::int + 3 %'";
        assert_eq!(count(&mut c, sql), 0);
    }
}
