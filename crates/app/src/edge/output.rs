//! Output: aligned tables and JSON on stdout; nothing else goes to stdout.

use std::io::Write;

/// Prints rows under headers, columns padded to the widest cell.
pub fn table(headers: &[&str], rows: &[Vec<String>]) {
    // Cells may hold a task's words (a title, a command): shown, never obeyed by the terminal.
    let rows: Vec<Vec<String>> =
        rows.iter().map(|r| r.iter().map(|c| crate::edge::terminal_text::sanitize(c).into_owned()).collect()).collect();
    let rows = rows.as_slice();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = std::io::stdout().lock();
    let line = |cells: Vec<&str>| -> String {
        let n = cells.len();
        cells
            .into_iter()
            .enumerate()
            .map(|(i, c)| if i + 1 == n { c.to_owned() } else { format!("{c:<w$}", w = widths[i]) })
            .collect::<Vec<_>>()
            .join("  ")
    };
    let _ = writeln!(out, "{}", line(headers.to_vec()));
    for row in rows {
        let _ = writeln!(out, "{}", line(row.iter().map(String::as_str).collect()));
    }
}

/// Prints a value as pretty JSON: a typed view (a `Serialize` struct, in its fields' order) or a JSON value.
pub fn json<T: serde::Serialize + ?Sized>(value: &T) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", serde_json::to_string_pretty(value).unwrap_or_default());
}

/// Prints one line of text, its control characters shown as escapes (a line may carry a task's words).
pub fn line(text: &str) {
    let _ = writeln!(std::io::stdout().lock(), "{}", crate::edge::terminal_text::sanitize(text));
}

/// Whether stdout gets colour: a terminal, and `NO_COLOR` unset or empty (<https://no-color.org>).
pub fn colour() -> bool {
    use std::io::IsTerminal;
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// The SGR colour of a state word: green for what is well, yellow for what waits, red for what needs a look.
fn colour_of(word: &str) -> Option<&'static str> {
    match word {
        "running" | "alive" | "done" | "yes" => Some("32"),
        "ready" | "todo" | "triage" | "review" | "starting" => Some("33"),
        "stopped" | "blocked" | "failed" | "unreachable" | "silent" | "gone" | "worker_gone" | "gave_up" | "no" => {
            Some("31")
        }
        _ => None,
    }
}

/// Prints one line as [`line`] does, its state words (`running`, `blocked`, …) coloured when [`colour`] says so.
pub fn painted_line(text: &str) {
    let clean = crate::edge::terminal_text::sanitize(text);
    if !colour() {
        let _ = writeln!(std::io::stdout().lock(), "{clean}");
        return;
    }
    let mut out = String::with_capacity(clean.len() + 16);
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        match colour_of(word) {
            Some(c) => out.push_str(&format!("\x1b[{c}m{word}\x1b[0m")),
            None => out.push_str(word),
        }
        word.clear();
    };
    for ch in clean.chars() {
        if ch.is_alphanumeric() || ch == '_' {
            word.push(ch);
        } else {
            flush(&mut word, &mut out);
            out.push(ch);
        }
    }
    flush(&mut word, &mut out);
    let _ = writeln!(std::io::stdout().lock(), "{out}");
}

/// Runs `work`, showing `berth: TEXT … Ns` on stderr while it runs (rewritten in place every second, erased when it
/// ends), only when stderr is a terminal and output is not JSON; silent otherwise, so logs and pipes stay clean.
pub async fn with_progress<T>(json: bool, text: &str, work: impl std::future::Future<Output = T>) -> T {
    use std::io::IsTerminal;
    if json || !std::io::stderr().is_terminal() {
        return work.await;
    }
    let show = |line: &str| {
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[K{line}");
        let _ = err.flush();
    };
    let started = std::time::Instant::now();
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    let mut work = std::pin::pin!(work);
    let out = loop {
        tokio::select! {
            out = &mut work => break out,
            // The first tick is immediate: the note shows at once, then counts the seconds.
            _ = tick.tick() => show(&format!("berth: {text} … {}s", started.elapsed().as_secs())),
        }
    };
    show("");
    out
}

/// Seconds as `1h02m`, `3m05s`, `12s` (the dashboard's ages, `kanban ls`'s AGE and STARTED).
pub fn age(secs: i64) -> String {
    let s = secs.max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86_400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}
