//! What any store must do: one trait per aggregate, each method a whole business step, and
//! `Store`, all of them.

use async_trait::async_trait;
use paygate_domain::audit::AuditEntry;
use paygate_domain::channel::ChannelRecord;
use paygate_domain::model::{
    ApiKeyRecord, GatewayPayment, IdempotencyRecord, MetricBucket, Org, PaymentIdRecord,
    PaymentStatus, Route,
};
use paygate_domain::rollup::{CountBatch, RollupRow, Tier};
use paygate_domain::webhook::{WebhookDelivery, WebhookEndpoint};
use paygate_domain::window::{AccessWindow, WindowUse};
use paygate_domain::StoreResult;
use paygate_payouts::store::PayoutStore;

/// What a conditional write of a payment requires of the stored one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PaymentGuard<'a> {
    /// Its outcome not recorded yet (`Reserved`/`Unknown`).
    StillOpen,
    /// Unchanged since it was read: its `updatedAt` is this one.
    Unchanged(&'a str),
}

impl PaymentGuard<'_> {
    /// Whether `stored` meets the guard.
    pub fn holds(&self, stored: &GatewayPayment) -> bool {
        match self {
            Self::StillOpen => stored.status.is_open(),
            Self::Unchanged(at) => stored.updated_at == *at,
        }
    }
}

/// The outcome of [`Store::reserve_payment`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PaymentReservation {
    /// The nonce key is now held by the new payment.
    Reserved,
    /// Another payment held the nonce key already (read in the same transaction): the same
    /// signed authorization was presented before.
    Held(Box<GatewayPayment>),
    /// The payment's `plan_slot` could not be taken (the organisation used its plan's requests
    /// this month): nothing was written.
    OverPlan,
}

/// Which of an organisation's payments a ledger page holds ([`PaymentStore::list_payments`]).
/// Payment ids are time-ordered, so a time range is a range of ids: the API turns times and
/// its cursor into `from_id` / `before_id`, and every filter is served by an index.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PaymentQuery {
    pub route_id: Option<String>,
    /// The payer's address, lower-case hex.
    pub payer: Option<String>,
    pub status: Option<PaymentStatus>,
    /// Only ids at or above this one.
    pub from_id: Option<String>,
    /// Only ids below this one (the cursor, or the end of a time range).
    pub before_id: Option<String>,
    /// At most this many payments.
    pub limit: usize,
}

impl PaymentQuery {
    /// Whether `p` passes the filters (for a backend that reads one index and checks the rest).
    pub fn admits(&self, p: &GatewayPayment) -> bool {
        self.route_id.as_ref().is_none_or(|r| *r == p.route_id)
            && self
                .payer
                .as_ref()
                .is_none_or(|a| a.eq_ignore_ascii_case(&p.payer))
            && self.status.is_none_or(|s| s == p.status)
            && self.from_id.as_ref().is_none_or(|f| p.id >= *f)
            && self.before_id.as_ref().is_none_or(|b| p.id < *b)
    }
}

/// The outcome of [`Store::reserve_mcp_spend`]; both carry the day's total afterwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpendReservation {
    Reserved { total: u64 },
    OverCap { total: u64 },
}

/// Organisations.
#[async_trait]
pub trait OrgStore: Send + Sync {
    /// Creates an organisation with its first API key; fails with `DuplicateSlug`.
    async fn create_org(&self, org: &Org, key: &ApiKeyRecord) -> StoreResult<()>;
    async fn get_org(&self, id: &str) -> StoreResult<Option<Org>>;
    async fn get_org_by_slug(&self, slug: &str) -> StoreResult<Option<Org>>;
    async fn list_orgs(&self) -> StoreResult<Vec<Org>>;
    /// Replaces an existing organisation record (slug unchanged).
    async fn update_org(&self, org: &Org) -> StoreResult<()>;
}

