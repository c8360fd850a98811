//! The route bodies: one shape (`route_body!`: the fields both share written once) in two
//! modes, `RouteCreate` (`POST /api/routes`: path, price and network required) and
//! `RouteUpdate` (`PATCH`: any subset, `null` resets), and `RouteInput`, the fields either
//! sets, applied to a stored route.

use super::targets::{self, BalancingSpec, HealthCheckSpec, TargetSpec};
use crate::body::fields::{
    nullable, present, JsonSchemaDoc, MimeType, Nullable, PriceUsd, RoutePath, TargetUrl, Text,
    Word,
};
use crate::body::RequestBody;
use paygate_domain::model::{
    Balancing, HealthCheck, PaymentProtocol, Pricing, Route, RouteTarget, Scheme,
};
use paygate_domain::FieldProblem;
use paygate_x402::money::UsdcAmount;
use serde::Deserialize;
use utoipa::ToSchema;

/// Route fields the server assigns.
const READ_ONLY: &[&str] = &["id", "orgId", "createdAt", "updatedAt"];

/// Declares a route body: the fields that differ between creating and updating (what create
/// requires, what update's `null` resets) given per shape, then the fields both shapes share,
/// written once here (absent: the default on create, unchanged on update).
macro_rules! route_body {
    ($(#[$meta:meta])* $name:ident { $($own:tt)* }) => {
        $(#[$meta])*
        pub struct $name {
            $($own)*
            #[serde(default, deserialize_with = "present")]
            #[schema(nullable = false)]
            active: Option<bool>,
            #[serde(default, deserialize_with = "present")]
            #[schema(nullable = false)]
            streaming: Option<bool>,
            /// Listed by `/discovery/resources` (default false).
            #[serde(default, deserialize_with = "present")]
            #[schema(nullable = false)]
            discoverable: Option<bool>,
            /// The origin deduplicates requests by `X-Paygate-Payment-Id` (default false): a retry of
            /// a settled payment the origin never answered (a crash or an upstream failure between
            /// settlement and the origin's answer) is forwarded again instead of refused as a replay.
            #[serde(default, deserialize_with = "present")]
            #[schema(nullable = false)]
            origin_deduplicates: Option<bool>,
            #[serde(default)]
            #[schema(schema_with = nullable::<Text<2000>>)]
            description: Nullable<Text<2000>>,
            #[serde(default)]
            #[schema(schema_with = nullable::<Word<64>>)]
            bazaar_category: Nullable<Word<64>>,
            /// What the route answers (`application/json`), in its 402 challenge and discovery.
            #[serde(default)]
            #[schema(schema_with = nullable::<MimeType>)]
            mime_type: Nullable<MimeType>,
            /// JSON Schema of what the route takes (its JSON body; for GET, its query parameters):
            /// in discovery, the challenge's bazaar extension and MCP tool lists. `null` clears.
            #[serde(default)]
            #[schema(schema_with = nullable::<JsonSchemaDoc>)]
            input_schema: Nullable<JsonSchemaDoc>,
            /// JSON Schema of what the route answers. `null` clears.
            #[serde(default)]
            #[schema(schema_with = nullable::<JsonSchemaDoc>)]
            output_schema: Nullable<JsonSchemaDoc>,
            /// Offered as a tool at the public MCP endpoint `/mcp/x402/{orgSlug}`, paid by the calling
            /// agent's own wallet (default false).
            #[serde(default, deserialize_with = "present")]
            #[schema(nullable = false)]
            public_tool: Option<bool>,
            /// The x402 schemes the route accepts, in the order its challenge lists them (default
            /// `["exact"]`): `exact` (one on-chain settlement per request) and `batch-settlement`
            /// (payment channels: a deposit, then a signed voucher per request), `upto` (usage
            /// pricing: a ceiling authorized, the charge settled) and `auth-capture` (held in escrow,
            /// captured for what was served, voided when the origin failed, refundable).
            #[serde(default, deserialize_with = "present")]
            #[schema(nullable = false)]
            schemes: Option<Vec<Scheme>>,
            /// The agent payment protocols the route's `402` offers (default both): `x402` and
            /// `mpp` (the Machine Payments Protocol's `charge`, paid as `exact` is, on a route
            /// listing `exact` in a token with EIP-3009). `["mpp"]` answers MPP alone (schemes
            /// `["exact"]`, fixed pricing).
            #[serde(default, deserialize_with = "present")]
            #[schema(nullable = false, value_type = Option<Vec<String>>)]
            protocols: Option<Vec<PaymentProtocol>>,
            /// How a request is charged (default `fixed`): `fixed`, the price; `usage`, what the origin
            /// states in its `X-Paygate-Charge` response header (or trailer, when streamed) in decimal
            /// USD, at most the price, the price when it says nothing.
            #[serde(default, deserialize_with = "present")]
            #[schema(nullable = false)]
            pricing: Option<Pricing>,
            /// The token the route is paid in (default `USDC`): `USDC` or a token the route's network
            /// lists (`[networks.<name>.tokens.<SYMBOL>]`; one without EIP-3009 is paid through
            /// Permit2). The price stays in USD, one token to the dollar.
            #[serde(default, deserialize_with = "present")]
            #[schema(inline, nullable = false)]
            token: Option<Text<16>>,
            /// An access window: a payment grants its payer this route for this many seconds (1 to
            /// 31536000), within which the payer signs in (`SIGN-IN-WITH-X`, x402's sign-in-with-x)
            /// instead of paying again. Needs `exact` among `schemes` and `fixed` pricing. `null`
            /// clears it (every call paid).
            #[serde(default)]
            #[schema(schema_with = nullable::<u64>)]
            access_window_seconds: Nullable<u64>,
            /// With an access window: how many calls it serves beyond the paid one (1 to 1000000;
            /// default or `null`: any number within its period).
            #[serde(default)]
            #[schema(schema_with = nullable::<u32>)]
            access_window_calls: Nullable<u32>,
            /// `auth-capture`: seconds after a payment's capture deadline within which the seller
            /// may refund it (`POST /api/payments/{id}/refund`; 1 to 31536000). Needs
            /// `auth-capture` among `schemes`. `null` or absent: refunds off.
            #[serde(default)]
            #[schema(schema_with = nullable::<u64>)]
            refund_window_seconds: Nullable<u64>,
        }
    };
}

/// The route fields both bodies share, as a request sets them.
macro_rules! shared_input {
    ($b:ident) => {
        RouteInput {
            active: $b.active,
            streaming: $b.streaming,
            discoverable: $b.discoverable,
            origin_deduplicates: $b.origin_deduplicates,
            description: $b.description.patch().map(|d| d.map(|t| t.0)),
            bazaar_category: $b.bazaar_category.patch().map(|c| c.map(|w| w.0)),
            mime_type: $b.mime_type.patch().map(|m| m.map(|t| t.0)),
            input_schema: $b.input_schema.patch().map(|m| m.map(|t| t.0)),
            output_schema: $b.output_schema.patch().map(|m| m.map(|t| t.0)),
            public_tool: $b.public_tool,
            protocols: None,
            pricing: $b.pricing,
            access_window_seconds: $b.access_window_seconds.patch(),
            access_window_calls: $b.access_window_calls.patch(),
            refund_window_seconds: $b.refund_window_seconds.patch(),
            token: $b.token.map(|t| t.0.to_ascii_uppercase()),
            ..RouteInput::default()
        }
    };
}

route_body! {
    /// `POST /api/routes`. Unknown and server-assigned fields are refused.
    #[derive(Debug, Deserialize, ToSchema)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    #[schema(example = json!({"path": "/weather", "priceUSD": "0.02",
        "targetUrl": "https://api.example.com/weather", "network": "base-sepolia",
        "description": "Current weather for a city", "discoverable": true}))]
    RouteCreate {
        #[schema(inline)]
        path: RoutePath,
        #[serde(rename = "priceUSD")]
        #[schema(inline)]
        price_usd: PriceUsd,
        /// The one upstream; or give `targets` (exactly one of the two).
        #[serde(default, deserialize_with = "present")]
        #[schema(inline, nullable = false)]
        target_url: Option<TargetUrl>,
        /// Several upstreams (1 to 16, distinct host and port); or give `targetUrl`.
        #[serde(default, deserialize_with = "present")]
        #[schema(nullable = false)]
        targets: Option<Vec<TargetSpec>>,
        /// How requests are spread over `targets` (default weighted round robin).
        #[serde(default, deserialize_with = "present")]
        #[schema(nullable = false)]
        load_balancing: Option<BalancingSpec>,
        /// Active health checks of the targets (default none: passive ejection only).
        #[serde(default, deserialize_with = "present")]
        #[schema(nullable = false)]
        health_check: Option<HealthCheckSpec>,
        /// A network this deployment settles (as `GET /facilitator/supported` lists), by its v1
        /// name or CAIP-2 id: `base-sepolia` or `eip155:84532`.
        #[schema(inline)]
        network: Text<64>,
}
}

