//! Which upstream addresses a route may reach. By default anything internal is refused
//! (loopback, private, link-local including cloud metadata, CGNAT, unique-local, unspecified,
//! multicast), so a tenant cannot point a route at the gateway's own network (SSRF). Checked when
//! a route is created or changed and again on every connect, after resolution, so a DNS answer
//! that changes later (rebinding) is still refused. Networks in the allow-list pass anyway.

use ipnet::IpNet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

#[derive(Debug, Clone, Default)]
pub struct TargetPolicy {
    allow: Vec<IpNet>,
}

fn internal_v4(ip: Ipv4Addr) -> bool {
    let o = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || o[0] == 0
        || (o[0] == 100 && (o[1] & 0xc0) == 64) // 100.64.0.0/10 (CGNAT, Alibaba metadata)
        || (o[0] == 192 && o[1] == 0 && o[2] == 0) // 192.0.0.0/24 (IETF protocol assignments)
        || (o[0] == 198 && (o[1] & 0xfe) == 18) // 198.18.0.0/15 (benchmarking)
        || o[0] >= 240 // reserved
}

fn internal_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return internal_v4(v4);
    }
    let s = ip.segments();
    ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || (s[0] & 0xfe00) == 0xfc00 // fc00::/7 unique local (incl. AWS metadata fd00:ec2::254)
        || (s[0] & 0xffc0) == 0xfe80 // fe80::/10 link-local
        || (s[0] == 0x64 && s[1] == 0xff9b) // NAT64 of anything
}

/// Whether `ip` is an internal address (refused unless allow-listed).
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => internal_v4(v4),
        IpAddr::V6(v6) => internal_v6(v6),
    }
}

/// A target refused because it resolves to an internal address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("targets resolving to internal addresses ({0}) are not allowed")]
pub struct Refused(pub IpAddr);

impl TargetPolicy {
    pub fn new(allow: Vec<IpNet>) -> Self {
        Self { allow }
    }

    /// Whether an upstream at `ip` may be connected to.
    pub fn allows(&self, ip: IpAddr) -> bool {
        !is_internal(ip) || self.allow.iter().any(|n| n.contains(&ip))
    }

    /// Checks a target host when a route is saved: an IP literal must be allowed; a name must
    /// not resolve to a refused address. A name that does not resolve (yet) is accepted: the
    /// connect-time check still applies.
    /// Resolves `host` without blocking (IP literals need no lookup) and checks the address
    /// against the policy: the address to connect to, or why not (for logs and answers).
    pub async fn resolve(&self, host: &str, port: u16) -> Result<std::net::SocketAddr, String> {
        let addr = match host.parse::<IpAddr>() {
            Ok(ip) => std::net::SocketAddr::new(ip, port),
            Err(_) => tokio::net::lookup_host((host, port))
                .await
                .map_err(|e| format!("cannot resolve the upstream host: {e}"))?
                .next()
                .ok_or_else(|| "cannot resolve the upstream host: no address".to_string())?,
        };
        if !self.allows(addr.ip()) {
            return Err(
                "the upstream resolves to an internal address, which is not allowed".to_string(),
            );
        }
        Ok(addr)
    }

    pub async fn check_host(&self, host: &str, port: u16) -> Result<(), Refused> {
        if let Ok(ip) = host.parse::<IpAddr>() {
            return if self.allows(ip) {
                Ok(())
            } else {
                Err(Refused(ip))
            };
        }
        let lookup = tokio::time::timeout(
            Duration::from_secs(2),
            tokio::net::lookup_host((host, port)),
        )
        .await;
        if let Ok(Ok(addrs)) = lookup {
            for a in addrs {
                if !self.allows(a.ip()) {
                    return Err(Refused(a.ip()));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_addresses_are_refused_by_default() {
        let p = TargetPolicy::default();
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.100.100.200",
            "::1",
            "fe80::1",
            "fd00:ec2::254",
            "::ffff:127.0.0.1",
            "::",
            "224.0.0.1",
            "255.255.255.255",
        ] {
            assert!(!p.allows(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "8.8.8.8",
            "1.1.1.1",
            "2606:4700::1111",
            "172.32.0.1",
            "100.128.0.1",
        ] {
            assert!(p.allows(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn allow_list_opens_only_its_networks() {
        let p = TargetPolicy::new(vec!["127.0.0.0/8".parse().unwrap()]);
        assert!(p.allows("127.0.0.1".parse().unwrap()));
        assert!(!p.allows("169.254.169.254".parse().unwrap()));
    }

    #[tokio::test]
    async fn names_are_checked_after_resolution() {
        let p = TargetPolicy::default();
        assert!(p.check_host("localhost", 80).await.is_err());
        assert!(p.check_host("127.0.0.1", 80).await.is_err());
        assert!(p.check_host("no-such-host.invalid", 80).await.is_ok());
        assert!(TargetPolicy::new(vec![
            "127.0.0.0/8".parse().unwrap(),
            "::1/128".parse().unwrap()
        ])
        .check_host("localhost", 80)
        .await
        .is_ok());
    }
}
