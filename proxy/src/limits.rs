//! Rate limits on the public listener (issue 18): per client address on every request, per
//! route on calls carrying a payment (both before any signature work), and per payer once a
//! payment's signature is checked. Each is a keyed GCRA limiter (`governor`): one key's flood
//! spends only that key's allowance, so a flooding client never starves another.

use arc_swap::ArcSwap;
use async_trait::async_trait;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};
use ipnet::IpNet;
use paygate_config::{LimitsConfig, Rate};
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use std::hash::Hash;
use std::net::{IpAddr, Ipv6Addr};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often keys whose allowance is full again are forgotten, so the maps hold only the
/// clients seen lately.
const HOUSEKEEPING_EVERY: Duration = Duration::from_secs(10);

/// Which limit refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limited {
    Client,
    Payer,
    Route,
}

impl Limited {
    /// What was counted, and the setting that bounds it.
    fn words(self) -> (&'static str, &'static str) {
        match self {
            Self::Client => ("requests from this client address", "limits.client"),
            Self::Payer => ("paid calls from this payer", "limits.payer"),
            Self::Route => ("paid calls to this route", "limits.route"),
        }
    }
}

/// A refusal: which limit, its rate, and the whole seconds until a request would pass
/// (`Retry-After`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    pub limit: Limited,
    pub rate: Rate,
    pub retry_after_secs: u64,
}

impl Refused {
    /// The stop it is answered with: `429`, its words, and when to come back.
    pub fn stop(&self) -> paygate_gateway::payments::Stop {
        paygate_gateway::payments::Stop {
            code: paygate_domain::ErrorCode::TooManyRequests,
            message: self.message(),
            retry_after: Some(self.retry_after_secs),
        }
    }

    /// The 429's words: which limit was hit, at what rate, set where (a first load test meets
    /// the per-client limit before anything else).
    pub fn message(&self) -> String {
        let (what, setting) = self.limit.words();
        format!(
            "too many {what}: the limit is {} a second (bursts of {}, `{setting}` in the \
             configuration); retry after the delay given",
            self.rate.per_second,
            self.rate.burst.max(self.rate.per_second)
        )
    }
}

struct Keyed<K: Hash + Eq + Clone> {
    /// This node's share of the limit (swapped when the number of nodes changes).
    limiter: ArcSwap<DefaultKeyedRateLimiter<K>>,
    clock: DefaultClock,
    /// The limit as configured: the whole cluster's.
    rate: Rate,
    /// The nodes the limit is shared by now.
    nodes: AtomicU32,
}

/// The quota of one node of `nodes` sharing `rate` (each share rounded up, at least 1).
fn share(rate: Rate, nodes: u32) -> Option<Quota> {
    let nodes = nodes.max(1);
    let per_second = NonZeroU32::new(rate.per_second.div_ceil(nodes))?;
    let burst = NonZeroU32::new(rate.burst.div_ceil(nodes)).unwrap_or(per_second);
    Some(Quota::per_second(per_second).allow_burst(burst))
}

impl<K: Hash + Eq + Clone> Keyed<K> {
    fn new(rate: Rate) -> Option<Self> {
        let quota = share(rate, 1)?;
        Some(Self {
            limiter: ArcSwap::from_pointee(DefaultKeyedRateLimiter::dashmap(quota)),
            clock: DefaultClock::default(),
            rate,
            nodes: AtomicU32::new(1),
        })
    }

    /// Shares the limit among `nodes` from now on (the allowances counted so far restart).
    fn set_nodes(&self, nodes: u32) {
        let nodes = nodes.max(1);
        if self.nodes.swap(nodes, Ordering::SeqCst) == nodes {
            return;
        }
        if let Some(quota) = share(self.rate, nodes) {
            self.limiter
                .store(Arc::new(DefaultKeyedRateLimiter::dashmap(quota)));
        }
    }

