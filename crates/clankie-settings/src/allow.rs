//! The egress allow list (`CLANKIE_EGRESS_ALLOW`): addresses the outbound
//! guard (`clankie-egress`) lets through although they are not public, for
//! the sandbox's loopback stand-ins. Empty by default.

use std::net::{IpAddr, SocketAddr};

/// One allowed network, optionally on one port only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    net: IpAddr,
    prefix: u8,
    port: Option<u16>,
}

/// Addresses allowed although not public.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList {
    entries: Vec<Entry>,
}

/// An allow-list entry that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{entry}` is not an address, network or address:port (e.g. 127.0.0.1:8700, 10.0.0.0/8, [::1]:80)")]
pub struct AllowListError {
    pub entry: String,
}

impl AllowList {
    /// Parses a comma-separated list of `ip`, `ip/prefix`, `ip:port` and `[ipv6]:port`.
    pub fn parse(list: &str) -> Result<AllowList, AllowListError> {
        let mut entries = Vec::new();
        for raw in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            entries.push(parse_entry(raw).ok_or_else(|| AllowListError { entry: raw.chars().take(80).collect() })?);
        }
        Ok(AllowList { entries })
    }

    /// The list with one more address allowed (on its port only).
    pub fn with(mut self, addr: SocketAddr) -> AllowList {
        self.entries.push(Entry { net: addr.ip(), prefix: full(addr.ip()), port: Some(addr.port()) });
        self
    }

    /// Whether the list holds no entry (the default: nothing beyond the public internet).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether `addr` is allowed.
    pub fn contains(&self, addr: SocketAddr) -> bool {
        self.entries.iter().any(|e| e.port.is_none_or(|p| p == addr.port()) && in_net(addr.ip(), e.net, e.prefix))
    }
}

fn parse_entry(raw: &str) -> Option<Entry> {
    if let Ok(addr) = raw.parse::<SocketAddr>() {
        let ip = addr.ip();
        return Some(Entry { net: ip, prefix: full(ip), port: Some(addr.port()) });
    }
    let (ip, prefix) = match raw.split_once('/') {
        Some((ip, prefix)) => (ip.parse::<IpAddr>().ok()?, Some(prefix.parse::<u8>().ok()?)),
        None => (raw.parse::<IpAddr>().ok()?, None),
    };
    let prefix = prefix.unwrap_or(full(ip));
    (prefix <= full(ip)).then_some(Entry { net: ip, prefix, port: None })
}

fn full(ip: IpAddr) -> u8 {
    if ip.is_ipv4() { 32 } else { 128 }
}

fn in_net(ip: IpAddr, net: IpAddr, prefix: u8) -> bool {
    let (ip, net, width) = match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => (u128::from(u32::from(a)), u128::from(u32::from(n)), 32),
        (IpAddr::V6(a), IpAddr::V6(n)) => (u128::from(a), u128::from(n), 128),
        _ => return false,
    };
    let shift = width - u32::from(prefix);
    shift >= width || (ip >> shift) == (net >> shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_match_by_network_and_port() {
        let list = AllowList::parse("127.0.0.1:8700, 10.1.0.0/16, [::1]:80, 192.168.5.5").unwrap();
        assert!(list.contains("127.0.0.1:8700".parse().unwrap()));
        assert!(!list.contains("127.0.0.1:8701".parse().unwrap()));
        assert!(list.contains("10.1.200.3:443".parse().unwrap()));
        assert!(!list.contains("10.2.0.1:443".parse().unwrap()));
        assert!(list.contains("[::1]:80".parse().unwrap()));
        assert!(list.contains("192.168.5.5:9".parse().unwrap()));
        assert!(AllowList::parse("").unwrap().is_empty());
        assert!(AllowList::parse("localhost:80").is_err());
        assert!(AllowList::parse("10.0.0.0/33").is_err());
    }
}
