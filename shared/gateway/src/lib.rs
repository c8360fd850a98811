//! The gateway core, apart from Pingora and axum: the in-memory route table the proxy reads,
//! which networks settle now, the SSRF policy for upstreams, plan usage, request metrics, and the payment
//! service (the paid step and payment reconciliation); on a cluster, following the other nodes'
//! route changes.

/// A hash map for what is touched on every request (the proxy's route lookup, the metrics
/// aggregator's per-event fold): foldhash, seeded per process, instead of `std`'s SipHash, which
/// was a measurable share of the 402 path (issue 21). Keys come from the gateway's own records
/// (slugs, paths, ids); request input only looks them up, so it cannot grow a collision chain.
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

pub mod balancer;
pub mod bazaar;
pub mod channels;
pub mod events;
pub mod follow;
pub mod metrics;
pub mod payments;
pub mod route_entry;
pub mod route_table;
pub mod settleable;
pub mod target_policy;
mod unflushed;
pub mod upstream_target;
pub mod usage;
pub mod windows;
