//! A command the sandbox cannot start (missing program, not executable) is reported as `docker` reports it: one
//! `berth:` line and exit 127 or 126, instead of the engine's raw OCI text on the command's output.

use domain::ports::{OutputSink, OutputStream};

/// Passes output through, except an engine's exec-start failure as the very first output, which it holds back.
pub struct StartFailureSink<'a> {
    inner: &'a mut dyn OutputSink,
    /// Nothing has been written yet.
    first: bool,
    held: Option<(OutputStream, Vec<u8>)>,
    /// Appended to the "command not found" line (e.g. how to name the task).
    hint: String,
}

/// Whether `text` is the engine saying the exec could not start (Docker: "OCI runtime exec failed"; Podman/crun:
/// "OCI runtime attempted to invoke a command that was not found", "executable file … not found").
fn is_start_failure(text: &str) -> bool {
    text.starts_with("OCI runtime exec failed")
        || text.contains("OCI runtime attempted to invoke")
        || text.contains("OCI permission denied")
        || ((text.starts_with("crun:") || text.starts_with("runc:")) && text.contains("executable file"))
}

impl<'a> StartFailureSink<'a> {
    pub fn new(inner: &'a mut dyn OutputSink) -> Self {
        Self { inner, first: true, held: None, hint: String::new() }
    }

    /// Text appended to the "command not found" line.
    #[must_use]
    pub fn with_hint(mut self, hint: String) -> Self {
        self.hint = hint;
        self
    }

    /// After the exec ended with `code`: the exit code to use, printing one line for a start failure (or the held
    /// text unchanged when it was not one after all).
    pub fn finish(&mut self, code: i64, program: &str) -> i64 {
        let Some((stream, bytes)) = self.held.take() else { return code };
        let text = String::from_utf8_lossy(&bytes).to_lowercase();
        if code == 126 || code == 127 {
            if text.contains("permission denied") {
                eprintln!("berth: {program}: permission denied (not executable) in the sandbox");
                return 126;
            }
            if text.contains("no such file") || text.contains("not found") {
                eprintln!("berth: {program}: command not found in the sandbox{}", self.hint);
                return 127;
            }
        }
        self.inner.write(stream, &bytes);
        code
    }
}

impl OutputSink for StartFailureSink<'_> {
    fn write(&mut self, stream: OutputStream, bytes: &[u8]) {
        if std::mem::take(&mut self.first) && is_start_failure(&String::from_utf8_lossy(bytes)) {
            self.held = Some((stream, bytes.to_vec()));
            return;
        }
        if let Some((s, held)) = self.held.take() {
            // More output followed: it was the command's own text, print it in order.
            self.inner.write(s, &held);
        }
        self.inner.write(stream, bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::ports::CapturedOutput;

    const DOCKER_MISSING: &str = "OCI runtime exec failed: exec failed: unable to start container process: exec: \
                                  \"/no/such\": stat /no/such: no such file or directory: unknown\r\n";
    const DOCKER_NOEXEC: &str = "OCI runtime exec failed: exec failed: unable to start container process: exec: \
                                 \"/etc/passwd\": permission denied: unknown\r\n";

    #[test]
    fn the_engines_start_failures_become_127_and_126() {
        for (text, code, want) in [(DOCKER_MISSING, 126, 127), (DOCKER_NOEXEC, 126, 126)] {
            let mut out = CapturedOutput::default();
            let mut sink = StartFailureSink::new(&mut out);
            sink.write(OutputStream::Stdout, text.as_bytes());
            assert_eq!(sink.finish(code, "/x"), want);
            assert!(out.stdout.is_empty());
        }
    }

    #[test]
    fn a_commands_own_output_is_never_swallowed() {
        let mut out = CapturedOutput::default();
        let mut sink = StartFailureSink::new(&mut out);
        sink.write(OutputStream::Stdout, b"hello\n");
        assert_eq!(sink.finish(3, "/x"), 3);
        assert_eq!(out.stdout, b"hello\n");
        // The same words printed by a command that exits 0 are its output.
        let mut out = CapturedOutput::default();
        let mut sink = StartFailureSink::new(&mut out);
        sink.write(OutputStream::Stdout, DOCKER_MISSING.as_bytes());
        assert_eq!(sink.finish(0, "/x"), 0);
        assert_eq!(out.stdout, DOCKER_MISSING.as_bytes());
    }
}