impl RequestBody for RouteCreate {
    const READ_ONLY: &'static [&'static str] = READ_ONLY;
}

route_body! {
    /// `PATCH /api/routes/{id}`: any subset of the create fields.
    #[derive(Debug, Deserialize, ToSchema)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    #[schema(example = json!({"priceUSD": "0.05", "active": true}))]
    RouteUpdate {
        #[serde(default, deserialize_with = "present")]
        #[schema(inline, nullable = false)]
        path: Option<RoutePath>,
        #[serde(rename = "priceUSD", default, deserialize_with = "present")]
        #[schema(inline, nullable = false)]
        price_usd: Option<PriceUsd>,
        #[serde(default, deserialize_with = "present")]
        #[schema(inline, nullable = false)]
        target_url: Option<TargetUrl>,
        #[serde(default, deserialize_with = "present")]
        #[schema(nullable = false)]
        targets: Option<Vec<TargetSpec>>,
        /// `null`: back to weighted round robin.
        #[serde(default)]
        #[schema(schema_with = nullable::<BalancingSpec>)]
        load_balancing: Nullable<BalancingSpec>,
        /// `null`: no active health checks.
        #[serde(default)]
        #[schema(schema_with = nullable::<HealthCheckSpec>)]
        health_check: Nullable<HealthCheckSpec>,
        /// A network this deployment settles (as `GET /facilitator/supported` lists).
        #[serde(default, deserialize_with = "present")]
        #[schema(inline, nullable = false)]
        network: Option<Text<64>>,
}
}

