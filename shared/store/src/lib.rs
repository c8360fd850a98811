//! The store: one trait per aggregate (orgs, keys, routes, payments, counters, metrics, and
//! payouts, whose trait is `paygate_payouts::store::PayoutStore`), `Store` = all of them; every
//! durable record goes through it. Writes return only once durable (one exception: a voucher's
//! charge, `ChannelStore::put_channel_charges_if`, may return once safe from the process's
//! death, on disk within a bounded interval). Operations are whole
//! business steps (insert a route with its path index and idempotency record) so a networked
//! backend can implement them with its own transactions. `SledStore` is the embedded backend;
//! `postgres::PgStore` the one a cluster of nodes shares; `ClusterStore` what the nodes
//! coordinate through (leases, MCP sessions).

pub mod postgres;
mod sled_store;
#[cfg(feature = "testing")]
pub mod testing;
mod traits;

pub use sled_store::{SledOptions, SledStore};
pub use traits::*;

/// The store's parts, for code that calls them on a concrete backend (with
/// `paygate_payouts::store::PayoutStore` for the payout aggregate).
pub mod prelude {
    pub use crate::traits::{
        AuditStore, ChannelStore, ClusterStore, CounterStore, KeyStore, MetricStore, OrgStore,
        PaymentStore, RouteStore, Store, WebhookStore, WindowStore,
    };
}
