//! How many connections each client address holds, so that one client cannot take every
//! file descriptor the server has (and with them, everyone else's answers).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::net::TcpStream;

/// The open connections per address, up to a limit.
#[derive(Clone)]
pub(crate) struct PerAddress {
    limit: usize,
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

/// One connection counted against its address until dropped.
pub(crate) struct Slot {
    key: IpAddr,
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl PerAddress {
    pub(crate) fn new(limit: usize) -> Self {
        PerAddress { limit: limit.max(1), open: Arc::default() }
    }

    /// A slot for a connection from `ip`, or `None` if its address holds the limit.
    pub(crate) fn take(&self, ip: IpAddr) -> Option<Slot> {
        let key = key(ip);
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open.entry(key).or_insert(0);
        if *count >= self.limit {
            return None;
        }
        *count += 1;
        Some(Slot { key, open: self.open.clone() })
    }

    /// Answers a connection over the limit with 503 and closes it, without waiting for
    /// anything: a client that opens connections faster than they close must not make
    /// the server hold more. What the client sent already is read first, so that the
    /// close is a FIN and not a reset that could discard the answer; a client whose
    /// request comes later may find the connection reset instead.
    pub(crate) fn refuse(&self, stream: TcpStream) {
        let mut sink = [0u8; 4096];
        for _ in 0..16 {
            if !matches!(stream.try_read(&mut sink), Ok(n) if n > 0) {
                break;
            }
        }
        let body = format!(
            "{{\"error\":\"too many connections from your address (the limit is {}); close some, or wait for \
             them to end, and try again\"}}",
            self.limit
        );
        let answer = format!(
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
             Retry-After: 1\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        // A new socket's buffer takes it whole; if not, the client gets less, then the close.
        let _ = stream.try_write(answer.as_bytes());
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.key);
            }
        }
    }
}

/// What counts as one address: an IPv4 address (also written as IPv6), or an IPv6
/// address's /64, which one machine typically holds whole (a client can pick any address
/// in it).
fn key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let segments = v6.segments();
            IpAddr::V6(Ipv6Addr::new(segments[0], segments[1], segments[2], segments[3], 0, 0, 0, 0))
        }
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_counted_per_address_and_given_back_when_dropped() {
        let per = PerAddress::new(2);
        let a: IpAddr = "10.0.0.1".parse().expect("an address");
        let first = per.take(a).expect("room");
        let _second = per.take(a).expect("room");
        assert!(per.take(a).is_none(), "the third is over the limit");
        assert!(per.take("10.0.0.2".parse().expect("an address")).is_some(), "another address has its own");
        drop(first);
        assert!(per.take(a).is_some(), "a closed connection's slot is free again");
    }

    #[test]
    fn an_ipv6_slash_64_is_one_address_and_ipv4_mapped_is_ipv4() {
        let per = PerAddress::new(1);
        let _held = per.take("2001:db8:1:2::1".parse().expect("an address")).expect("room");
        assert!(per.take("2001:db8:1:2:ffff::9".parse().expect("an address")).is_none(), "the same /64");
        assert!(per.take("2001:db8:1:3::1".parse().expect("an address")).is_some(), "another /64");
        let _v4 = per.take("192.0.2.1".parse().expect("an address")).expect("room");
        assert!(per.take("::ffff:192.0.2.1".parse().expect("an address")).is_none(), "the same IPv4 address");
    }
}