/// API keys (only their hashes are stored).
#[async_trait]
pub trait KeyStore: Send + Sync {
    async fn put_api_key(&self, key: &ApiKeyRecord) -> StoreResult<()>;
    async fn get_api_key(&self, key_id: &str) -> StoreResult<Option<ApiKeyRecord>>;
    async fn list_api_keys(&self, org_id: &str) -> StoreResult<Vec<ApiKeyRecord>>;
}

/// Routes with their per-org path index, and the idempotency records of route writes.
#[async_trait]
pub trait RouteStore: Send + Sync {
    /// The organisation's routes, in no particular order.
    async fn list_routes(&self, org_id: &str) -> StoreResult<Vec<Route>>;
    async fn get_route(&self, org_id: &str, route_id: &str) -> StoreResult<Option<Route>>;
    /// Inserts a route, its path index entry and (if given) the idempotency record, atomically.
    async fn insert_route(
        &self,
        route: &Route,
        idem: Option<&IdempotencyRecord>,
    ) -> StoreResult<()>;
    /// Replaces `old` by `new` if the stored route still equals `old`, moving the path index
    /// entry when the path changed, and stores the idempotency record, atomically.
    async fn replace_route(
        &self,
        old: &Route,
        new: &Route,
        idem: Option<&IdempotencyRecord>,
    ) -> StoreResult<()>;
    /// Removes a route and its path index entry; `NotFound` if absent.
    async fn delete_route(&self, org_id: &str, route_id: &str) -> StoreResult<()>;
    async fn get_idempotency(
        &self,
        org_id: &str,
        key: &str,
    ) -> StoreResult<Option<IdempotencyRecord>>;
    /// Records the answer of a request made under an `Idempotency-Key` that no route write
    /// carries (a channel refund), durably; `IdempotencyKeyUsed` with the stored record when
    /// the key was taken first.
    async fn put_idempotency(&self, rec: &IdempotencyRecord) -> StoreResult<()>;
    /// Removes idempotency records created before `before_unix`; returns how many.
    async fn purge_idempotency(&self, before_unix: i64) -> StoreResult<usize>;
}

/// Gateway payments and the nonce keys that guard them against replay.
#[async_trait]
pub trait PaymentStore: Send + Sync {
    /// Reserves the payment's nonce key and stores the payment, atomically and durably. If the
    /// nonce key was already reserved, stores nothing and returns the payment holding it.
    async fn reserve_payment(&self, payment: &GatewayPayment) -> StoreResult<PaymentReservation>;
    /// Replaces a stored payment (status, transaction, timings).
    async fn update_payment(&self, payment: &GatewayPayment) -> StoreResult<()>;
    /// Frees a payment's nonce key (nothing was broadcast, so the authorization is unused).
    async fn release_payment(&self, payment: &GatewayPayment) -> StoreResult<()>;
    async fn get_payment(&self, id: &str) -> StoreResult<Option<GatewayPayment>>;
    /// The payment holding `nonce_key` (see [`paygate_domain::model::nonce_key`]), if any.
    async fn payment_for_nonce(&self, nonce_key: &str) -> StoreResult<Option<GatewayPayment>>;
    /// Marks the payment `id` redeemed at `at` if it still is
    /// [`GatewayPayment::redeemable_by`] `retry`, atomically and durably: of concurrent
    /// retries exactly one gets the updated payment, the others `None`.
    async fn claim_redemption(
        &self,
        id: &str,
        retry: &GatewayPayment,
        at: &str,
    ) -> StoreResult<Option<GatewayPayment>>;
    /// Writes `payment` only if the stored one still meets `guard`, atomically and durably;
    /// `false` (nothing written) when another writer came first or there is none.
    async fn write_payment_if(
        &self,
        payment: &GatewayPayment,
        guard: PaymentGuard<'_>,
    ) -> StoreResult<bool>;
    /// Writes reconciliation's decision on a payment only if the stored payment is still open
    /// (`Reserved`/`Unknown`); `false` when another writer (the request that took it, on any
    /// node) recorded its outcome first, which is then kept.
    async fn decide_open_payment(&self, payment: &GatewayPayment) -> StoreResult<bool> {
        self.write_payment_if(payment, PaymentGuard::StillOpen)
            .await
    }
    /// Payments not yet `Settled` or `Failed`, for reconciliation.
    async fn unfinished_payments(&self) -> StoreResult<Vec<GatewayPayment>>;
    /// A page of `org_id`'s payments, newest (highest id) first, read through an index.
    async fn list_payments(
        &self,
        org_id: &str,
        q: &PaymentQuery,
    ) -> StoreResult<Vec<GatewayPayment>>;
    /// Claims the payment identifier `rec.key` of `rec.org_id` for `rec`, atomically and
    /// durably, when free or held by a record created before `stale_before_unix`: `None` when
    /// claimed, else the record holding it.
    async fn claim_payment_id(
        &self,
        rec: &PaymentIdRecord,
        stale_before_unix: i64,
    ) -> StoreResult<Option<PaymentIdRecord>>;
    /// Stores the answer of a claimed identifier (replacing the record of the same key).
    async fn put_payment_id(&self, rec: &PaymentIdRecord) -> StoreResult<()>;
    /// Deletes identifier records created before `before_unix`; how many.
    async fn purge_payment_ids(&self, before_unix: i64) -> StoreResult<usize>;
}

