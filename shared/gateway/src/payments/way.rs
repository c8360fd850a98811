//! The one door between a caller (the proxy) and the ways of paying. The caller hands over the
//! request's facts ([`PaidRequest`]) and answers its own checks through a [`Gate`]; it gets back
//! an [`Admission`] (forward the request) or an [`Unadmitted`] (answer it here), and tells the
//! admitted payment what the origin answered ([`Answered`]). Behind the door each way of paying
//! is one module implementing [`Way`], its admitted payment one type implementing [`Held`]; the
//! registry (`registry.rs`) lists them. Nothing here names a scheme.

use super::for_servers::ForServer;
use super::{PaymentService, Refusal};
use crate::balancer::Picked;
use crate::route_entry::RouteEntry;
use alloy_primitives::Address;
use http::HeaderValue;
use paygate_domain::model::{GatewayPayment, Route, Scheme};
use paygate_x402::facilitator::wire::{SettleResponse, SupportedKindWire as Kind, VerifyResponse};
use paygate_x402::payment::ProtocolVersion;
use paygate_x402::{Challenge, Extensions, Offered, PaymentRequirements};
use std::net::SocketAddr;
use std::sync::Arc;

/// The response header (or, on a streamed answer, trailer) in which an origin states what a
/// call cost (`pricing: "usage"`), in decimal USD (`0.00025`). The caller removes it before the
/// answer reaches the payer, whatever the route's pricing.
pub const CHARGE_HEADER: &str = "x-paygate-charge";

/// One request to a paid route, as the caller hands it over: the route (found, its
/// organisation active) and the request's headers (a payer pays or signs in with them; each
/// way reads its own).
pub struct PaidRequest<'a> {
    pub org_id: &'a Arc<str>,
    pub entry: &'a Arc<RouteEntry>,
    /// The organisation's monthly paid-request limit (0: none).
    pub plan_limit: u64,
    pub headers: &'a http::HeaderMap,
}

impl PaidRequest<'_> {
    /// The payment header, if any: `PAYMENT-SIGNATURE` (v2) wins over `X-PAYMENT` (v1).
    pub fn payment(&self) -> Option<(ProtocolVersion, &[u8])> {
        if let Some(v) = self.headers.get("payment-signature") {
            return Some((ProtocolVersion::V2, v.as_bytes()));
        }
        self.headers
            .get("x-payment")
            .map(|v| (ProtocolVersion::V1, v.as_bytes()))
    }
}

/// Where a request goes: an address checked against the SSRF policy, and the target picked
/// among the route's several.
pub type Upstream = (SocketAddr, Option<Picked>);

/// What only the caller can check, asked by a way of paying where its rules put it.
#[async_trait::async_trait]
pub trait Gate: Send + Sync {
    /// The request carries a payment or a sign-in: the caller's checks of a paying request
    /// (its route's rate limit, the body's size), before the payment is read.
    fn paying(&self) -> Result<(), Refusal>;
    /// Whether `payer` may send a request now (after its payment was verified, so a forged
    /// payment costs the payer named in it nothing).
    fn payer(&self, payer: &Address) -> Result<(), Refusal>;
    /// The upstream the request will go to; with `connect`, also connected to once (a payment
    /// taken before forwarding is never taken for an origin that refuses connections).
    async fn upstream(&self, connect: bool) -> Result<Upstream, Refusal>;
}

/// A request admitted: where it goes, its payment, and the receipt when it is known already.
pub struct Admission {
    pub upstream: Upstream,
    pub payment: Admitted,
    /// Known at admission (a settled `exact` payment, a window's call); else at the answer.
    pub receipt: Option<Receipt>,
}

/// The receipt an answer carries, and what was charged for the request.
#[derive(Debug, Clone)]
pub struct Receipt {
    /// `PAYMENT-RESPONSE` (v2) or `X-PAYMENT-RESPONSE` (v1).
    pub header: &'static str,
    /// Base64 JSON, the x402 settle response.
    pub value: String,
    /// USDC base units charged for this request.
    pub charged: u64,
}

impl Receipt {
    /// The receipt of `paid`: its settle response, for what its record says was charged.
    pub(crate) fn of(paid: &crate::payments::Paid) -> Self {
        Self {
            header: paid.receipt_header,
            value: paid.receipt.clone(),
            charged: paid.record.amount.0,
        }
    }
}

