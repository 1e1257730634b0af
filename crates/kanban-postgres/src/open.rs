//! Connecting to the server and making sure `berth` is berth's schema at a version this build understands; the
//! migrations run in one transaction under an advisory lock, so gateways starting together migrate once.

use std::str::FromStr;
use std::sync::Mutex;
use std::time::Duration;

use domain::board::StoreError;
use tokio_postgres::Config;
use tokio_postgres::error::SqlState;

use crate::client::{Client, ConnectError, GenericClient, Transaction};
use crate::schema::{APPLICATION, MIGRATIONS, MIN_SERVER_VERSION};
use crate::{Conn, PgKanbanStore, PgResult, off_runtime, server_message};

/// The advisory lock key of migrations ("BRTHMIGR").
const MIGRATE_LOCK: i64 = 0x4252_5448_4d49_4752;

/// `url` with its password replaced by `***`, for messages: in a URL the user information's password (however it is
/// written: unencoded `/`, `?` or `@` included) and a `password=` query parameter, in a key-value string the
/// `password` value (quoted or not, spaces around `=` allowed); then any text of the password left anywhere, as
/// written or as the client reads it.
pub fn redact_url(url: &str) -> String {
    let mut shown = match url.split_once("://") {
        Some((scheme, rest)) => format!("{scheme}://{}", redact_authority(rest)),
        None => redact_key_values(url),
    };
    for secret in secrets(url) {
        shown = shown.replace(&secret, "***");
    }
    shown
}

/// `url` without its password, for a process that must not hold it (a worker's command): the user information's
/// password, a `password=` query parameter or key-value pair are left out; everything else is kept, so the URL still
/// names the server, the user and the database.
pub fn without_password(url: &str) -> String {
    let mut stripped = match url.split_once("://") {
        Some((scheme, rest)) => {
            let shown = redact_authority(rest).replacen(":***@", "@", 1);
            let (head, query) = shown.split_once('?').map_or((shown.as_str(), ""), |(h, q)| (h, q));
            let kept: Vec<&str> = query
                .split('&')
                .filter(|p| {
                    !p.is_empty() && !p.split_once('=').is_some_and(|(k, _)| k.eq_ignore_ascii_case("password"))
                })
                .collect();
            if kept.is_empty() { format!("{scheme}://{head}") } else { format!("{scheme}://{head}?{}", kept.join("&")) }
        }
        None => {
            // `password = ***` (spaces around `=` allowed) left out of the key-value string.
            let shown = redact_key_values(url);
            let (mut out, mut rest) = (String::new(), shown.as_str());
            while let Some(i) = rest.find("***") {
                let key = rest[..i].trim_end().strip_suffix('=').map(str::trim_end);
                match key.and_then(|k| k.strip_suffix("password")) {
                    Some(head) if head.is_empty() || head.ends_with(char::is_whitespace) => out.push_str(head),
                    _ => out.push_str(&rest[..i + 3]),
                }
                rest = &rest[i + 3..];
            }
            out.push_str(rest);
            out.trim().to_owned()
        }
    };
    for secret in secrets(url) {
        stripped = stripped.replace(&secret, "");
    }
    stripped
}

/// The password's texts in `url`: as the client decodes it and as written (percent-encoded or not).
pub fn secrets(url: &str) -> Vec<String> {
    let mut all: Vec<String> = crate::url_password(url).into_iter().collect();
    if let Some((_, rest)) = url.split_once("://")
        && let Some((userinfo, _)) = split_userinfo(rest)
        && let Some((_, raw)) = userinfo.split_once(':')
    {
        all.push(raw.to_owned());
    }
    all.retain(|s| !s.is_empty());
    all.sort_by_key(|s| std::cmp::Reverse(s.len()));
    all.dedup();
    all
}

