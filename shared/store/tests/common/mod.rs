//! What the store's integration tests share: both backends side by side, a payment record.

#![allow(dead_code)]

use paygate_domain::model::{GatewayPayment, PaymentStatus};
use paygate_store::postgres::{PgSettings, PgStore};
use paygate_store::testing::PgCluster;
use paygate_store::SledStore;
use paygate_x402::money::UsdcAmount;
use std::sync::Arc;

/// The aggregates both backends implement: the store itself.
pub use paygate_store::Store as Backend;

/// Both backends, each with what keeps it alive.
pub struct Both {
    pub sled: Arc<SledStore>,
    pub pg: Arc<PgStore>,
    _dir: tempfile::TempDir,
    pub cluster: PgCluster,
}

pub fn settings(url: String) -> PgSettings {
    PgCluster::settings(&url)
}

impl Both {
    pub async fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let cluster = PgCluster::start();
        let pg = PgStore::connect_lazy(&settings(cluster.url())).unwrap();
        pg.migrate().await.unwrap();
        Self {
            sled: Arc::new(SledStore::open(dir.path()).unwrap()),
            pg: Arc::new(pg),
            _dir: dir,
            cluster,
        }
    }

    pub fn each(&self) -> [(&'static str, Arc<dyn Backend>); 2] {
        [("sled", self.sled.clone()), ("postgres", self.pg.clone())]
    }
}

/// A `RESERVED` payment of org `o1` on route `r1`.
pub fn payment(id: &str, nonce_key: &str) -> GatewayPayment {
    GatewayPayment {
        id: id.into(),
        org_id: "o1".into(),
        route_id: "r1".into(),
        nonce_key: nonce_key.into(),
        network: "eip155:84532".into(),
        asset: "0xa".into(),
        payer: "0xp".into(),
        pay_to: "0xt".into(),
        amount: UsdcAmount(10_000),
        transfer: Default::default(),
        status: PaymentStatus::Reserved,
        transaction: None,
        failure: None,
        verify_us: 0,
        settle_ms: None,
        upstream_status: None,
        valid_before: 0,
        settled_by_reconciliation: false,
        redeemed_at: None,
        plan_slot: None,
        created_at: "t".into(),
        updated_at: "t".into(),
    }
}
