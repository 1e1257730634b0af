//! Log redaction: the values of forwarded variables (`terminal.docker_forward_env`) never reach a log line.
//!
//! Forwarded secrets travel in each exec request, and bollard logs requests at debug level; workers write their
//! stderr to log files on disk. So every log line, whoever emits it (berth or a library), goes through [`Stderr`],
//! which replaces the secret values with `***` before anything is written.

use std::io::Write;
use std::sync::RwLock;

use tracing_subscriber::fmt::MakeWriter;

static SECRETS: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// What replaces a secret in a log line.
pub const MASK: &str = "***";

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
}
