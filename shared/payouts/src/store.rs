//! The payout part of the store: corridors, quotes, payouts, their idempotency keys, webhook
//! events and events that arrived before their payout was known.

use crate::webhook::ProviderEvent;
use crate::{Corridor, PayIdempotency, Payout, PayoutStatus, Quote};
use async_trait::async_trait;
use paygate_domain::StoreResult;

/// The outcome of [`PayoutStore::begin_payout`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BeginPayout {
    /// Key reserved, quote marked used, payout stored as `Initiating`.
    Started,
    /// The key was used before: its record.
    KeyUsed(Box<PayIdempotency>),
    /// The quote was used by another payment.
    QuoteUsed,
}

/// What a verified webhook event did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventOutcome {
    /// The same event was processed before: nothing changed.
    Duplicate,
    /// The payout moved to this status (the payout as it is now).
    Applied(PayoutStatus, Box<Payout>),
    /// The payout exists but the event changes nothing (terminal, or the same status).
    Ignored(PayoutStatus),
    /// No payout has this provider id (yet): the event is kept for reconciliation.
    Orphaned,
}

#[async_trait]
pub trait PayoutStore: Send + Sync {
    /// Creates the corridor unless the org has one for the currency; returns the one stored.
    async fn create_corridor(&self, c: &Corridor) -> StoreResult<(Corridor, bool)>;
    async fn get_corridor(&self, id: &str) -> StoreResult<Option<Corridor>>;
    /// The organisation's corridors, oldest first (one per currency, so a handful).
    async fn list_corridors(&self, org_id: &str) -> StoreResult<Vec<Corridor>>;
    /// A page of a corridor's payouts, newest (highest id) first, below `before_id` if given.
    async fn list_payouts(
        &self,
        corridor_id: &str,
        before_id: Option<&str>,
        limit: usize,
    ) -> StoreResult<Vec<Payout>>;
    async fn update_corridor(&self, c: &Corridor) -> StoreResult<()>;
    async fn put_quote(&self, q: &Quote) -> StoreResult<()>;
    async fn get_quote(&self, id: &str) -> StoreResult<Option<Quote>>;
    async fn get_pay_key(&self, org_id: &str, key: &str) -> StoreResult<Option<PayIdempotency>>;
    /// Atomically reserves the key, marks the quote used and stores the `Initiating` payout.
    async fn begin_payout(&self, key: &PayIdempotency, payout: &Payout)
        -> StoreResult<BeginPayout>;
    /// The provider took the payout: store its id and status, index it, and remember the
    /// `202` body for the key.
    async fn accept_payout(&self, payout: &Payout, response: &str) -> StoreResult<()>;
    /// The provider refused: the payout is `FAILED` and the key is free again.
    async fn refuse_payout(&self, payout: &Payout) -> StoreResult<()>;
    async fn get_payout(&self, id: &str) -> StoreResult<Option<Payout>>;
    /// Payouts still `Initiating` (a crash or an outage stopped them before the provider
    /// confirmed).
    async fn initiating_payouts(&self) -> StoreResult<Vec<Payout>>;
    /// Applies a verified event identified by `event_key` at `received_at`.
    async fn apply_payout_event(
        &self,
        event_key: &str,
        event: &ProviderEvent,
        raw: &[u8],
        received_at: &str,
    ) -> StoreResult<EventOutcome>;
    /// Kept events whose payout is now known: `(provider id, event key, raw body)`.
    async fn adoptable_orphans(&self) -> StoreResult<Vec<(String, String, Vec<u8>)>>;
    async fn drop_orphan(&self, cpn_id: &str, event_key: &str) -> StoreResult<()>;
}