    fn check(&self, key: &K, limit: Limited) -> Result<(), Refused> {
        self.limiter.load().check_key(key).map_err(|not_until| {
            let wait = not_until.wait_time_from(self.clock.now());
            Refused {
                limit,
                rate: self.rate,
                retry_after_secs: wait.as_secs() + u64::from(wait.subsec_nanos() > 0),
            }
            .at_least_one()
        })
    }

    fn housekeeping(&self) {
        let limiter = self.limiter.load();
        limiter.retain_recent();
        limiter.shrink_to_fit();
    }
}

impl Refused {
    fn at_least_one(mut self) -> Self {
        self.retry_after_secs = self.retry_after_secs.max(1);
        self
    }
}

/// The limits of one node.
pub struct Limits {
    client: Option<Keyed<IpAddr>>,
    payer: Option<Keyed<[u8; 20]>>,
    route: Option<Keyed<Arc<str>>>,
    trusted_proxies: Vec<IpNet>,
    ipv6_prefix: u8,
}

impl Limits {
    pub fn from_config(c: &LimitsConfig) -> Self {
        Self {
            client: Keyed::new(c.client),
            payer: Keyed::new(c.payer),
            route: Keyed::new(c.route),
            trusted_proxies: c.trusted_proxies.clone(),
            ipv6_prefix: c.ipv6_prefix,
        }
    }

    /// The client a request is counted against: the connection's peer, or behind trusted
    /// proxies the last `X-Forwarded-For` address that is not one of them.
    pub fn client_key(&self, peer: IpAddr, forwarded_for: Option<&str>) -> IpAddr {
        let mut client = canonical(peer);
        if self.trusted(client) {
            if let Some(list) = forwarded_for {
                for hop in list.rsplit(',') {
                    let Ok(ip) = hop.trim().parse::<IpAddr>() else {
                        break;
                    };
                    client = canonical(ip);
                    if !self.trusted(client) {
                        break;
                    }
                }
            }
        }
        match client {
            IpAddr::V6(v6) => IpAddr::V6(mask_v6(v6, self.ipv6_prefix)),
            v4 => v4,
        }
    }

    fn trusted(&self, ip: IpAddr) -> bool {
        self.trusted_proxies.iter().any(|n| n.contains(&ip))
    }

    /// Whether clients are limited at all (the hot path skips finding the key when not).
    pub fn limits_clients(&self) -> bool {
        self.client.is_some()
    }

    pub fn check_client(&self, key: IpAddr) -> Result<(), Refused> {
        self.client
            .as_ref()
            .map_or(Ok(()), |l| l.check(&key, Limited::Client))
    }

    pub fn check_route(&self, route_id: &Arc<str>) -> Result<(), Refused> {
        self.route
            .as_ref()
            .map_or(Ok(()), |l| l.check(route_id, Limited::Route))
    }

    pub fn check_payer(&self, payer: &[u8; 20]) -> Result<(), Refused> {
        self.payer
            .as_ref()
            .map_or(Ok(()), |l| l.check(payer, Limited::Payer))
    }

    /// On a cluster: the limits are the cluster's, each of `nodes` live nodes enforcing its
    /// share (a rate divided by the nodes, rounded up).
    pub fn set_nodes(&self, nodes: usize) {
        let nodes = u32::try_from(nodes).unwrap_or(u32::MAX);
        if let Some(l) = &self.client {
            l.set_nodes(nodes);
        }
        if let Some(l) = &self.payer {
            l.set_nodes(nodes);
        }
        if let Some(l) = &self.route {
            l.set_nodes(nodes);
        }
    }

    fn housekeeping(&self) {
        if let Some(l) = &self.client {
            l.housekeeping();
        }
        if let Some(l) = &self.payer {
            l.housekeeping();
        }
        if let Some(l) = &self.route {
            l.housekeeping();
        }
    }
}

/// IPv4-mapped IPv6 addresses count as the IPv4 client they are.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

fn mask_v6(ip: Ipv6Addr, prefix: u8) -> Ipv6Addr {
    let bits = u128::from(ip);
    let mask = u128::MAX
        .checked_shl(128 - u32::from(prefix.min(128)))
        .unwrap_or(0);
    Ipv6Addr::from(bits & mask)
}