/// Counters with a limit: plan usage per month, MCP spending per day.
#[async_trait]
pub trait CounterStore: Send + Sync {
    /// Paid requests of `org_id` in `month` (`YYYY-MM`, UTC).
    async fn plan_usage(&self, org_id: &str, month: &str) -> StoreResult<u64>;
    /// Records the count, never lowering it (writes may arrive out of order).
    async fn put_plan_usage(&self, org_id: &str, month: &str, count: u64) -> StoreResult<()>;
    /// Takes one of the month's `limit` paid-request slots in the store itself (0 = unlimited),
    /// atomically for every process sharing the store; `false` when all are used. For a
    /// cluster: one node counts in memory instead ([`CounterStore::put_plan_usage`]).
    async fn take_plan_slot(&self, org_id: &str, month: &str, limit: u64) -> StoreResult<bool>;
    /// Gives back a slot taken by [`CounterStore::take_plan_slot`] whose request was not paid.
    async fn release_plan_slot(&self, org_id: &str, month: &str) -> StoreResult<()>;
    /// Adds `amount` to what `org_id`'s MCP tool calls spent on `day` (`YYYY-MM-DD`, UTC) if the
    /// total stays within `cap`. Returns the outcome with the day's total after the attempt.
    async fn reserve_mcp_spend(
        &self,
        org_id: &str,
        day: &str,
        amount: u64,
        cap: u64,
    ) -> StoreResult<SpendReservation>;
    /// Gives back `amount` reserved on `day` (the call was not charged).
    async fn release_mcp_spend(&self, org_id: &str, day: &str, amount: u64) -> StoreResult<()>;
    /// What `org_id`'s MCP tool calls spent (or hold reserved) on `day`, in base units.
    async fn mcp_spent(&self, org_id: &str, day: &str) -> StoreResult<u64>;
}

/// Per-org request counters in minute buckets.
#[async_trait]
pub trait MetricStore: Send + Sync {
    /// Adds the batch's minute buckets and roll-up rows to the stored ones, all or (an error)
    /// none, and at most once: a batch whose id was stored already (within
    /// [`paygate_domain::rollup::COUNT_BATCH_KEEP_MS`]) changes nothing.
    async fn merge_counts(&self, batch: &CountBatch) -> StoreResult<()>;
    /// Whether the batch `id` was stored.
    async fn count_batch_stored(&self, id: &str) -> StoreResult<bool>;
    /// The organisation's buckets from `from_minute` on, merged into one.
    async fn metrics_since(&self, org_id: &str, from_minute: u64) -> StoreResult<MetricBucket>;
    /// The organisation's `tier` rows from the period starting at `from_period` on, every
    /// route's and the total's (route `""`), in no particular order.
    async fn rollups(
        &self,
        org_id: &str,
        tier: Tier,
        from_period: u64,
    ) -> StoreResult<Vec<RollupRow>>;
}