/// The user information and the rest of a URL after its scheme: up to the last `@` before the query string, so a
/// password with an unencoded `/` or `@` stays in the user information.
fn split_userinfo(rest: &str) -> Option<(&str, &str)> {
    let head = rest.find('?').map_or(rest, |q| &rest[..q]);
    let at = head.rfind('@')?;
    Some((&rest[..at], &rest[at + 1..]))
}

fn redact_authority(rest: &str) -> String {
    let (userinfo, tail) = match split_userinfo(rest) {
        Some((userinfo, tail)) => (Some(userinfo), tail),
        None => (None, rest),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => format!("{path}?{}", redact_query(query)),
        None => tail.to_owned(),
    };
    match userinfo {
        Some(u) => match u.split_once(':') {
            Some((user, _)) => format!("{user}:***@{tail}"),
            None => format!("{u}@{tail}"),
        },
        None => tail,
    }
}

/// `password=…` in a query string, replaced by `***`.
fn redact_query(query: &str) -> String {
    let parts = query.split('&').map(|p| match p.split_once('=') {
        Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
        _ => p.to_owned(),
    });
    parts.collect::<Vec<_>>().join("&")
}

/// A key-value connection string (`host=db password='a b'`) with the password's value replaced by `***`: values
/// are read as the client reads them (a quoted value up to its closing quote, backslash escapes, spaces around `=`).
fn redact_key_values(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(eq) = rest.find('=') {
        let key = rest[..eq].trim_end();
        let key_word = key.rsplit(char::is_whitespace).next().unwrap_or("");
        out.push_str(&rest[..=eq]);
        let after = &rest[eq + 1..];
        let value_at = after.len() - after.trim_start().len();
        let value = &after[value_at..];
        let value_len = if let Some(quoted) = value.strip_prefix('\'') {
            let mut escaped = false;
            let close = quoted.char_indices().find(|(_, c)| {
                let end = *c == '\'' && !escaped;
                escaped = *c == '\\' && !escaped;
                end
            });
            close.map_or(value.len(), |(i, _)| i + 2)
        } else {
            value.find(char::is_whitespace).unwrap_or(value.len())
        };
        out.push_str(&after[..value_at]);
        if key_word == "password" {
            out.push_str("***");
        } else {
            out.push_str(&value[..value_len]);
        }
        rest = &value[value_len..];
    }
    out.push_str(rest);
    out
}

/// The client configuration for `url` (and the URL without its password): a connection attempt gives up after 10 s,
/// and a connection kept open (a gateway's, a listener's) notices a peer that went away silently within about a
/// minute (TCP keepalives every 10 s after 30 s idle, unacknowledged data given up after 60 s) instead of hanging;
/// what the URL sets itself is kept, except that a longer keepalive idle time is shortened.
pub(crate) fn config(url: &str, application: &str) -> Result<(Config, String), StoreError> {
    let shown = redact_url(url);
    let mut config = Config::from_str(url)
        .map_err(|e| StoreError::Server(format!("kanban.database_url {shown:?} is not a PostgreSQL URL: {e}")))?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(Duration::from_secs(10));
    }
    if config.get_application_name().is_none() {
        config.application_name(application);
    }
    if config.get_keepalives_idle() > Duration::from_secs(30) {
        config.keepalives_idle(Duration::from_secs(30));
    }
    if config.get_keepalives_interval().is_none() {
        config.keepalives_interval(Duration::from_secs(10));
    }
    if config.get_keepalives_retries().is_none() {
        config.keepalives_retries(3);
    }
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(Duration::from_secs(60));
    }
    // Every statement is bounded by the server too (a lock wait included); the URL's own setting wins. A tick's
    // snapshot is a plain scan whose cost estimate crosses the JIT threshold at 100 000 tasks; compiling it takes
    // longer than running it, and berth's statements are short OLTP: no JIT. Both ride in the startup packet, so
    // they cost no round trip (every worker and `kanban complete` opens a connection).
    let mut options = format!("{} -c jit=off", config.get_options().unwrap_or_default());
    if !options.contains("statement_timeout") {
        options.push_str(&format!(" -c statement_timeout={}", STATEMENT_TIMEOUT.as_millis()));
    }
    config.options(options.trim_start());
    Ok((config, shown))
}

