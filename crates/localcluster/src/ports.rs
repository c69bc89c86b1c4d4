//! Free ports for the servers of a set.
//!
//! Picked **below the kernel's ephemeral range**: a port taken from that range
//! (bind to :0) can, in the second or two before the server binds it, become the
//! source port of any outgoing connection on the machine (other clusters, test
//! clients), and the server then fails with "address already in use". Outside the
//! range only explicit binders compete, and `up` retries once with new ports if one
//! wins anyway.

use std::net::TcpListener;

use anyhow::{Context as _, Result};

/// The lowest port of the kernel's ephemeral range.
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768)
}

/// `n` distinct ports free on 127.0.0.1 now, each held bound until all are found.
pub fn free_ports(n: usize) -> Result<Vec<u16>> {
    hold_free_ports(n)?.iter().map(|l| Ok(l.local_addr()?.port())).collect()
}

/// `n` listeners on distinct free ports of 127.0.0.1, below the ephemeral range when
/// there is room there.
fn hold_free_ports(n: usize) -> Result<Vec<TcpListener>> {
    const LOW: u16 = 10_000;
    let high = ephemeral_start();
    let mut held: Vec<TcpListener> = Vec::with_capacity(n);
    let room = usize::from(high.saturating_sub(LOW));
    if room > 100 * n {
        // Distinct offsets in random order: two sets starting at once rarely collide.
        for offset in rand::seq::index::sample(&mut rand::rng(), room, room.min(2000)) {
            let Ok(port) = u16::try_from(offset).map(|o| LOW + o) else { continue };
            if held.len() == n {
                break;
            }
            if let Ok(l) = TcpListener::bind(("127.0.0.1", port)) {
                held.push(l);
            }
        }
    }
    // No usable room below the ephemeral range: the kernel's choice.
    while held.len() < n {
        held.push(TcpListener::bind(("127.0.0.1", 0)).context("binding a free port")?);
    }
    Ok(held)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn distinct_free_ports_below_the_ephemeral_range() {
        // Checked while the ports are still held: once released, any other test or
        // cluster on the machine may bind one, so "free afterwards" cannot be asserted.
        let held = hold_free_ports(9).unwrap();
        let ports: Vec<u16> = held.iter().map(|l| l.local_addr().unwrap().port()).collect();
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), 9, "{ports:?}");
        let high = ephemeral_start();
        for p in ports {
            assert!((10_000..high).contains(&p) || high <= 10_900, "{p} outside 10000..{high}");
            assert!(TcpListener::bind(("127.0.0.1", p)).is_err(), "{p} was found but not held");
        }
        assert_eq!(free_ports(3).unwrap().len(), 3);
    }
}