/// Why a request was not admitted, and what it is answered instead. Nothing was charged, except
/// where a [`Refusal`] says the outcome is not known.
pub enum Unadmitted {
    /// No payment came: the route's challenge (fresh where a way declares per request).
    Challenge(Challenge),
    /// The payment (or sign-in) was refused.
    Refused(Box<Refused>),
    /// Answered here, nothing forwarded: the sandbox's answer, a channel's refund, an answer
    /// kept under a payment identifier.
    Served(Box<Served>),
}

impl From<Refused> for Unadmitted {
    fn from(r: Refused) -> Self {
        Self::Refused(Box::new(r))
    }
}

/// A refusal and what it is rendered against: the challenge to offer again (when the refusal
/// is answered with one), in the x402 version the caller spoke.
pub struct Refused {
    pub refusal: Refusal,
    pub challenge: Option<Challenge>,
    pub version: ProtocolVersion,
    /// The protocol the refused payment came in (an MPP credential is told in problem
    /// details).
    pub protocol: paygate_domain::model::PaymentProtocol,
}

/// An answer given without forwarding.
pub struct Served {
    /// The outcome's name in the access log.
    pub outcome: &'static str,
    pub status: u16,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
    /// The receipt header's name and value.
    pub receipt: (String, String),
    /// A marker header saying what answered (`X-Paygate-Sandbox`, `X-Paygate-Replayed`).
    pub mark: Option<(&'static str, &'static str)>,
}

/// The payment of an admitted request, until [`PaymentService::finish`] is done with it: the
/// way's own type behind [`Held`].
pub struct Admitted(pub(crate) Box<dyn Held>);

impl Admitted {
    /// The outcome's name in the access log.
    pub fn label(&self) -> &'static str {
        self.0.label()
    }

    /// Whether the request counts as paid in the metrics (a window's call was paid for by the
    /// payment that opened the window).
    pub fn counts_as_paid(&self) -> bool {
        self.0.counts_as_paid()
    }

    /// The payment's id, sent to the origin for deduplication.
    pub fn payment_id(&self) -> Option<&str> {
        self.0.payment_id()
    }

    /// The settlement's duration in milliseconds (verification included), for the metrics.
    pub fn settle_ms(&self) -> Option<u64> {
        self.0.settle_ms()
    }

    /// The protocol the payment came in, for the metrics.
    pub fn protocol(&self) -> paygate_domain::model::PaymentProtocol {
        self.0.protocol()
    }

    /// Whether the answer is kept under the payment's identifier (the caller collects its
    /// body, up to its own limit, and hands it over at the end).
    pub fn keeps_answer(&self) -> bool {
        self.0.keeps_answer()
    }
}

/// What the caller knows of the answer when it calls [`PaymentService::finish`].
pub enum Answered<'a> {
    /// The origin's answer head: its status and the charge it stated in a header (taken off).
    Head {
        status: u16,
        stated: Option<&'a HeaderValue>,
    },
    /// The answer is over (or never came).
    End(Ended),
}

/// The end of an answer.
pub struct Ended {
    /// The answer passed whole to the caller.
    pub completed: bool,
    pub upstream_status: Option<u16>,
    /// The whole body, when the caller kept it ([`Admitted::keeps_answer`]).
    pub body: Option<Vec<u8>>,
    pub content_type: Option<String>,
    /// The charge the origin stated in a trailer.
    pub stated: Option<HeaderValue>,
}

/// What this deployment can offer beside `exact`: the terms routes' requirements carry, as
/// each way derived its own from the configuration at start ([`Way::terms`], gathered by
/// `registry::terms`; a way without
/// terms here is not offered). Nothing here names a way.
#[derive(Debug, Clone, Default)]
pub struct Terms(pub paygate_x402::Offer);

/// The deployment's on-chain identity for the ways a relayer settles (`upto`'s facilitator,
/// `auth-capture`'s operator): its operator contract (`[facilitator] operator`, a cluster) or
/// the node's relayer, where this deployment relays (the embedded facilitator, its own
/// `[facilitator]` or a network listing `"embedded"`, with its key in the environment).
pub(crate) fn deployment_operator(cfg: &paygate_config::Config) -> Option<Address> {
    let embedded = cfg.facilitator.kind == paygate_config::FacilitatorKind::Embedded
        || cfg
            .networks
            .values()
            .any(|n| n.facilitators.iter().any(|f| f.url.trim() == "embedded"));
    let key = std::env::var(&cfg.facilitator.relayer_key_env).ok()?;
    let relayer = embedded
        .then(|| paygate_domain::secrets::address_of_key(&key))
        .flatten()?;
    Some(cfg.facilitator.operator.unwrap_or(relayer))
}