/// What the processes sharing a store coordinate through: leases (a duty done by one process at
/// a time, such as reconciliation) and MCP Streamable HTTP sessions (so a session opened on one
/// node is served by every node).
#[async_trait]
pub trait ClusterStore: Send + Sync {
    /// Whether this process holds the lease `name` now: taken when free, kept while held, lost
    /// with this process (or its connection to the store). On a store only one process opens,
    /// every lease is this process's.
    async fn hold_lease(&self, name: &str) -> StoreResult<bool>;
    /// The leases this process held when last asked, by name.
    fn leases_held(&self) -> Vec<String>;
    /// Says this process is alive at `now_unix` and answers how many processes (this one
    /// included) said so within the last `stale_secs`: the nodes sharing the cluster-wide rate
    /// limits. A store only one process opens answers 1.
    async fn beat(&self, now_unix: i64, stale_secs: i64) -> StoreResult<usize>;
    /// Keeps an MCP session's state (JSON) under its id.
    async fn put_mcp_session(&self, id: &str, state: &str, created_unix: i64) -> StoreResult<()>;
    async fn get_mcp_session(&self, id: &str) -> StoreResult<Option<String>>;
    async fn delete_mcp_session(&self, id: &str) -> StoreResult<()>;
    /// Forgets sessions created before `before_unix`; returns how many.
    async fn purge_mcp_sessions(&self, before_unix: i64) -> StoreResult<usize>;
}

/// Payment channels (x402 `batch-settlement`): one record per channel, each write a
/// compare-and-set on the version read, so two nodes never both move a channel from the same
/// state.
#[async_trait]
pub trait ChannelStore: Send + Sync {
    async fn get_channel(&self, id: &str) -> StoreResult<Option<ChannelRecord>>;
    /// Stores `next` (whose `version` is `expected + 1`) if the stored channel is still at
    /// version `expected` (`0`: no channel stored yet), durably; `false` (nothing written) when
    /// another writer moved it first.
    async fn put_channel_if(&self, expected: u64, next: &ChannelRecord) -> StoreResult<bool>;
    /// [`Self::put_channel_if`] for a write that moves only what a served request moves
    /// ([`paygate_domain::channel::ChannelCharges`]) of the record read at `expected`: a backend
    /// may write that part alone (the write committing each voucher), and may return once the
    /// write is safe from the process's death, on disk within a bounded interval (sled's voucher
    /// journal, `storage.voucher_sync_ms`; PostgreSQL commits it).
    async fn put_channel_charges_if(
        &self,
        expected: u64,
        next: &ChannelRecord,
    ) -> StoreResult<bool> {
        self.put_channel_if(expected, next).await
    }
    /// The organisation's channels, in no particular order.
    async fn list_channels(&self, org_id: &str) -> StoreResult<Vec<ChannelRecord>>;
    /// Every channel with a charge not yet claimed on chain (what the claimer reads).
    async fn unclaimed_channels(&self) -> StoreResult<Vec<ChannelRecord>>;
}

/// Access windows (route `accessWindowSeconds`): one per (organisation, route, payer), and the
/// nonces of the sign-ins served through them. A sign-in is decided in one step with its nonce
/// (a transaction), so a nonce is spent once across every node and a window never serves more
/// calls than it allows.
#[async_trait]
pub trait WindowStore: Send + Sync {
    /// Opens `w` in place of the payer's window for the route. The same payment again (a
    /// retried request) leaves the stored window as it is, its calls counted.
    async fn open_window(&self, w: &AccessWindow) -> StoreResult<()>;
    /// Serves one call through the payer's window at `now` if it still serves and `nonce` was
    /// never spent; spends the nonce (kept until `nonce_until`, unix seconds) and counts the call
    /// only then.
    async fn use_window(
        &self,
        org_id: &str,
        route_id: &str,
        payer: &str,
        nonce: &str,
        nonce_until: u64,
        now: u64,
    ) -> StoreResult<WindowUse>;
    /// Gives back one call of the payer's window opened by `payment_id` (a call the origin did
    /// not serve); `false` when that window is gone, replaced, or has no call counted.
    async fn return_window_call(
        &self,
        org_id: &str,
        route_id: &str,
        payer: &str,
        payment_id: &str,
    ) -> StoreResult<bool>;
    /// The organisation's windows that still serve at `now` (of `payer` alone when given,
    /// lower-case hex), soonest to end first.
    async fn active_windows(
        &self,
        org_id: &str,
        payer: Option<&str>,
        now: u64,
    ) -> StoreResult<Vec<AccessWindow>>;
    /// Forgets spent nonces kept until before `now` (their sign-ins are refused as too old
    /// anyway) and windows that ended before `now`; returns how many records went.
    async fn prune_windows(&self, now: u64) -> StoreResult<usize>;
}