/// Forgets, every few seconds, the keys whose allowance is whole again.
pub struct LimitsHousekeeping(pub Arc<Limits>);

#[async_trait]
impl BackgroundService for LimitsHousekeeping {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut every = tokio::time::interval(HOUSEKEEPING_EVERY);
        loop {
            tokio::select! {
                _ = every.tick() => self.0.housekeeping(),
                _ = shutdown.changed() => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_shared_by_nodes_gives_each_its_rounded_up_share() {
        let rate = Rate {
            per_second: 30,
            burst: 31,
        };
        let l = limits(rate, &[]);
        let client: IpAddr = "10.0.0.1".parse().unwrap();
        let admitted = |l: &Limits| (0..100).filter(|_| l.check_client(client).is_ok()).count();
        assert_eq!(admitted(&l), 31, "one node: the whole burst");
        l.set_nodes(3);
        assert_eq!(admitted(&l), 11, "three nodes: 31 / 3 rounded up");
        l.set_nodes(3);
        assert_eq!(
            admitted(&l),
            0,
            "the same count again keeps the allowance spent"
        );
        l.set_nodes(0);
        assert_eq!(admitted(&l), 31, "no node known: the whole limit");
        assert_eq!(
            share(
                Rate {
                    per_second: 2,
                    burst: 0
                },
                5
            )
            .map(|q| q.burst_size().get()),
            Some(1)
        );
    }

    fn limits(client: Rate, trusted: &[&str]) -> Limits {
        Limits::from_config(&LimitsConfig {
            client,
            payer: Rate::OFF,
            route: Rate::new(1, 2),
            trusted_proxies: trusted.iter().map(|n| n.parse().unwrap()).collect(),
            ipv6_prefix: 64,
        })
    }

    #[test]
    fn a_client_spends_its_burst_then_waits_and_others_are_untouched() {
        let l = limits(Rate::new(1, 3), &[]);
        let a: IpAddr = "203.0.113.7".parse().unwrap();
        let b: IpAddr = "203.0.113.8".parse().unwrap();
        for _ in 0..3 {
            l.check_client(a).unwrap();
        }
        let refused = l.check_client(a).unwrap_err();
        assert_eq!(refused.limit, Limited::Client);
        assert_eq!(refused.retry_after_secs, 1);
        l.check_client(b).unwrap();
        // Payer limit off: never refuses.
        for _ in 0..100 {
            l.check_payer(&[7; 20]).unwrap();
        }
        let r: Arc<str> = Arc::from("route");
        l.check_route(&r).unwrap();
        l.check_route(&r).unwrap();
        assert_eq!(l.check_route(&r).unwrap_err().limit, Limited::Route);
    }

    #[test]
    fn clients_behind_trusted_proxies_are_told_apart_and_ipv6_hosts_grouped() {
        let l = limits(Rate::OFF, &["10.0.0.0/8"]);
        let lb: IpAddr = "10.1.2.3".parse().unwrap();
        let direct: IpAddr = "198.51.100.1".parse().unwrap();
        let xff = Some("192.0.2.9, 198.51.100.4, 10.0.0.5");
        // Behind the load balancer: the last untrusted hop (earlier ones are the client's word).
        assert_eq!(
            l.client_key(lb, xff),
            "198.51.100.4".parse::<IpAddr>().unwrap()
        );
        // A peer that is not trusted is its own address, whatever it claims.
        assert_eq!(l.client_key(direct, xff), direct);
        // Garbage in the header stops the walk at the last good hop.
        assert_eq!(l.client_key(lb, Some("nonsense")), lb);
        let v6a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let v6b: IpAddr = "2001:db8:1:2:bbbb::2".parse().unwrap();
        assert_eq!(l.client_key(v6a, None), l.client_key(v6b, None));
        let mapped: IpAddr = "::ffff:198.51.100.1".parse().unwrap();
        assert_eq!(l.client_key(mapped, None), direct);
    }
}