/// How a way claims a request before any payment is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claim {
    /// Admitted without a payment (a sign-in), whatever the network's facilitator is doing.
    Unpaid,
    /// All of the route's payments, whatever the network's facilitator is doing (the sandbox).
    Route,
    /// The request pays in this way's own header (another protocol's credential), read by
    /// the way itself.
    Pays,
}

/// A paying request as a way reads it: the payment header decoded once, and the route's
/// requirements.
pub(crate) struct Paying<'a> {
    pub req: &'a PaidRequest<'a>,
    pub requirements: &'a PaymentRequirements,
    pub challenge: &'a Challenge,
    /// The payment's version and its JSON (empty for a way admitted without a payment).
    pub version: ProtocolVersion,
    pub json: &'a [u8],
}

/// The payment service with its ways of paying built in front of it: what callers hold (the
/// proxy, the MCP tools, the facilitator API). Its door is the registry's (`admit`, `finish`,
/// the facilitator calls, refunds); everything every way uses is the service's, reached
/// through it.
pub struct Payments {
    service: PaymentService,
    /// Every registered way as built (`None`: a way whose parts this deployment lacks), in
    /// the registry's order.
    ways: Vec<Option<Box<dyn Serving>>>,
}

impl Payments {
    pub(crate) fn new(service: PaymentService, ways: Vec<Option<Box<dyn Serving>>>) -> Self {
        Self { service, ways }
    }

    pub(crate) fn built(&self) -> &[Option<Box<dyn Serving>>] {
        &self.ways
    }
}

impl std::ops::Deref for Payments {
    type Target = PaymentService;

    fn deref(&self) -> &PaymentService {
        &self.service
    }
}

/// The parts of a deployment the ways of paying are built of at start ([`Way::build`]): each
/// way takes the ones it needs and keeps them; a way whose part this deployment lacks is not
/// served (its scheme is neither offered nor taken).
#[derive(Clone)]
pub struct Parts {
    /// The relayer's contract calls (the escrow's operator calls, the access windows' checks).
    pub chain: Option<Arc<dyn paygate_x402::facilitator::ChainCalls>>,
    /// Payment channels (`batch-settlement`), where this deployment has a receiver authorizer.
    pub channels: Option<Arc<crate::channels::Channels>>,
    /// Access windows, where this deployment serves them (the proxy's service does).
    pub windows: Option<Arc<crate::windows::Windows>>,
    /// Where refunds are counted against revenue.
    pub metrics: Option<Arc<crate::metrics::Metrics>>,
    /// How long a refund's request may still be sending it (its longest wait for a receipt).
    pub refund_lease: std::time::Duration,
    /// The receiver refund collector sellers approve to fund their refunds.
    pub refund_collector: Address,
    /// The deployment's terms, as the ways derived them from the configuration.
    pub terms: Terms,
    /// The secret MPP challenges are bound with (the same on every node of a deployment).
    pub mpp_secret: Option<Arc<[u8]>>,
    /// The realm MPP challenges name: the public host.
    pub realm: Arc<str>,
    /// How long an MPP challenge may be paid after its `402`.
    pub mpp_challenge_secs: u64,
}

impl Default for Parts {
    fn default() -> Self {
        Self {
            chain: None,
            channels: None,
            windows: None,
            metrics: None,
            refund_lease: std::time::Duration::from_secs(60),
            refund_collector: paygate_x402::auth_capture::RECEIVER_REFUND_COLLECTOR_ADDRESS,
            terms: Terms::default(),
            mpp_secret: None,
            realm: Arc::from(""),
            mpp_challenge_secs: 300,
        }
    }
}

/// One way of paying as registered (one line in `registry.rs`): what it offers under a
/// configuration, how its records are reconciled and audited against the chain, and the
/// serving part it is built into at start with its own parts ([`Serving`]).
#[async_trait::async_trait]
pub(crate) trait Way: Sync {
    /// Whether it takes a payment naming `scheme` (`accepted.scheme`) in `version`.
    fn takes(&self, _scheme: &str, _version: ProtocolVersion) -> bool {
        false
    }

    /// Its deployment-wide terms under `cfg` (its [`Offered`] form, its route-specific parts
    /// left at their defaults), where this deployment can offer it at all.
    fn terms(&self, _cfg: &paygate_config::Config) -> Option<Offered> {
        None
    }

    /// What a route that lists `scheme` offers in its challenge, when this way takes it.
    fn offered(&self, _route: &Route, _scheme: Scheme, _terms: &Terms) -> Option<Offered> {
        None
    }

