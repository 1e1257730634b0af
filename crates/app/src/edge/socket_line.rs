//! One request line from a local socket (the worker's hand-off, the gateway's relay): bounded in size and in the
//! time the whole line may take, so a peer that sends nothing, too much, or a byte at a time holds the one thread
//! that answers no longer than a few seconds.

use std::os::unix::net::UnixStream;
use std::time::Duration;

/// The longest request line read (a task id, a result); more is not a request.
const LIMIT: usize = 1 << 20;
/// How long a connection may take to send its request line, all of it.
const WAIT: Duration = Duration::from_secs(5);

/// One line from `conn` (without its newline), read within [`WAIT`] in all and up to [`LIMIT`] bytes; `None` past
/// either, or on a read error: a peer that trickles its bytes holds the reader no longer than one that sends none.
pub fn read(conn: &UnixStream) -> Option<String> {
    read_within(conn, LIMIT, WAIT)
}

fn read_within(conn: &UnixStream, limit: usize, within: Duration) -> Option<String> {
    use std::io::Read;
    let deadline = std::time::Instant::now() + within;
    let mut line = Vec::new();
    let mut buf = [0_u8; 4096];
    loop {
        let left = deadline.checked_duration_since(std::time::Instant::now()).filter(|d| !d.is_zero())?;
        conn.set_read_timeout(Some(left)).ok()?;
        let n = match (&*conn).read(&mut buf) {
            Ok(0) => return None,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return None,
        };
        if let Some(end) = buf[..n].iter().position(|b| *b == b'\n') {
            line.extend_from_slice(&buf[..end]);
            return String::from_utf8(line).ok();
        }
        line.extend_from_slice(&buf[..n]);
        if line.len() > limit {
            return None;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::unix::net::UnixStream;
    use std::time::Duration;

    use super::read_within;

    #[test]
    fn a_line_is_read_and_a_trickle_or_a_flood_is_cut() {
        let (mut a, b) = UnixStream::pair().unwrap();
        a.write_all(b"{\"op\":\"complete\"}\nrest").unwrap();
        assert_eq!(read_within(&b, 1024, Duration::from_secs(5)).as_deref(), Some("{\"op\":\"complete\"}"));

        // One byte every 20 ms for 4 s never finishes a line within 200 ms, however quick each read is.
        let (mut a, b) = UnixStream::pair().unwrap();
        let trickle = std::thread::spawn(move || {
            for _ in 0..200 {
                if a.write_all(b"x").is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20)); // the peer's pace, not synchronisation
            }
        });
        let started = std::time::Instant::now();
        assert_eq!(read_within(&b, 1024, Duration::from_millis(200)), None);
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "cut at its deadline, not at the trickle's end (4 s): {:?}",
            started.elapsed()
        );
        drop(b);
        trickle.join().unwrap();

        let (mut a, b) = UnixStream::pair().unwrap();
        a.write_all(&[b'y'; 5000]).unwrap();
        assert_eq!(read_within(&b, 1024, Duration::from_secs(5)), None, "longer than the limit");
    }
}
