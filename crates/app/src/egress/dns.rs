//! The egress proxy's DNS server (UDP 53, the sandboxes' only DNS server): A and AAAA answers for listed names with
//! the vetted addresses; REFUSED, logged, for anything else. No name the policy does not list is ever looked up.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::UdpSocket;

use super::shared::Shared;

const TYPE_A: u16 = 1;
const TYPE_AAAA: u16 = 28;
const RCODE_REFUSED: u8 = 5;

/// Answers queries until the socket fails.
pub(super) async fn serve(sock: UdpSocket, shared: Arc<Shared>) {
    let sock = Arc::new(sock);
    let mut buf = [0u8; 1500];
    loop {
        let Ok((n, peer)) = sock.recv_from(&mut buf).await else { return };
        let query = buf[..n].to_vec();
        let (sock, shared) = (sock.clone(), shared.clone());
        tokio::spawn(async move {
            if let Some(reply) = answer(&query, peer, &shared).await {
                let _ = sock.send_to(&reply, peer).await;
            }
        });
    }
}

async fn answer(query: &[u8], peer: SocketAddr, shared: &Shared) -> Option<Vec<u8>> {
    let q = Question::parse(query)?;
    let name = q.name.to_ascii_lowercase();
    if !shared.policy.allows_name(&name, None) {
        shared.deny(peer.ip(), "dns", &name, "name is not listed");
        return Some(reply(query, &q, RCODE_REFUSED, &[]));
    }
    let resolved: Vec<IpAddr> =
        match tokio::time::timeout(Duration::from_secs(5), tokio::net::lookup_host((name.as_str(), 0))).await {
            Ok(Ok(addrs)) => addrs.map(|a| a.ip()).collect(),
            _ => Vec::new(),
        };
    let allowed = shared.policy.dns_answer(&name, &resolved).unwrap_or_default();
    if allowed.is_empty() && !resolved.is_empty() {
        let shown: Vec<String> = resolved.iter().map(ToString::to_string).collect();
        shared.deny(peer.ip(), "dns", &name, &format!("resolves to unlisted address {}", shown.join(", ")));
        return Some(reply(query, &q, RCODE_REFUSED, &[]));
    }
    let records: Vec<IpAddr> = allowed
        .into_iter()
        .filter(|ip| matches!((q.qtype, ip), (TYPE_A, IpAddr::V4(_)) | (TYPE_AAAA, IpAddr::V6(_))))
        .collect();
    Some(reply(query, &q, 0, &records))
}

/// The one question of a query.
struct Question {
    name: String,
    qtype: u16,
    /// Where the question ends in the query (the answer copies it).
    end: usize,
}

impl Question {
    fn parse(q: &[u8]) -> Option<Self> {
        // A standard query with exactly one question.
        if q.len() < 12 || q[2] & 0x80 != 0 || u16::from_be_bytes([q[4], q[5]]) != 1 {
            return None;
        }
        let mut at = 12;
        let mut labels = Vec::new();
        loop {
            let len = usize::from(*q.get(at)?);
            at += 1;
            if len == 0 {
                break;
            }
            if len > 63 {
                return None;
            }
            labels.push(String::from_utf8_lossy(q.get(at..at + len)?).into_owned());
            at += len;
        }
        let qtype = u16::from_be_bytes([*q.get(at)?, *q.get(at + 1)?]);
        Some(Self { name: labels.join("."), qtype, end: at + 4 })
    }
}

fn reply(query: &[u8], q: &Question, rcode: u8, records: &[IpAddr]) -> Vec<u8> {
    let mut out = Vec::with_capacity(q.end + records.len() * 28);
    out.extend_from_slice(&query[..2]);
    // QR, the query's opcode and RD, RA; then the rcode.
    out.push(0x80 | (query[2] & 0x79));
    out.push(0x80 | rcode);
    out.extend_from_slice(&1u16.to_be_bytes());
    out.extend_from_slice(&u16::try_from(records.len()).unwrap_or(0).to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(&query[12..q.end]);
    for ip in records {
        // A pointer to the question's name, the type, class IN, a short TTL, the address.
        out.extend_from_slice(&[0xc0, 0x0c]);
        let (kind, bytes) = match ip {
            IpAddr::V4(v4) => (TYPE_A, v4.octets().to_vec()),
            IpAddr::V6(v6) => (TYPE_AAAA, v6.octets().to_vec()),
        };
        out.extend_from_slice(&kind.to_be_bytes());
        out.extend_from_slice(&1u16.to_be_bytes());
        out.extend_from_slice(&30u32.to_be_bytes());
        out.extend_from_slice(&u16::try_from(bytes.len()).unwrap_or(0).to_be_bytes());
        out.extend_from_slice(&bytes);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_is_read_and_answered_with_its_records() {
        // id 0x1234, RD, one question: a.test A IN.
        let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        q.extend_from_slice(&[1, b'a', 4, b't', b'e', b's', b't', 0, 0, 1, 0, 1]);
        let parsed = Question::parse(&q).unwrap();
        assert_eq!((parsed.name.as_str(), parsed.qtype, parsed.end), ("a.test", TYPE_A, q.len()));
        let r = reply(&q, &parsed, 0, &["10.1.2.3".parse().unwrap()]);
        assert_eq!(&r[..4], &[0x12, 0x34, 0x81, 0x80]);
        assert_eq!(&r[6..8], &[0, 1], "one answer");
        assert_eq!(&r[r.len() - 4..], &[10, 1, 2, 3]);
        let refused = reply(&q, &parsed, RCODE_REFUSED, &[]);
        assert_eq!(refused[3] & 0x0f, RCODE_REFUSED);
    }
}