    /// What it declares in a route's challenge, rendered once per route change.
    fn declare(&self, _route: &Route, _ext: &mut Extensions) {}

    /// Itself built with the `parts` it needs, or `None` where this deployment lacks them.
    fn build(&self, parts: &Parts) -> Option<Box<dyn Serving>>;

    /// Whether `p` is one of the payment records this way leaves to reconciliation.
    fn reconciles(&self, _p: &GatewayPayment) -> bool {
        false
    }

    /// Whether a live request of this way keeps its payment open while the origin answers
    /// (however long that takes, up to the deployment's live-hold limit, beyond which
    /// reconciliation takes it as left behind): an escrow's hold before its capture.
    fn holds_while_answered(&self) -> bool {
        false
    }

    /// Compares `p`, one of its decided records, with the chain (the ledger audit): `None` when
    /// they agree, `Err` when the chain could not be read for it.
    async fn audit(
        &self,
        _p: &GatewayPayment,
        _at: &OnChain<'_>,
    ) -> Result<Option<Difference>, String> {
        Err("no way of paying audits this record".into())
    }

    /// Decides `p`, one of its records left open, from the chain: the record as decided, or
    /// `None` while its outcome may still change.
    async fn reconcile(
        &self,
        _p: &GatewayPayment,
        _at: &OnChain<'_>,
    ) -> Result<Option<GatewayPayment>, String> {
        Ok(None)
    }
}

/// A way of paying as built at start ([`Way::build`]), holding its own parts: its claims on a
/// request, its fresh declarations, its admission, what it does when another way's payment
/// settles, and its operations after the request (a refund) and for other servers (the
/// facilitator API).
#[async_trait::async_trait]
pub(crate) trait Serving: Send + Sync {
    /// Its claim on `req` before any payment is read.
    fn claims(&self, _req: &PaidRequest<'_>) -> Option<Claim> {
        None
    }

    /// Whether it declares afresh in every `402` of `entry` (a sign-in's nonce and time).
    fn declares_fresh(&self, _entry: &RouteEntry) -> bool {
        false
    }

    /// Its fresh declaration, where [`Self::declares_fresh`].
    fn declare_fresh(&self, _entry: &RouteEntry, _ext: &mut Extensions) {}

    /// Another protocol's challenge for a `402` of `entry`, beside x402's (`WWW-Authenticate`),
    /// rendered for each `402`.
    fn challenge_header(&self, _entry: &RouteEntry) -> Option<HeaderValue> {
        None
    }

    /// Checks and takes (or holds) the payment before the request is forwarded.
    async fn admit(
        &self,
        svc: &Payments,
        p: &Paying<'_>,
        gate: &dyn Gate,
    ) -> Result<Admission, Unadmitted>;

    /// A payment `record` was settled for a request to `entry` (before it is forwarded): what
    /// this way keeps of it (an access window opened by the payment).
    async fn paid_for(&self, _entry: &RouteEntry, _record: &GatewayPayment) {}

    /// Refunds `amount` (all that is refundable when `None`) of `p`, one of its payments, once
    /// per `key`.
    async fn refund(
        &self,
        _svc: &Payments,
        _p: &GatewayPayment,
        _amount: Option<paygate_x402::money::UsdcAmount>,
        _key: Option<&str>,
    ) -> Result<super::Refunded, super::RefundError> {
        Err(super::RefundError::NotRefundable(
            super::refund::ONLY_ESCROW_REFUNDS,
        ))
    }

    /// The kinds it verifies and settles for other x402 servers (the facilitator API's
    /// `/supported`), on `networks` (those that settle now).
    fn facilitator_kinds(&self, _networks: &[&paygate_x402::network::Network]) -> Vec<Kind> {
        Vec::new()
    }

    /// Verifies another server's payment for this way's scheme (the facilitator API).
    async fn verify_for(
        &self,
        _svc: &Payments,
        _call: &ForServer<'_>,
    ) -> Result<VerifyResponse, Refusal> {
        Err(Refusal::Rejected(
            paygate_x402::verify::Rejection::UnsupportedScheme,
        ))
    }

    /// Settles another server's payment for this way's scheme (the facilitator API).
    async fn settle_for(
        &self,
        _svc: &Payments,
        _call: &ForServer<'_>,
    ) -> Result<SettleResponse, Refusal> {
        Err(Refusal::Rejected(
            paygate_x402::verify::Rejection::UnsupportedScheme,
        ))
    }
}