/// The server-side bound of one statement (`statement_timeout`, unless the URL sets one).
pub(crate) const STATEMENT_TIMEOUT: Duration = Duration::from_secs(60);

/// Connects with the whole start-up bounded, not only the TCP connect, and the first query too: a server that accepts
/// the connection (or even completes the handshake) and then never answers (a wrong service on the port, a stuck
/// pooler) is reported after the connect timeout (10 s unless the URL sets `connect_timeout`, and never more than
/// `bound`, the bound of every later call) instead of holding the command forever. Also says whether the server holds
/// berth's schema at this berth's version ([`current_at_once`], the one query every connection makes).
pub(crate) fn connect(config: &Config, shown: &str, bound: Duration) -> Result<(Client, bool), StoreError> {
    let connect_bound = config.get_connect_timeout().copied().unwrap_or(Duration::from_secs(10)).min(bound);
    let silent = || {
        StoreError::Server(format!(
            "the board database at {shown} did not answer within {}s; nothing was changed",
            connect_bound.as_secs()
        ))
    };
    let client = match Client::connect(config, shown, bound, connect_bound) {
        Ok(client) => client,
        Err(ConnectError::Pg(e)) => return Err(connect_error(shown, &e)),
        Err(ConnectError::Silent) => return Err(silent()),
        Err(ConnectError::Runtime(e)) => {
            return Err(StoreError::Server(format!("cannot connect to the board database at {shown}: {e}")));
        }
    };
    let current = current_at_once(&client, connect_bound);
    if client.timed_out() {
        return Err(silent());
    }
    Ok((client, current))
}

/// A connection failure as the one-line reason it is.
pub(crate) fn connect_error(shown: &str, e: &tokio_postgres::Error) -> StoreError {
    let code = e.code();
    let text = server_message(e);
    StoreError::Server(
        if code == Some(&SqlState::INVALID_PASSWORD) || code == Some(&SqlState::INVALID_AUTHORIZATION_SPECIFICATION) {
            format!("the board database at {shown} refused the credentials ({text}); nothing was changed")
        } else if code == Some(&SqlState::TOO_MANY_CONNECTIONS) || code == Some(&SqlState::CANNOT_CONNECT_NOW) {
            // "too many connections", "remaining connection slots are reserved", a server starting up: an outage
            // to wait out (a worker retries, the gateway reconnects at its next tick), never a refusal.
            return StoreError::Unreachable(format!(
                "the board database at {shown} has no free connection now ({text}); try again shortly, nothing was \
                 changed"
            ));
        } else if code == Some(&SqlState::INVALID_CATALOG_NAME) {
            format!("the board database at {shown} does not exist ({text}); create it first, nothing was changed")
        } else if e.as_db_error().is_some() {
            format!("the board database at {shown} refused the connection ({text}); nothing was changed")
        } else {
            format!("cannot reach the board database at {shown} ({text}); nothing was changed")
        },
    )
}

impl PgKanbanStore {
    /// Connects to the board at `url` as host `host`, checks the server and the schema, and migrates it.
    ///
    /// # Errors
    /// [`StoreError::Server`] for a malformed URL, an unreachable server, refused credentials, a server older
    /// than 12, a `berth` schema berth did not make, or one from a newer berth; nothing is written then.
    pub fn open(url: &str, host: &str) -> Result<Self, StoreError> {
        Self::open_within(url, host, crate::DEFAULT_TIMEOUT)
    }

    /// [`open`](Self::open) with every round trip to the server bounded by `bound` (`kanban.database_timeout_seconds`):
    /// past it a call fails with [`StoreError::Unreachable`] (the board unavailable) and the connection is replaced.
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn open_within(url: &str, host: &str, bound: Duration) -> Result<Self, StoreError> {
        let (config, shown) = config(url, "berth")?;
        let (client, current) = off_runtime(|| connect(&config, &shown, bound))?;
        let store = Self {
            conn: Mutex::new(Some(Conn { client })),
            config,
            shown: shown.clone(),
            bound,
            host: host.to_owned(),
        };
        if !current {
            store.with(move |c| prepare(c, &shown))?;
        }
        Ok(store)
    }
}

