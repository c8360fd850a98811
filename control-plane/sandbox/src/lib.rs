//! The built-in sandbox payout provider: a stand-in for a real payout network, served on its own
//! loopback listener and spoken to over HTTP through the same client a real provider gets
//! (`payout::provider::HttpProvider`). It keeps its own sled database (`{storage}/sandbox-provider`),
//! so, like a real provider, it remembers payouts across a paygate crash.
//!
//! - Quotes: the configured mid rate less the spread, the configured rail fee, an expiry.
//! - Payouts: idempotent on `Idempotency-Key` (paygate's payment id); the beneficiary's name
//!   picks the outcome: `Sandbox Fail` -> failed, `Sandbox Hold` -> compliance hold then
//!   completed, `Sandbox Hold Fail` -> hold then failed, `Sandbox Reorder` -> completed then a
//!   late hold, `Sandbox Duplicate` -> completed, each event sent twice, `Sandbox Delay` ->
//!   completed late (told as `cpn.payment.delayed` first when signing as CPN), `Sandbox Silent`
//!   -> completed without any webhook (its status read tells it); anything else -> completed.
//! - Webhooks: signed (`t=...,v1=...`) with the first webhook secret, posted to paygate's
//!   `/webhooks/provider` after `webhook_delay_ms`, retried with doubling backoff until a `2xx`;
//!   the outbox is durable, so deliveries resume after a restart. With `webhook_signing =
//!   "circle"` they are CPN notifications instead (`cpn.payment.*`, a completion preceded by
//!   `cpn.payment.fiatPaymentInitiated`, a failure with a reason and code), signed with ECDSA by
//!   a P-256 key made at start, whose public key it serves as CPN does
//!   (`GET /v2/cpn/notifications/publicKey/{keyId}`).

mod app;
mod circle;
mod cpn_api;
mod onchain;
mod outbox;
mod provider;
pub use app::serve;
pub use provider::FundingChain;