impl RequestBody for RouteUpdate {
    const READ_ONLY: &'static [&'static str] = READ_ONLY;
}

/// The route fields a request sets; `None` = not given.
#[derive(Default, Clone)]
pub(super) struct RouteInput {
    pub(super) path: Option<String>,
    pub(super) price: Option<UsdcAmount>,
    /// `targetUrl` or `targets` (the one-target form is a list of one).
    pub(super) targets: Option<Vec<RouteTarget>>,
    /// Where the targets came from, for field names in problems.
    pub(super) targets_field: &'static str,
    pub(super) balancing: Option<Balancing>,
    pub(super) health_check: Option<Option<HealthCheck>>,
    /// Problems found while reading the body's target fields.
    pub(super) problems: Vec<FieldProblem>,
    pub(super) network: Option<String>,
    pub(super) active: Option<bool>,
    pub(super) streaming: Option<bool>,
    pub(super) discoverable: Option<bool>,
    pub(super) origin_deduplicates: Option<bool>,
    pub(super) description: Option<Option<String>>,
    pub(super) bazaar_category: Option<Option<String>>,
    pub(super) mime_type: Option<Option<String>>,
    pub(super) input_schema: Option<Option<serde_json::Value>>,
    pub(super) output_schema: Option<Option<serde_json::Value>>,
    pub(super) public_tool: Option<bool>,
    pub(super) schemes: Option<Vec<Scheme>>,
    pub(super) protocols: Option<Vec<PaymentProtocol>>,
    pub(super) pricing: Option<Pricing>,
    pub(super) access_window_seconds: Option<Option<u64>>,
    pub(super) access_window_calls: Option<Option<u32>>,
    pub(super) refund_window_seconds: Option<Option<u64>>,
    pub(super) token: Option<String>,
}

impl From<RouteCreate> for RouteInput {
    fn from(b: RouteCreate) -> Self {
        let mut input = Self {
            path: Some(b.path.0),
            price: Some(b.price_usd.0),
            health_check: b.health_check.map(|h| Some(h.into())),
            network: Some(b.network.0),
            ..shared_input!(b)
        };
        input.read_schemes(b.schemes);
        input.read_protocols(b.protocols);
        input.read_targets(b.target_url, b.targets, true);
        input.read_balancing(b.load_balancing);
        input
    }
}