/// Checks the server version and the schema, then applies the missing migrations (all in one transaction).
fn prepare(c: &mut Conn, shown: &str) -> PgResult<()> {
    let version: i32 = c.client.query_one("SELECT current_setting('server_version_num')::int", &[])?.get(0);
    if version < MIN_SERVER_VERSION {
        return Err(StoreError::Server(format!(
            "the PostgreSQL server at {shown} is version {}.{}; berth needs 12 or newer (nothing was changed)",
            version / 10_000,
            version % 10_000
        ))
        .into());
    }
    let known = MIGRATIONS.len() as i64;
    if let Some(found) = schema_version(&mut c.client, shown)?
        && found == known
    {
        return Ok(());
    }
    let mut tx = c.client.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATE_LOCK])?;
    let found = match schema_version_in(&mut tx, shown)? {
        Some(v) => v,
        None => {
            tx.batch_execute(
                "CREATE SCHEMA IF NOT EXISTS berth; \
                 CREATE TABLE berth.meta (application TEXT NOT NULL, version BIGINT NOT NULL);",
            )?;
            tx.execute("INSERT INTO berth.meta (application, version) VALUES ($1, 0)", &[&APPLICATION])?;
            0
        }
    };
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(usize::try_from(found).unwrap_or(0)) {
        tx.batch_execute(sql)?;
        tx.execute("UPDATE berth.meta SET version = $1", &[&(i as i64 + 1)])?;
    }
    tx.execute(
        "INSERT INTO berth.boards (slug, name, created_at) VALUES ('default', 'default', \
         (extract(epoch from now()) * 1000)::bigint) ON CONFLICT (slug) DO NOTHING",
        &[],
    )?;
    tx.commit()?;
    Ok(())
}

/// Whether the server is new enough and holds berth's schema at exactly this berth's version, asked in one round
/// trip (one simple query of two statements): the common case of every connection a worker or a command opens.
/// Anything else (no schema yet, a foreign or newer one, an old server, an error) is left to the full check, which
/// says what is wrong or migrates.
fn current_at_once(client: &Client, bound: Duration) -> bool {
    use tokio_postgres::SimpleQueryMessage::Row;
    let Ok(messages) = client.simple_query_within(
        bound,
        "SELECT current_setting('server_version_num')::int; SELECT application, version FROM berth.meta",
    ) else {
        return false;
    };
    let rows: Vec<&tokio_postgres::SimpleQueryRow> =
        messages.iter().filter_map(|m| if let Row(r) = m { Some(r) } else { None }).collect();
    let [server, meta] = rows.as_slice() else { return false };
    let server_ok = server.get(0).and_then(|v| v.parse::<i32>().ok()).is_some_and(|v| v >= MIN_SERVER_VERSION);
    let known = MIGRATIONS.len().to_string();
    server_ok && meta.get(0) == Some(APPLICATION) && meta.get(1) == Some(known.as_str())
}

fn schema_version(client: &mut Client, shown: &str) -> PgResult<Option<i64>> {
    let mut tx = client.transaction()?;
    let v = schema_version_in(&mut tx, shown)?;
    tx.commit()?;
    Ok(v)
}