/// The audit log: entries appended, listed per organisation newest first.
#[async_trait]
pub trait AuditStore: Send + Sync {
    /// Appends `e` durably.
    async fn append_audit(&self, e: &AuditEntry) -> StoreResult<()>;
    /// `org_id`'s entries with ids below `before_id` (all when `None`), newest first, at most
    /// `limit`.
    async fn list_audit(
        &self,
        org_id: &str,
        before_id: Option<&str>,
        limit: usize,
    ) -> StoreResult<Vec<AuditEntry>>;
}

/// Seller webhooks: endpoints, and the durable queue of their deliveries.
#[async_trait]
pub trait WebhookStore: Send + Sync {
    /// Creates or replaces an endpoint.
    async fn put_webhook_endpoint(&self, e: &WebhookEndpoint) -> StoreResult<()>;
    /// `org_id`'s endpoints, oldest first.
    async fn webhook_endpoints(&self, org_id: &str) -> StoreResult<Vec<WebhookEndpoint>>;
    /// `org_id`'s endpoint `id`.
    async fn webhook_endpoint(
        &self,
        org_id: &str,
        id: &str,
    ) -> StoreResult<Option<WebhookEndpoint>>;
    /// Deletes `org_id`'s endpoint `id` (its deliveries stay, for the log); whether it existed.
    async fn delete_webhook_endpoint(&self, org_id: &str, id: &str) -> StoreResult<bool>;
    /// Adds deliveries to the queue, durably.
    async fn enqueue_deliveries(&self, d: &[WebhookDelivery]) -> StoreResult<()>;
    /// At most `limit` deliveries due at `now_ms`, in queue order: pending, their next attempt
    /// come, not leased beyond now, and each the oldest pending one of its endpoint and object
    /// (so one object's events reach an endpoint in order).
    async fn due_deliveries(&self, now_ms: i64, limit: usize) -> StoreResult<Vec<WebhookDelivery>>;
    /// Leases delivery `id` until `until_ms` if its lease is still `seen_ms` (no other node took
    /// it meanwhile): whether this caller holds it now.
    async fn lease_delivery(&self, id: &str, seen_ms: i64, until_ms: i64) -> StoreResult<bool>;
    /// Records a delivery's new state (after an attempt).
    async fn update_delivery(&self, d: &WebhookDelivery) -> StoreResult<()>;
    /// `endpoint_id`'s deliveries, newest first, at most `limit`.
    async fn webhook_deliveries(
        &self,
        endpoint_id: &str,
        limit: usize,
    ) -> StoreResult<Vec<WebhookDelivery>>;
    async fn webhook_delivery(&self, id: &str) -> StoreResult<Option<WebhookDelivery>>;
}

/// Every durable record, by aggregate. A backend implements each part; callers hold an
/// `Arc<dyn Store>` (the parts' methods are callable on it without importing them).
#[async_trait]
pub trait Store:
    OrgStore
    + KeyStore
    + RouteStore
    + PaymentStore
    + CounterStore
    + MetricStore
    + PayoutStore
    + ClusterStore
    + ChannelStore
    + WindowStore
    + AuditStore
    + WebhookStore
    + Send
    + Sync
    + 'static
{
    /// Makes every acknowledged write durable (called on shutdown).
    async fn flush(&self) -> StoreResult<()>;
}
