//! Which addresses are the public internet. Everything else (this host, the
//! cluster network, cloud metadata, multicast, ranges kept for documentation or
//! the future) is never fetched for a user, in any of its spellings: an IPv4
//! address written inside IPv6 (mapped, compatible, NAT64, 6to4) is judged as
//! the IPv4 address it carries.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What kind of address an IP is, for the guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AddressClass {
    Public,
    Loopback,
    Private,
    LinkLocal,
    /// 100.64.0.0/10, carrier-grade NAT.
    SharedCgnat,
    Multicast,
    Unspecified,
    Documentation,
    Benchmarking,
    /// Anything set aside that is not the public internet (240/4, 192.0.0/24, 100::/64, non-global v6).
    Reserved,
}

impl AddressClass {
    /// A short name for errors and receipts.
    pub fn name(self) -> &'static str {
        match self {
            AddressClass::Public => "public",
            AddressClass::Loopback => "loopback",
            AddressClass::Private => "private",
            AddressClass::LinkLocal => "link-local",
            AddressClass::SharedCgnat => "shared (CGNAT)",
            AddressClass::Multicast => "multicast",
            AddressClass::Unspecified => "unspecified",
            AddressClass::Documentation => "documentation",
            AddressClass::Benchmarking => "benchmarking",
            AddressClass::Reserved => "reserved",
        }
    }
}