/// The applied migrations of berth's schema; `None` when there is no schema yet (or an empty one). A schema named
/// `berth` that berth did not make, or one from a newer berth, is an error.
fn schema_version_in(tx: &mut Transaction<'_>, shown: &str) -> PgResult<Option<i64>> {
    let row = tx.query_one(
        "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'berth'), to_regclass('berth.meta') IS NOT NULL, \
         (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'berth')",
        &[],
    )?;
    let (schema, meta, objects): (bool, bool, i64) = (row.get(0), row.get(1), row.get(2));
    let foreign = || {
        StoreError::Server(format!(
            "schema berth on {shown} was not made by berth (no berth board marks in it); it was left untouched — \
             point kanban.database_url at another database"
        ))
    };
    if !schema {
        return Ok(None);
    }
    if !meta {
        return if objects == 0 { Ok(None) } else { Err(foreign().into()) };
    }
    let rows = tx.query("SELECT application, version FROM berth.meta", &[]).map_err(|_| foreign())?;
    let [row] = rows.as_slice() else { return Err(foreign().into()) };
    let (application, version): (String, i64) =
        (row.try_get(0).map_err(|_| foreign())?, row.try_get(1).map_err(|_| foreign())?);
    if application != APPLICATION {
        return Err(foreign().into());
    }
    let known = MIGRATIONS.len() as i64;
    if version > known {
        return Err(StoreError::Server(format!(
            "the board schema on {shown} has version {version}, newer than this berth understands ({known}); \
             it was left untouched"
        ))
        .into());
    }
    Ok(Some(version))
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn passwords_never_reach_a_message() {
        assert_eq!(crate::url_password("postgres://berth:s3cret@db/board").as_deref(), Some("s3cret"));
        assert_eq!(crate::url_password("postgres://berth@db/board"), None);
        assert_eq!(redact_url("postgres://berth:s3cret@db:5432/board"), "postgres://berth:***@db:5432/board");
        assert_eq!(
            redact_url("postgres://berth@db/board?password=s3cret&x=1"),
            "postgres://berth@db/board?password=***&x=1"
        );
        assert_eq!(
            redact_url("host=db user=berth password=s3cret dbname=b"),
            "host=db user=berth password=*** dbname=b"
        );
        assert_eq!(redact_url("postgres://db/board"), "postgres://db/board");
        // An unencoded `/` or `@`, a percent-encoded password, quoted and spaced key-value forms.
        assert_eq!(redact_url("postgres://berth:se/cr@t@db:5432/b"), "postgres://berth:***@db:5432/b");
        assert_eq!(redact_url("postgres://berth:s%2Fcr%40t@db/b"), "postgres://berth:***@db/b");
        assert_eq!(redact_url("host=db password='s3 c\\'ret' user=berth"), "host=db password=*** user=berth");
        assert_eq!(redact_url("host=db password = s3cret user=berth"), "host=db password = *** user=berth");
        assert!(!redact_url("postgres://berth:pa?ss@db/b").contains("pa?ss"));
    }

    #[test]
    fn a_url_without_its_password_still_names_the_server() {
        use super::without_password as w;
        assert_eq!(w("postgres://berth:s3cret@db:5432/board"), "postgres://berth@db:5432/board");
        assert_eq!(
            w("postgres://berth:se/cr@t@db:5432/b?sslmode=disable"),
            "postgres://berth@db:5432/b?sslmode=disable"
        );
        assert_eq!(w("postgres://berth@db/b?Password=s3cret&x=1"), "postgres://berth@db/b?x=1");
        assert_eq!(w("postgres://berth@db/b?password=s3cret"), "postgres://berth@db/b");
        assert_eq!(w("host=db password = 's3 c\\'ret' user=berth"), "host=db  user=berth");
        assert_eq!(w("postgres://berth@%2Ftmp%2Fpg:5432/postgres"), "postgres://berth@%2Ftmp%2Fpg:5432/postgres");
    }

    #[test]
    fn every_session_bounds_its_statements_unless_the_url_does() {
        let (c, _) = super::config("postgres://db/b", "berth").unwrap();
        assert_eq!(c.get_options(), Some("-c jit=off -c statement_timeout=60000"));
        let (c, _) = super::config("postgres://db/b?options=-c%20statement_timeout%3D5", "berth").unwrap();
        assert_eq!(c.get_options(), Some("-c statement_timeout=5 -c jit=off"));
    }
}