impl From<RouteUpdate> for RouteInput {
    fn from(b: RouteUpdate) -> Self {
        let mut input = Self {
            path: b.path.map(|p| p.0),
            price: b.price_usd.map(|p| p.0),
            health_check: b.health_check.patch().map(|h| h.map(Into::into)),
            network: b.network.map(|n| n.0),
            ..shared_input!(b)
        };
        input.read_schemes(b.schemes);
        input.read_protocols(b.protocols);
        input.read_targets(b.target_url, b.targets, false);
        match b.load_balancing {
            Nullable::Null => input.balancing = Some(Balancing::RoundRobin),
            Nullable::Set(spec) => input.read_balancing(Some(spec)),
            Nullable::Absent => {}
        }
        input
    }
}

impl RouteInput {
    pub(super) fn apply(self, r: &mut Route) {
        if let Some(v) = self.path {
            r.path = v;
        }
        if let Some(v) = self.price {
            r.price = v;
        }
        if let Some(v) = self.targets {
            r.set_targets(v);
        }
        if let Some(v) = self.balancing {
            r.balancing = v;
        }
        if let Some(v) = self.health_check {
            r.health_check = v;
        }
        if let Some(v) = self.network {
            r.network = v;
        }
        if let Some(v) = self.active {
            r.active = v;
        }
        if let Some(v) = self.streaming {
            r.streaming = v;
        }
        if let Some(v) = self.discoverable {
            r.discoverable = v;
        }
        if let Some(v) = self.origin_deduplicates {
            r.origin_deduplicates = v;
        }
        if let Some(v) = self.description {
            r.description = v.unwrap_or_default();
        }
        if let Some(v) = self.bazaar_category {
            r.bazaar_category = v;
        }
        if let Some(v) = self.mime_type {
            r.mime_type = v;
        }
        if let Some(v) = self.input_schema {
            r.input_schema = v;
        }
        if let Some(v) = self.output_schema {
            r.output_schema = v;
        }
        if let Some(v) = self.public_tool {
            r.public_tool = v;
        }
        if let Some(v) = self.schemes {
            r.schemes = v;
        }
        if let Some(v) = self.protocols {
            r.protocols = v;
        }
        if let Some(v) = self.pricing {
            r.pricing = v;
        }
        if let Some(v) = self.access_window_seconds {
            r.access_window_seconds = v;
        }
        if let Some(v) = self.access_window_calls {
            r.access_window_calls = v;
        }
        if let Some(v) = self.refund_window_seconds {
            r.refund_window_seconds = v;
        }
        if let Some(v) = self.token {
            r.token = v;
        }
    }

    /// Reads `targetUrl` / `targets` (at most one of them; `required` on create).
    fn read_targets(
        &mut self,
        target_url: Option<TargetUrl>,
        targets: Option<Vec<TargetSpec>>,
        required: bool,
    ) {
        let read = targets::read_targets(target_url, targets, required);
        if let Some(field) = read.field {
            self.targets_field = field;
        }
        self.targets = read.targets;
        self.problems.extend(read.problems);
    }

    fn read_balancing(&mut self, spec: Option<BalancingSpec>) {
        match targets::read_balancing(spec) {
            Ok(Some(b)) => self.balancing = Some(b),
            Ok(None) => {}
            Err(p) => self.problems.push(p),
        }
    }

    /// `protocols`: each once, x402 among them (a route turns MPP off; x402 stays on).
    fn read_protocols(&mut self, protocols: Option<Vec<PaymentProtocol>>) {
        let Some(protocols) = protocols else { return };
        let repeated = protocols
            .iter()
            .enumerate()
            .any(|(i, p)| protocols[..i].contains(p));
        if repeated || protocols.is_empty() {
            self.problems.push(FieldProblem::new(
                "protocols",
                "must list x402, mpp or both, each once",
            ));
        } else {
            self.protocols = Some(protocols);
        }
    }

    /// `schemes`: at least one, each once.
    fn read_schemes(&mut self, schemes: Option<Vec<Scheme>>) {
        let Some(schemes) = schemes else { return };
        let repeated = schemes
            .iter()
            .enumerate()
            .any(|(i, s)| schemes[..i].contains(s));
        if schemes.is_empty() || repeated {
            self.problems.push(FieldProblem::new(
                "schemes",
                "must name at least one scheme, each once (exact, batch-settlement, upto)",
            ));
        } else {
            self.schemes = Some(schemes);
        }
    }

