//! Payment channel payloads signed by hand (the faults the official clients never send): a
//! channel configuration for a route's `batch-settlement` offer, vouchers, deposits.
#![allow(dead_code)]

use super::chain::{self, address, signer};
use alloy_primitives::{Bytes, B256, U256};
use alloy_signer::SignerSync;
use alloy_sol_types::SolStruct;
use paygate_x402::batch::client::PayerChannel;
use paygate_x402::batch::{
    self, ChannelConfig, ChannelConfigWire, ReceiveWithAuthorization, ERC3009_COLLECTOR_ADDRESS,
};
use serde_json::{json, Value};

pub const CHAIN_ID: u64 = 84532;

/// `digest` signed by account `key`.
pub fn sign(key: usize, digest: B256) -> Bytes {
    signer(key)
        .sign_hash_sync(&digest)
        .expect("sign")
        .as_bytes()
        .to_vec()
        .into()
}

/// A voucher of `max` on `c`, signed by `key`.
pub fn voucher(c: &ChannelConfig, max: u128, key: usize) -> Bytes {
    sign(
        key,
        batch::voucher_digest(CHAIN_ID, c.channel_id(CHAIN_ID), max),
    )
}

/// An ERC-3009 deposit of `amount` into `c`'s channel, signed by `payer`, valid five minutes.
pub fn deposit(c: &ChannelConfig, payer: usize, amount: u64, salt: u64) -> batch::Erc3009Deposit {
    let id = c.channel_id(CHAIN_ID);
    let valid_before = U256::from(chain::now() + 300);
    let auth = ReceiveWithAuthorization {
        from: c.payer,
        to: ERC3009_COLLECTOR_ADDRESS,
        value: U256::from(amount),
        validAfter: U256::ZERO,
        validBefore: valid_before,
        nonce: batch::deposit_nonce(id, U256::from(salt)),
    };
    batch::Erc3009Deposit {
        amount: u128::from(amount),
        valid_after: U256::ZERO,
        valid_before,
        salt: U256::from(salt),
        signature: sign(payer, auth.eip712_signing_hash(&chain::usdc_domain())),
    }
}

/// A payer paying a route's `batch-settlement` offer (`accepted`, from its challenge) by hand.
pub struct HandPayer {
    pub key: usize,
    pub channel: PayerChannel,
    pub config: ChannelConfig,
}

impl HandPayer {
    /// Payer `key`'s channel with `salt` on the offer `accepted`.
    pub fn new(key: usize, accepted: &Value, salt: u8) -> Self {
        let channel = PayerChannel::for_offer(address(key), accepted, B256::repeat_byte(salt))
            .expect("a batch-settlement offer");
        Self {
            key,
            config: channel.config.clone(),
            channel,
        }
    }

    /// The voucher object for `max` on `c` signed by `key`.
    pub fn voucher_of(c: &ChannelConfig, max: u128, key: usize) -> Value {
        serde_json::to_value(PayerChannel::voucher_on(c, CHAIN_ID, max, &signer(key))).unwrap()
    }

    /// A `voucher` payload of `max`, signed by `key`, for configuration `c`.
    pub fn voucher_payload(c: &ChannelConfig, max: u128, key: usize) -> Value {
        json!({
            "type": "voucher",
            "channelConfig": ChannelConfigWire::from(c),
            "voucher": Self::voucher_of(c, max, key),
        })
    }

    /// This payer's own voucher of `max`.
    pub fn voucher(&self, max: u128) -> Value {
        serde_json::to_value(self.channel.voucher(max, &signer(self.key))).unwrap()
    }

    /// A `deposit` payload of `d` (whoever signed it) with this payer's first voucher of `max`.
    pub fn deposit(&self, d: &batch::Erc3009Deposit, max: u128) -> Value {
        let mut payload = serde_json::to_value(self.channel.deposit(
            d.amount,
            max,
            d.valid_before.to::<u64>(),
            d.salt,
            &signer(self.key),
        ))
        .unwrap();
        payload["deposit"]["authorization"]["erc3009Authorization"]["signature"] =
            d.signature.to_string().into();
        payload
    }

    /// The `PAYMENT-SIGNATURE` header carrying `payload`.
    pub fn header(&self, payload: Value) -> String {
        self.channel.header(&payload)
    }
}

/// The official npm clients (`@x402/fetch` with `@x402/evm`'s batch-settlement scheme,
/// `tests/interop/x402_channel_pay.cjs`) paying `n` requests over one channel as account `payer`,
/// in a process of their own: to `urls` (comma-separated: `block` requests to each in turn),
/// then `then` (`refund[:AMOUNT]`). The script's JSON report.
pub async fn official_pay(
    urls: &str,
    payer: usize,
    rpc: &str,
    n: usize,
    block: usize,
    then: Option<&str>,
) -> Value {
    let modules = std::env::var("PAYGATE_TEST_NODE_MODULES").expect(
        "PAYGATE_TEST_NODE_MODULES must name a node_modules with @x402/fetch (run via `make test`)",
    );
    let mut cmd = tokio::process::Command::new("node");
    cmd.env("NODE_PATH", modules)
        .env("X402_SPREAD_BLOCK", block.to_string())
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/interop/x402_channel_pay.cjs"
        ))
        .arg(urls)
        .arg(chain::KEYS[payer])
        .arg(rpc)
        .arg(n.to_string())
        .args(then);
    super::run_client(cmd).await
}