/// Classifies an address; only [`AddressClass::Public`] may be fetched.
pub fn classify(ip: IpAddr) -> AddressClass {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(ip: Ipv4Addr) -> AddressClass {
    let [a, b, c, _] = ip.octets();
    if a == 0 {
        AddressClass::Unspecified
    } else if ip.is_loopback() {
        AddressClass::Loopback
    } else if ip.is_private() {
        AddressClass::Private
    } else if ip.is_link_local() {
        AddressClass::LinkLocal
    } else if a == 100 && (b & 0xc0) == 64 {
        AddressClass::SharedCgnat
    } else if ip.is_multicast() {
        AddressClass::Multicast
    } else if ip.is_documentation() {
        AddressClass::Documentation
    } else if a == 198 && (b & 0xfe) == 18 {
        AddressClass::Benchmarking
    } else if a >= 240 || (a == 192 && b == 0 && c == 0) || (a == 192 && b == 88 && c == 99) {
        AddressClass::Reserved
    } else {
        AddressClass::Public
    }
}

fn classify_v6(ip: Ipv6Addr) -> AddressClass {
    let s = ip.segments();
    if ip.is_unspecified() {
        return AddressClass::Unspecified;
    }
    if ip.is_loopback() {
        return AddressClass::Loopback;
    }
    if let Some(v4) = embedded_v4(ip) {
        return classify_v4(v4);
    }
    if ip.is_multicast() {
        AddressClass::Multicast
    } else if ip.is_unique_local() || (s[0] & 0xffc0) == 0xfec0 || (s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1) {
        // Unique local, the deprecated site-local, and local-use NAT64 all reach a private network.
        AddressClass::Private
    } else if ip.is_unicast_link_local() {
        AddressClass::LinkLocal
    } else if (s[0] == 0x2001 && s[1] == 0x0db8) || (s[0] == 0x3fff && s[1] < 0x1000) {
        AddressClass::Documentation
    } else if s[0] == 0x2001 && s[1] == 0x0002 && s[2] == 0 {
        AddressClass::Benchmarking
    } else if (s[0] & 0xe000) != 0x2000 || (s[0] == 0x2001 && s[1] < 0x0200) {
        // Outside global unicast 2000::/3, or in the IETF's 2001::/23 (Teredo among it).
        AddressClass::Reserved
    } else {
        AddressClass::Public
    }
}

/// The IPv4 address an IPv6 spelling carries: mapped (::ffff:a.b.c.d), compatible (::a.b.c.d),
/// NAT64 (64:ff9b::a.b.c.d) or 6to4 (2002:AABB:CCDD::).
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let o = ip.octets();
    let tail = Ipv4Addr::new(o[12], o[13], o[14], o[15]);
    if s[..5] == [0; 5] && (s[5] == 0xffff || s[5] == 0) {
        return Some(tail);
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some(tail);
    }
    if s[0] == 0x2002 {
        return Some(Ipv4Addr::new(o[2], o[3], o[4], o[5]));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An independent statement of the same rules: a CIDR table, first match wins.
    fn reference(ip: IpAddr) -> AddressClass {
        use AddressClass::*;
        match ip {
            IpAddr::V4(v4) => {
                let x = u32::from(v4);
                let table: &[(u32, u32, AddressClass)] = &[
                    (0x0000_0000, 8, Unspecified),
                    (0x7f00_0000, 8, Loopback),
                    (0x0a00_0000, 8, Private),
                    (0xac10_0000, 12, Private),
                    (0xc0a8_0000, 16, Private),
                    (0xa9fe_0000, 16, LinkLocal),
                    (0x6440_0000, 10, SharedCgnat),
                    (0xe000_0000, 4, Multicast),
                    (0xc000_0200, 24, Documentation),
                    (0xc633_6400, 24, Documentation),
                    (0xcb00_7100, 24, Documentation),
                    (0xc612_0000, 15, Benchmarking),
                    (0xf000_0000, 4, Reserved),
                    (0xc000_0000, 24, Reserved),
                    (0xc058_6300, 24, Reserved),
                ];
                table.iter().find(|(net, len, _)| x >> (32 - len) == net >> (32 - len)).map_or(Public, |(_, _, c)| *c)
            }
            IpAddr::V6(v6) => {
                let x = u128::from(v6);
                let within = |net: u128, len: u32| x >> (128 - len) == net >> (128 - len);
                if x == 0 {
                    return Unspecified;
                }
                if x == 1 {
                    return Loopback;
                }
                if within(0xffff_0000_0000, 96) || within(0, 96) || within(0x0064_ff9b << 96, 96) {
                    return reference(IpAddr::V4(Ipv4Addr::from(x as u32)));
                }
                if within(0x2002 << 112, 16) {
                    return reference(IpAddr::V4(Ipv4Addr::from((x >> 80) as u32)));
                }
                let table: &[(u128, u32, AddressClass)] = &[
                    (0xff << 120, 8, Multicast),
                    (0xfc << 120, 7, Private),
                    (0xfec << 116, 10, Private),
                    ((0x0064_ff9b_0001u128) << 80, 48, Private),
                    (0xfe8 << 116, 10, LinkLocal),
                    (0x2001_0db8 << 96, 32, Documentation),
                    (0x3fff << 112, 20, Documentation),
                    ((0x2001_0002_0000u128) << 80, 48, Benchmarking),
                    (0x2001 << 112, 23, Reserved),
                ];
                if let Some((_, _, c)) = table.iter().find(|(net, len, _)| within(*net, *len)) {
                    return *c;
                }
                if within(0x2 << 124, 3) { Public } else { Reserved }
            }
        }
    }

    /// Interesting IPv6 neighbourhoods, each filled with random bits past its prefix.
    const V6_PREFIXES: &[(u128, u32)] = &[
        (0, 0),
        (0xffff_0000_0000, 96),
        (0, 96),
        (0x0064_ff9b << 96, 96),
        ((0x0064_ff9b_0001u128) << 80, 48),
        (0x2002 << 112, 16),
        (0xfc << 120, 7),
        (0xfec << 116, 10),
        (0xfe8 << 116, 10),
        (0xff << 120, 8),
        (0x2001_0db8 << 96, 32),
        (0x3fff << 112, 16),
        ((0x2001_0002_0000u128) << 80, 48),
        (0x2001 << 112, 16),
        (0x2 << 124, 3),
    ];

    fn any_ip() -> impl Strategy<Value = IpAddr> {
        prop_oneof![
            any::<u32>().prop_map(|x| IpAddr::V4(Ipv4Addr::from(x))),
            (0..V6_PREFIXES.len(), any::<u128>()).prop_map(|(i, bits)| {
                let (net, len) = V6_PREFIXES[i];
                let mask = if len == 0 { 0 } else { u128::MAX << (128 - len) };
                IpAddr::V6(Ipv6Addr::from((net & mask) | (bits & !mask)))
            }),
        ]
    }

    fn cases() -> u32 {
        std::env::var("CLANKIE_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn fuzz_address_guard_agrees_with_the_reference_classification(ip in any_ip()) {
            prop_assert_eq!(classify(ip), reference(ip), "{}", ip);
        }
    }

    #[test]
    fn every_spelling_of_loopback_is_loopback() {
        for ip in ["127.0.0.1", "::1", "::ffff:127.0.0.1", "::127.0.0.1", "64:ff9b::7f00:1", "2002:7f00:1::"] {
            assert_eq!(classify(ip.parse().unwrap()), AddressClass::Loopback, "{ip}");
        }
        assert_eq!(classify("93.184.216.34".parse().unwrap()), AddressClass::Public);
        assert_eq!(classify("2606:2800:220:1::1".parse().unwrap()), AddressClass::Public);
    }
}
