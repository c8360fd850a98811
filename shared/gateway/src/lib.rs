//! The gateway core, apart from Pingora and axum: the in-memory route table the proxy reads,
//! which networks settle now, the SSRF policy for upstreams, plan usage, request metrics, and the payment
//! service (the paid step and payment reconciliation); on a cluster, following the other nodes'
//! route changes.

pub mod balancer;
pub mod bazaar;
pub mod follow;
pub mod metrics;
pub mod payments;
pub mod route_table;
pub mod settleable;
pub mod target_policy;
mod unflushed;
pub mod usage;
