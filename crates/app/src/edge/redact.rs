//! Log redaction: the values of forwarded variables (`terminal.docker_forward_env`) never reach a log line.
//!
//! Forwarded secrets travel in each exec request, and bollard logs requests at debug level; workers write their
//! stderr to log files on disk. So every log line, whoever emits it (berth or a library), goes through [`Stderr`],
//! which replaces the secret values with `***` before anything is written. A task's own output, which a worker stores
//! (its log, the board's `result`), goes through a [`Redactor`]: the same masking over a byte stream whose chunks
//! may split a secret.

use std::io::Write;
use std::sync::RwLock;

use tracing_subscriber::fmt::MakeWriter;

static SECRETS: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// What replaces a secret in a log line.
pub const MASK: &str = "***";

/// The secret values a context's processes must not log: its forwarded variables' values
/// (`terminal.docker_forward_env`), its credentials' values (`terminal.docker_credentials` and every profile's
/// override: a destination that echoes a header back hands the value to the sandbox's output) and the board server's
/// password, every text of it (as the client decodes it and as written in the URL, percent-encoded).
pub fn secrets_of(ctx: &crate::edge::context::Ctx) -> Vec<String> {
    let t = &ctx.settings.terminal;
    let credentials =
        t.docker_credentials.0.0.keys().chain(t.docker_credentials_overrides.0.values().flat_map(|c| c.0.keys()));
    let names = t.docker_forward_env.iter().chain(credentials);
    let board_password = ctx.database_url().map(kanban_postgres::url_secrets).unwrap_or_default();
    names.filter_map(|name| ctx.env.get(name)).map(str::to_owned).chain(board_password).collect()
}

/// Adds `values` to the secrets already registered (a long-lived process serving several dispatches).
pub fn add_secrets(values: &[String]) {
    let known: Vec<String> = SECRETS.read().map(|s| s.clone()).unwrap_or_default();
    set_secrets(known.iter().chain(values).map(String::as_str));
}

/// Registers the values to hide: each as it is, and as it appears inside a JSON string (a logged request body).
pub fn set_secrets<'a>(values: impl IntoIterator<Item = &'a str>) {
    let mut all: Vec<String> = Vec::new();
    for v in values.into_iter().filter(|v| !v.is_empty()) {
        all.push(v.to_owned());
        if let Ok(json) = serde_json::to_string(v) {
            let inner = &json[1..json.len() - 1];
            if inner != v {
                all.push(inner.to_owned());
            }
        }
    }
    // Longest first, so a secret that contains another is hidden whole.
    all.sort_by_key(|s| std::cmp::Reverse(s.len()));
    all.dedup();
    if let Ok(mut s) = SECRETS.write() {
        *s = all;
    }
}

/// `text` with every registered secret replaced by [`MASK`].
pub fn redact(text: &str) -> String {
    let Ok(secrets) = SECRETS.read() else { return text.to_owned() };
    let mut out = text.to_owned();
    for s in secrets.iter() {
        if out.contains(s.as_str()) {
            out = out.replace(s.as_str(), MASK);
        }
    }
    out
}

/// Masks the registered secrets in a byte stream: a secret split across two chunks is still masked, since the end
/// of a chunk that could begin a secret is held back until the next chunk (or [`Redactor::finish`]) decides.
#[derive(Debug, Default)]
pub struct Redactor {
    held: Vec<u8>,
}

impl Redactor {
    /// The masked bytes of `chunk` that are ready to write; a possible start of a secret at its end is held back.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        let Ok(secrets) = SECRETS.read() else { return chunk.to_vec() };
        if secrets.is_empty() {
            return chunk.to_vec();
        }
        let mut buf = std::mem::take(&mut self.held);
        buf.extend_from_slice(chunk);
        let (out, held) = mask_bytes(&buf, &secrets, false);
        self.held = held;
        out
    }

    /// The bytes still held back, masked (the stream ended).
    pub fn finish(&mut self) -> Vec<u8> {
        let buf = std::mem::take(&mut self.held);
        let Ok(secrets) = SECRETS.read() else { return buf };
        mask_bytes(&buf, &secrets, true).0
    }
}

/// `buf` with every secret replaced by [`MASK`], and (unless `end`) the tail that is a proper prefix of a secret,
/// held back for the next chunk. Secrets are sorted longest first, so the longest match wins.
fn mask_bytes(buf: &[u8], secrets: &[String], end: bool) -> (Vec<u8>, Vec<u8>) {
    let mut first = [false; 256];
    for s in secrets {
        first[usize::from(s.as_bytes()[0])] = true;
    }
    let mut out = Vec::with_capacity(buf.len());
    let mut i = 0;
    while i < buf.len() {
        if first[usize::from(buf[i])] {
            let rest = &buf[i..];
            if let Some(s) = secrets.iter().find(|s| rest.starts_with(s.as_bytes())) {
                out.extend_from_slice(MASK.as_bytes());
                i += s.len();
                continue;
            }
            if !end && secrets.iter().any(|s| s.len() > rest.len() && s.as_bytes().starts_with(rest)) {
                return (out, rest.to_vec());
            }
        }
        out.push(buf[i]);
        i += 1;
    }
    (out, Vec::new())
}

/// The log writer: stderr, redacted. tracing's formatter hands it one whole event per write.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stderr;

impl Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        std::io::stderr().lock().write_all(redact(&text).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

impl<'a> MakeWriter<'a> for Stderr {
    type Writer = Stderr;

    fn make_writer(&'a self) -> Self::Writer {
        Stderr
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_masked_raw_and_json_escaped() {
        set_secrets(["hunter2", "a\"b", ""]);
        assert_eq!(redact("Env:[\"S=hunter2\"]"), "Env:[\"S=***\"]");
        assert_eq!(redact(r#"{"Env":["Q=a\"b"]}"#), r#"{"Env":["Q=***"]}"#);
        assert_eq!(redact("nothing here"), "nothing here");
    }

    #[test]
    fn a_secret_split_across_chunks_is_masked() {
        // The same secrets as the other test: they share the process-wide list and may run at once.
        set_secrets(["hunter2", "a\"b", ""]);
        let mut r = Redactor::default();
        let mut out = r.push(b"pass: hun");
        out.extend(r.push(b"ter2 and hu"));
        out.extend(r.push(b"nt"));
        out.extend(r.finish());
        assert_eq!(String::from_utf8(out).unwrap(), "pass: *** and hunt");
        assert_eq!(r.push(b"hunter2hunter2!"), b"******!");
    }
}