/// One payment whose ledger record and chain disagree (what the ledger audit lists).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Difference {
    pub payment_id: String,
    /// How it moved: `eip3009`, `permit2`, `upto` or `auth-capture`.
    pub transfer: &'static str,
    /// What the ledger says.
    pub ledger: String,
    /// What the chain says.
    pub chain: String,
}

impl Difference {
    /// `p`'s authorization found `spent` on chain (or not) where the ledger `expected` it: the
    /// difference, or `None` when they agree.
    pub(crate) fn spent(
        p: &GatewayPayment,
        transfer: &'static str,
        spent: bool,
        expected: bool,
    ) -> Option<Self> {
        (spent != expected).then(|| Self {
            payment_id: p.id.clone(),
            transfer,
            ledger: format!("{} {} USDC", p.status.as_str(), p.amount.to_decimal()),
            chain: if spent {
                "the authorization was spent".into()
            } else {
                "the authorization is unspent".into()
            },
        })
    }

    /// What the ledger expects of `p`'s authorization: spent exactly when it settled a charge
    /// above zero (an `upto` charge of zero sends nothing).
    pub(crate) fn expected_spent(p: &GatewayPayment) -> bool {
        p.status == paygate_domain::model::PaymentStatus::Settled && p.amount.0 > 0
    }
}

/// What reconciliation hands a way deciding one of its open records: the record's network (its
/// RPC set), the relayer's contract calls where this deployment has them, and the time.
pub(crate) struct OnChain<'a> {
    pub network: &'a paygate_x402::network::Network,
    pub calls: Option<&'a dyn paygate_x402::facilitator::ChainCalls>,
    /// Unix seconds.
    pub now: u64,
}

impl OnChain<'_> {
    /// The network's JSON-RPC URL.
    pub fn rpc_url(&self) -> &str {
        &self.network.config.rpc_url
    }

    /// The network's JSON-RPC URL, where one is configured.
    pub fn rpc(&self) -> Result<&str, String> {
        Some(self.rpc_url())
            .filter(|u| !u.is_empty())
            .ok_or_else(|| "no RPC URL for its network".to_string())
    }

    /// The payer and the authorization's nonce of `p`, for a way that asks the chain whether
    /// that authorization was used.
    pub fn authorization_of(
        p: &GatewayPayment,
    ) -> Result<(Address, alloy_primitives::B256), String> {
        match (
            paygate_x402::address::parse_address(&p.payer),
            p.authorization_nonce(),
        ) {
            (Some(from), Some(nonce)) => Ok((from, nonce)),
            _ => Err("malformed record: payer or nonce".into()),
        }
    }

    /// `p` decided by whether its authorization was `used` on chain: the money moved
    /// (`Settled`); it never can once the authorization expired (`Failed`, the nonce stays
    /// reserved); else `None`, a transaction may still land.
    pub fn by_authorization(&self, p: &GatewayPayment, used: bool) -> Option<GatewayPayment> {
        let mut p = p.clone();
        if used {
            p.status = paygate_domain::model::PaymentStatus::Settled;
            p.settled_by_reconciliation = true;
            p.failure = None;
        } else if self.now > p.valid_before {
            p.status = paygate_domain::model::PaymentStatus::Failed;
            p.failure = Some("authorization expired without settling".into());
        } else {
            return None;
        }
        p.updated_at = paygate_domain::now_rfc3339();
        Some(p)
    }
}

/// What an admitted payment does at the answer's head.
pub(crate) enum Step {
    /// Keep the payment for the answer's end (with the receipt, when known now).
    Wait(Option<Receipt>),
    /// Done with it (with the receipt, when there is one).
    Done(Option<Receipt>),
    /// Its charge was refused: the origin's answer is replaced by this refusal.
    Refused(Box<Refused>),
}

/// An admitted payment: a way's own type.
#[async_trait::async_trait]
pub(crate) trait Held: Send + Sync {
    fn label(&self) -> &'static str;
    fn counts_as_paid(&self) -> bool {
        true
    }
    fn payment_id(&self) -> Option<&str> {
        None
    }
    fn settle_ms(&self) -> Option<u64> {
        None
    }
    fn protocol(&self) -> paygate_domain::model::PaymentProtocol {
        paygate_domain::model::PaymentProtocol::X402
    }
    fn keeps_answer(&self) -> bool {
        false
    }
    /// The origin's answer head.
    async fn head(&mut self, svc: &Payments, status: u16, stated: Option<&HeaderValue>) -> Step;
    /// The answer is over (or never came).
    async fn end(self: Box<Self>, svc: &Arc<Payments>, end: Ended) -> Option<Receipt>;
}