    /// What a route with the input applied may not be: an access window out of range, calls
    /// without a window, a window on a route no `exact` payment opens (channels, usage pricing).
    pub(super) fn window_problems(r: &Route) -> Vec<FieldProblem> {
        let mut problems = Vec::new();
        let mut problem = |field: &str, text: &str| problems.push(FieldProblem::new(field, text));
        match r.access_window_seconds {
            None if r.access_window_calls.is_some() => problem(
                "accessWindowCalls",
                "needs accessWindowSeconds: calls are counted within a window",
            ),
            None => {}
            Some(s) if !(1..=MAX_WINDOW_SECONDS).contains(&s) => problem(
                "accessWindowSeconds",
                "must be 1 to 31536000 seconds (a year)",
            ),
            Some(_) if !r.schemes.contains(&Scheme::Exact) => problem(
                "accessWindowSeconds",
                "needs exact among schemes: an exact payment opens the window",
            ),
            Some(_) if r.pricing != Pricing::Fixed => problem(
                "accessWindowSeconds",
                "needs fixed pricing: a window is bought for the route's price",
            ),
            Some(_) => {}
        }
        if r.access_window_calls
            .is_some_and(|c| !(1..=MAX_WINDOW_CALLS).contains(&c))
        {
            problem("accessWindowCalls", "must be 1 to 1000000 calls");
        }
        problems
    }
}

impl RouteInput {
    /// What a route with the input applied may not be, beyond its window: a token its network
    /// does not list, `upto` without usage pricing, channels in another token than USDC.
    pub(super) fn token_problems(
        r: &Route,
        networks: &paygate_x402::network::Networks,
    ) -> Vec<FieldProblem> {
        let mut problems = Vec::new();
        if let Some(n) = networks.resolve(&r.network) {
            if n.with_token(&r.token).is_none() {
                let text = format!(
                    "the network {} does not list the token {:?}; it lists {}",
                    n.v1_name,
                    r.token,
                    n.token_symbols().join(", ")
                );
                problems.push(FieldProblem::new("token", text));
            }
        }
        if !r.protocols.contains(&PaymentProtocol::X402) {
            // MPP alone: its `charge` is an EIP-3009 `exact` payment of the route's price.
            let eip3009 = networks
                .resolve(&r.network)
                .and_then(|n| n.with_token(&r.token))
                .is_some_and(|(_, t)| t.transfer != paygate_x402::network::AssetTransfer::Permit2);
            if r.schemes != [Scheme::Exact] || r.pricing != Pricing::Fixed || !eip3009 {
                problems.push(FieldProblem::new(
                    "protocols",
                    "mpp alone needs schemes [\"exact\"], fixed pricing and a token with \
                     EIP-3009 (MPP's charge pays the price up front by EIP-3009)",
                ));
            }
        }
        if r.accepts(Scheme::Upto) && r.pricing != Pricing::Usage {
            problems.push(FieldProblem::new(
                "schemes",
                "upto needs usage pricing: the price is the ceiling of what the origin charges",
            ));
        }
        match r.refund_window_seconds {
            Some(s) if !(1..=MAX_WINDOW_SECONDS).contains(&s) => problems.push(FieldProblem::new(
                "refundWindowSeconds",
                "must be 1 to 31536000 seconds (a year)",
            )),
            Some(_) if !r.accepts(Scheme::AuthCapture) => problems.push(FieldProblem::new(
                "refundWindowSeconds",
                "needs auth-capture among schemes: only an escrowed payment can be refunded",
            )),
            _ => {}
        }
        if r.accepts(Scheme::AuthCapture)
            && !r.token.eq_ignore_ascii_case(paygate_x402::network::USDC)
        {
            problems.push(FieldProblem::new(
                "schemes",
                "auth-capture is paid with an EIP-3009 authorization: USDC only",
            ));
        }
        if r.accepts(Scheme::BatchSettlement) && r.token != paygate_x402::network::USDC {
            problems.push(FieldProblem::new(
                "schemes",
                "batch-settlement channels are deposited in USDC only",
            ));
        }
        problems
    }
}

/// The longest access window: a year.
const MAX_WINDOW_SECONDS: u64 = 31_536_000;
/// The most calls one window serves.
const MAX_WINDOW_CALLS: u32 = 1_000_000;
