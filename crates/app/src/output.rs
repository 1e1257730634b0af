//! Output: aligned tables and JSON on stdout; nothing else goes to stdout.

use std::io::Write;

/// Prints rows under headers, columns padded to the widest cell.
pub fn table(headers: &[&str], rows: &[Vec<String>]) {
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

/// Prints a value as pretty JSON.
pub fn json(value: &serde_json::Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", serde_json::to_string_pretty(value).unwrap_or_default());
}

/// Prints one line of text.
pub fn line(text: &str) {
    let _ = writeln!(std::io::stdout().lock(), "{text}");
}

/// Shows a progress note on stderr, only when stderr is a terminal and output is not JSON.
pub fn progress(json: bool, text: &str) {
    use std::io::IsTerminal;
    if !json && std::io::stderr().is_terminal() {
        let _ = writeln!(std::io::stderr().lock(), "{text}");
    }
}
