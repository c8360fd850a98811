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
        resource: String::new(),
        amount: UsdcAmount(10_000),
        transfer: Default::default(),
        protocol: Default::default(),
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
        escrow: None,
        created_at: "t".into(),
        updated_at: "t".into(),
    }
}

/// A channel of organisation `o1`, version 1, nothing charged.
pub fn channel(id: &str) -> paygate_domain::channel::ChannelRecord {
    let mut c =
        paygate_domain::channel::ChannelRecord::opened(paygate_domain::channel::ChannelOpening {
            id: id.to_string(),
            org_id: "o1".into(),
            route_id: "rt".into(),
            network: "eip155:84532".into(),
            config: paygate_x402::batch::ChannelConfigWire {
                payer: "0x1".into(),
                payer_authorizer: "0x1".into(),
                receiver: "0x2".into(),
                receiver_authorizer: "0x3".into(),
                token: "0x4".into(),
                withdraw_delay: 900,
                salt: "0x00".into(),
            },
            balance: 5_000,
            total_claimed: 0,
            now: String::new(),
        });
    c.deposited = 5_000;
    c.owner = Some("n1".into());
    c.version = 1;
    c
}

/// `open()` once the previous holder of the sled directory has let go of its lock (sled's
/// background flusher drops its handle a moment after the database it belongs to), within 5 s.
pub async fn reopened<T, E: std::fmt::Debug>(open: impl Fn() -> Result<T, E>) -> T {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match open() {
            Ok(v) => return v,
            Err(e) if std::time::Instant::now() > deadline => panic!("reopening: {e:?}"),
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
        }
    }
}
