//! The x402 protocol as paygate speaks it, knowing nothing of the store or of HTTP servers: USDC
//! money, addresses and networks; wire types for v1 and v2 and the rendering of `402`
//! challenges; payment decoding, local verification and signing; and the facilitator (trait,
//! embedded relayer, remote client). Each protocol version's wire shapes live in their own
//! module; [`Challenge`] renders all three forms a `402` carries (the seed
//! `X-Payment-Requirements` header, the v1 body, the v2 header).

pub mod address;
pub mod batch;
pub mod extensions;
pub mod facilitator;
pub mod money;
pub mod network;
pub mod payment;
pub mod permit2;
pub mod sign;
pub mod siwx;
pub mod v1;
pub mod v2;
pub mod verify;

use crate::money::UsdcAmount;
use crate::network::Network;
use alloy_primitives::Address;
use serde::Serialize;

pub use extensions::Extensions;

/// The `extra` object of a requirement: the token's EIP-712 domain name and version, and for
/// `batch-settlement` the channel terms (receiver authorizer, withdraw delay).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenExtra {
    pub name: String,
    pub version: String,
    /// `"permit2"` for a token paid through Permit2 (and every `upto` requirement); absent for
    /// EIP-3009.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asset_transfer_method: Option<String>,
    /// `upto`: the one facilitator the payer's Permit2 witness lets settle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub facilitator_address: Option<String>,
    /// `batch-settlement`'s terms and state (boxed: an `exact` requirement carries none).
    #[serde(
        flatten,
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "channel_extra"
    )]
    pub channel: Option<Box<ChannelExtra>>,
}

impl TokenExtra {
    /// Whether `other` states the same terms: an `assetTransferMethod` of `"eip3009"` (what
    /// some servers write out) is the same as none.
    pub fn same_terms(&self, other: &Self) -> bool {
        fn method(e: &TokenExtra) -> Option<&str> {
            e.asset_transfer_method
                .as_deref()
                .filter(|m| *m != EIP3009_METHOD)
        }
        self.name == other.name
            && self.version == other.version
            && method(self) == method(other)
            && self.facilitator_address == other.facilitator_address
            && self.channel == other.channel
    }
}

/// The `assetTransferMethod` of EIP-3009 payments (the default, when none is named).
pub const EIP3009_METHOD: &str = "eip3009";

/// A flattened `ChannelExtra` with none of its fields is no channel extra at all (so an `exact`
/// requirement read back equals the one rendered).
fn channel_extra<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Box<ChannelExtra>>, D::Error> {
    let e = <ChannelExtra as serde::Deserialize>::deserialize(d)?;
    Ok((e != ChannelExtra::default()).then(|| Box::new(e)))
}

/// The `extra` fields of a `batch-settlement` requirement.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChannelExtra {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receiver_authorizer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub withdraw_delay: Option<u64>,
    /// A corrective 402's channel state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_state: Option<batch::ChannelStateWire>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub voucher_state: Option<batch::VoucherStateWire>,
}

/// One scheme a route's challenge offers, with the terms its requirement carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Offered {
    /// `exact` (EIP-3009, or Permit2 for a token without it: the route's token decides).
    Exact,
    /// `upto`, with the address of the facilitator that settles it (the embedded one's relayer).
    Upto(Address),
    /// `batch-settlement`, with its channel terms.
    Batch(BatchTerms),
}

/// The schemes a route's challenge offers, in the order the route's seller gave them (the
/// order of the v2 `accepts`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offer(pub Vec<Offered>);

impl Default for Offer {
    fn default() -> Self {
        Self(vec![Offered::Exact])
    }
}

impl Offer {
    pub fn exact(&self) -> bool {
        self.0.contains(&Offered::Exact)
    }

    /// `upto`'s facilitator, when offered.
    pub fn upto(&self) -> Option<Address> {
        self.0.iter().find_map(|o| match o {
            Offered::Upto(f) => Some(*f),
            _ => None,
        })
    }

    /// `batch-settlement`'s channel terms, when offered.
    pub fn batch(&self) -> Option<&BatchTerms> {
        self.0.iter().find_map(|o| match o {
            Offered::Batch(t) => Some(t),
            _ => None,
        })
    }
}

/// The channel terms a route offers (x402 `batch-settlement`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchTerms {
    pub receiver_authorizer: Address,
    pub withdraw_delay: u64,
}

/// What a route asks to be paid: everything needed to render a requirement in either version.
#[derive(Debug, Clone)]
pub struct PaymentRequirements {
    pub network: Network,
    pub amount: UsdcAmount,
    pub pay_to: Address,
    /// Absolute URL of the route.
    pub resource: String,
    pub description: String,
    pub mime_type: String,
    pub max_timeout_seconds: u64,
    /// The token's decimals and transfer method (its address and EIP-712 domain are
    /// `network.config`'s: see [`Network::with_token`]).
    pub token: network::TokenTerms,
}

/// The `assetTransferMethod` of Permit2 payments.
pub const PERMIT2_METHOD: &str = "permit2";

/// The `upto` scheme's name.
pub const UPTO_SCHEME: &str = "upto";

impl PaymentRequirements {
    /// `usd` (USDC base units, six decimals) in the requirement's token units.
    pub fn token_units(&self, usd: UsdcAmount) -> alloy_primitives::U256 {
        let scale = alloy_primitives::U256::from(10u64).pow(alloy_primitives::U256::from(
            self.token.decimals.saturating_sub(6),
        ));
        alloy_primitives::U256::from(usd.0) * scale
    }

    /// The price in the token's units (what a payment's value must be).
    pub fn token_amount(&self) -> alloy_primitives::U256 {
        self.token_units(self.amount)
    }

    /// `units` of the token in USDC base units, when it is a whole number of them.
    pub fn usd_of_units(&self, units: alloy_primitives::U256) -> Option<UsdcAmount> {
        let scale = alloy_primitives::U256::from(10u64).pow(alloy_primitives::U256::from(
            self.token.decimals.saturating_sub(6),
        ));
        let (q, r) = units.div_rem(scale);
        (r.is_zero())
            .then(|| u64::try_from(q).ok().map(UsdcAmount))
            .flatten()
    }

    /// Whether payments of this requirement move the token through Permit2.
    pub fn permit2(&self) -> bool {
        self.token.transfer == network::AssetTransfer::Permit2
    }

    /// The network as `version` spells it (v1 name or CAIP-2 id), in receipts and payloads.
    pub fn network_name(&self, version: payment::ProtocolVersion) -> String {
        match version {
            payment::ProtocolVersion::V1 => self.network.v1_name.clone(),
            payment::ProtocolVersion::V2 => self.network.caip2.clone(),
        }
    }

    pub fn extra(&self) -> TokenExtra {
        TokenExtra {
            name: self.network.config.eip712_name.clone(),
            version: self.network.config.eip712_version.clone(),
            asset_transfer_method: self.permit2().then(|| PERMIT2_METHOD.to_string()),
            ..TokenExtra::default()
        }
    }

    /// The v2 `upto` requirement: the price as the ceiling, paid through Permit2 for the
    /// facilitator at `facilitator`.
    pub fn to_v2_upto(&self, facilitator: Address) -> v2::PaymentRequirementsV2 {
        let mut r = self.to_v2();
        r.scheme = UPTO_SCHEME.into();
        r.extra.asset_transfer_method = Some(PERMIT2_METHOD.into());
        r.extra.facilitator_address = Some(facilitator.to_checksum(None));
        r
    }

    /// The v2 `batch-settlement` requirement for these requirements and channel `terms`.
    pub fn to_v2_batch(&self, terms: &BatchTerms) -> v2::PaymentRequirementsV2 {
        let mut r = self.to_v2();
        r.scheme = batch::SCHEME.into();
        r.extra.channel = Some(Box::new(ChannelExtra {
            receiver_authorizer: Some(terms.receiver_authorizer.to_checksum(None)),
            withdraw_delay: Some(terms.withdraw_delay),
            ..ChannelExtra::default()
        }));
        r
    }

    /// The v2 `accepts` list of `offer`.
    pub fn accepts_v2(&self, offer: &Offer) -> Vec<v2::PaymentRequirementsV2> {
        offer
            .0
            .iter()
            .map(|o| match o {
                Offered::Exact => self.to_v2(),
                Offered::Upto(f) => self.to_v2_upto(*f),
                Offered::Batch(t) => self.to_v2_batch(t),
            })
            .collect()
    }

    pub fn to_v1(&self) -> v1::PaymentRequirementsV1 {
        v1::PaymentRequirementsV1 {
            scheme: "exact".into(),
            network: self.network.v1_name.clone(),
            max_amount_required: self.token_amount().to_string(),
            resource: self.resource.clone(),
            description: self.description.clone(),
            mime_type: self.mime_type.clone(),
            pay_to: self.pay_to.to_checksum(None),
            max_timeout_seconds: self.max_timeout_seconds,
            asset: self.network.config.asset.to_checksum(None),
            extra: self.extra(),
        }
    }

    pub fn to_v2(&self) -> v2::PaymentRequirementsV2 {
        v2::PaymentRequirementsV2 {
            scheme: "exact".into(),
            network: self.network.caip2.clone(),
            amount: self.token_amount().to_string(),
            asset: self.network.config.asset.to_checksum(None),
            pay_to: self.pay_to.to_checksum(None),
            max_timeout_seconds: self.max_timeout_seconds,
            extra: self.extra(),
        }
    }
}

/// Why a facilitator request's `paymentRequirements` cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequirementsError {
    #[error("paymentRequirements.{0} is missing or malformed")]
    Field(&'static str),
    #[error("network {0} is not supported here")]
    UnsupportedNetwork(String),
    #[error("asset {0} is not the USDC contract of this network")]
    UnsupportedAsset(String),
    #[error("paymentRequirements.extra does not name this network's token domain")]
    WrongDomain,
}

impl PaymentRequirements {
    /// Reads the requirements another x402 server sends its facilitator (v1 or v2 spelling).
    /// Only the fields settlement depends on are required; the asset and token domain must be
    /// the configured ones, so a signature is never checked against a foreign domain.
    pub fn from_wire(
        v: &serde_json::Value,
        version: payment::ProtocolVersion,
        networks: &crate::network::Networks,
    ) -> Result<Self, RequirementsError> {
        Self::read_wire(v, version, networks, "exact")
    }

    /// Reads a v2 `batch-settlement` requirement another x402 server sends its facilitator: the
    /// requirement and its channel terms (`extra.receiverAuthorizer`, `extra.withdrawDelay`
    /// within the contract's bounds).
    pub fn batch_from_wire(
        v: &serde_json::Value,
        networks: &crate::network::Networks,
    ) -> Result<(Self, BatchTerms), RequirementsError> {
        let req = Self::read_wire(v, payment::ProtocolVersion::V2, networks, batch::SCHEME)?;
        let extra = &v["extra"];
        let receiver_authorizer = extra["receiverAuthorizer"]
            .as_str()
            .and_then(crate::address::parse_address)
            .filter(|a| !a.is_zero())
            .ok_or(RequirementsError::Field("extra.receiverAuthorizer"))?;
        let withdraw_delay = extra["withdrawDelay"]
            .as_u64()
            .filter(|d| (batch::MIN_WITHDRAW_DELAY..=batch::MAX_WITHDRAW_DELAY).contains(d))
            .ok_or(RequirementsError::Field("extra.withdrawDelay"))?;
        Ok((
            req,
            BatchTerms {
                receiver_authorizer,
                withdraw_delay,
            },
        ))
    }

    fn read_wire(
        v: &serde_json::Value,
        version: payment::ProtocolVersion,
        networks: &crate::network::Networks,
        scheme: &str,
    ) -> Result<Self, RequirementsError> {
        use payment::ProtocolVersion;
        let text = |name: &'static str| {
            v.get(name)
                .and_then(serde_json::Value::as_str)
                .ok_or(RequirementsError::Field(name))
        };
        if text("scheme")? != scheme {
            return Err(RequirementsError::Field("scheme"));
        }
        let network_name = text("network")?;
        let network = networks
            .resolve(network_name)
            .ok_or_else(|| RequirementsError::UnsupportedNetwork(network_name.to_string()))?;
        let asset = text("asset")?;
        let (network, token) = crate::address::parse_address(asset)
            .and_then(|a| network.token_symbol(a))
            .filter(|symbol| scheme != batch::SCHEME || symbol == network::USDC)
            .and_then(|symbol| network.with_token(&symbol))
            .ok_or_else(|| RequirementsError::UnsupportedAsset(asset.to_string()))?;
        let amount_field = match version {
            ProtocolVersion::V1 => "maxAmountRequired",
            ProtocolVersion::V2 => "amount",
        };
        let units = Some(text(amount_field)?)
            .filter(|t| !t.is_empty() && t.len() <= 78 && t.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|t| alloy_primitives::U256::from_str_radix(t, 10).ok())
            .ok_or(RequirementsError::Field(amount_field))?;
        let pay_to = crate::address::parse_address(text("payTo")?)
            .ok_or(RequirementsError::Field("payTo"))?;
        if let Some(extra) = v.get("extra").filter(|e| !e.is_null()) {
            let extra: TokenExtra = serde_json::from_value(extra.clone())
                .map_err(|_| RequirementsError::Field("extra"))?;
            if extra.name != network.config.eip712_name
                || extra.version != network.config.eip712_version
            {
                return Err(RequirementsError::WrongDomain);
            }
        }
        let max_timeout_seconds = match v.get("maxTimeoutSeconds") {
            None => 60,
            Some(t) => t
                .as_u64()
                .ok_or(RequirementsError::Field("maxTimeoutSeconds"))?,
        };
        let opt = |name: &str| {
            v.get(name)
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let mut req = Self {
            network,
            amount: UsdcAmount(0),
            pay_to,
            resource: opt("resource"),
            description: opt("description"),
            mime_type: opt("mimeType"),
            max_timeout_seconds,
            token,
        };
        req.amount = req
            .usd_of_units(units)
            .ok_or(RequirementsError::Field(amount_field))?;
        Ok(req)
    }
}

impl PaymentRequirements {
    /// The v2 `PaymentRequired` document for these requirements (`PAYMENT-REQUIRED`'s JSON, and
    /// what an MCP tool error carries), with `error` and the server's `extensions`.
    pub fn payment_required_v2(
        &self,
        error: &str,
        extensions: &Extensions,
    ) -> v2::PaymentRequiredV2 {
        self.payment_required_offered(error, extensions, &Offer::default())
    }

    /// [`Self::payment_required_v2`] for the schemes of `offer`.
    pub fn payment_required_offered(
        &self,
        error: &str,
        extensions: &Extensions,
        offer: &Offer,
    ) -> v2::PaymentRequiredV2 {
        v2::PaymentRequiredV2 {
            x402_version: 2,
            error: Some(error.to_string()),
            resource: v2::ResourceInfo {
                url: self.resource.clone(),
                description: Some(self.description.clone()),
                mime_type: Some(self.mime_type.clone()),
            },
            accepts: self.accepts_v2(offer),
            extensions: (!extensions.is_empty()).then(|| extensions.clone()),
        }
    }
}

/// The three renderings of one route's `402`, computed once per route change so the hot path
/// only copies bytes.
#[derive(Debug, Clone)]
pub struct Challenge {
    /// JSON of the v1 requirement, for the `X-Payment-Requirements` header. Rendered once per
    /// route change; a clone per request is a reference-count increment.
    pub requirements_header: http::HeaderValue,
    /// Base64 JSON of the v2 `PaymentRequired`, for the `PAYMENT-REQUIRED` header.
    pub payment_required_header: http::HeaderValue,
    /// The v1 JSON body `{x402Version: 1, error, accepts}`.
    pub body: bytes::Bytes,
    /// The v2 document's `extensions`, kept to render the challenge again with another `error`.
    pub extensions: std::sync::Arc<Extensions>,
    /// The schemes offered.
    pub offer: Offer,
}

/// The JSON inside a base64 x402 header (`PAYMENT-REQUIRED`, `PAYMENT-RESPONSE`), if it is one.
pub fn b64_json(header: &str) -> Option<serde_json::Value> {
    use base64::Engine;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(header.trim())
        .ok()?;
    serde_json::from_slice(&raw).ok()
}

/// A rendered header value. JSON from serde_json has no control characters, so this cannot
/// fail; an empty value stands in if it ever did.
fn header_value(s: String) -> http::HeaderValue {
    http::HeaderValue::from_maybe_shared(bytes::Bytes::from(s))
        .unwrap_or_else(|_| http::HeaderValue::from_static(""))
}

/// The `error` text of a challenge sent because no payment came with the request.
pub const NO_PAYMENT_ERROR: &str = "X-PAYMENT header is required";

impl Challenge {
    /// Renders the challenge for `req` with the given `error` text.
    pub fn render(req: &PaymentRequirements, error: &str) -> Self {
        Self::render_offered(req, error, Default::default(), Offer::default())
    }

    /// Renders the challenge offering the schemes of `offer` (the v1 forms only ever carry
    /// `exact`: the other schemes are v2's), declaring `extensions`.
    pub fn render_offered(
        req: &PaymentRequirements,
        error: &str,
        extensions: std::sync::Arc<Extensions>,
        offer: Offer,
    ) -> Self {
        let v1_req = req.to_v1();
        let requirements_header = serde_json::to_string(&v1_req).unwrap_or_default();
        let body = serde_json::to_vec(&v1::PaymentRequiredV1 {
            x402_version: 1,
            error: error.to_string(),
            accepts: vec![v1_req],
        })
        .unwrap_or_default();
        let v2_doc = req.payment_required_offered(error, &extensions, &offer);
        Self {
            requirements_header: header_value(requirements_header),
            payment_required_header: header_value(v2::header(&v2_doc)),
            body: body.into(),
            extensions,
            offer,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::{builtin_networks, Networks};

    fn req(network: &str) -> PaymentRequirements {
        PaymentRequirements {
            network: Networks::from_config(&builtin_networks())
                .resolve(network)
                .unwrap()
                .clone(),
            amount: UsdcAmount(10_000),
            pay_to: "0x209693bc6afc0c5328ba36faf03c514ef312287c"
                .parse()
                .unwrap(),
            resource: "http://127.0.0.1:8402/gateway/acme/echo".into(),
            description: "Echo".into(),
            mime_type: String::new(),
            max_timeout_seconds: 60,
            token: Default::default(),
        }
    }

    #[test]
    fn v1_body_uses_v1_names_and_absolute_resource() {
        // Given with the CAIP-2 spelling, still rendered with the v1 name in v1.
        let c = Challenge::render(&req("eip155:84532"), NO_PAYMENT_ERROR);
        let body: serde_json::Value = serde_json::from_slice(&c.body).unwrap();
        assert_eq!(body["x402Version"], 1);
        assert_eq!(body["error"], NO_PAYMENT_ERROR);
        let a = &body["accepts"][0];
        assert_eq!(a["scheme"], "exact");
        assert_eq!(a["network"], "base-sepolia");
        assert_eq!(a["maxAmountRequired"], "10000");
        assert_eq!(a["resource"], "http://127.0.0.1:8402/gateway/acme/echo");
        assert_eq!(a["description"], "Echo");
        assert_eq!(a["mimeType"], "");
        assert_eq!(a["payTo"], "0x209693Bc6afc0C5328bA36FaF03C514EF312287C");
        assert_eq!(a["maxTimeoutSeconds"], 60);
        assert_eq!(a["asset"], "0x036CbD53842c5426634e7929541eC2318f3dCF7e");
        assert_eq!(a["extra"]["name"], "USDC");
        assert_eq!(a["extra"]["version"], "2");
        assert!(a.get("outputSchema").is_none(), "no null outputSchema");
        let header: serde_json::Value =
            serde_json::from_str(c.requirements_header.to_str().unwrap()).unwrap();
        assert_eq!(&header, a);
    }

    #[test]
    fn requirements_read_back_equal_the_rendered_ones() {
        let r = req("base-sepolia");
        let exact = r.to_v2();
        let back: v2::PaymentRequirementsV2 =
            serde_json::from_value(serde_json::to_value(&exact).unwrap()).unwrap();
        assert_eq!(back, exact);
        let terms = BatchTerms {
            receiver_authorizer: Address::repeat_byte(7),
            withdraw_delay: 900,
        };
        let batch = r.to_v2_batch(&terms);
        let json = serde_json::to_value(&batch).unwrap();
        assert_eq!(json["extra"]["withdrawDelay"], 900);
        let back: v2::PaymentRequirementsV2 = serde_json::from_value(json).unwrap();
        assert_eq!(back, batch);
    }

    #[test]
    fn v2_header_uses_caip2_and_amount() {
        use base64::Engine;
        let c = Challenge::render(&req("base"), NO_PAYMENT_ERROR);
        let raw = base64::engine::general_purpose::STANDARD
            .decode(c.payment_required_header.as_bytes())
            .unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&raw).unwrap();
        assert_eq!(doc["x402Version"], 2);
        assert_eq!(
            doc["resource"]["url"],
            "http://127.0.0.1:8402/gateway/acme/echo"
        );
        let a = &doc["accepts"][0];
        assert_eq!(a["network"], "eip155:8453");
        assert_eq!(a["amount"], "10000");
        assert_eq!(a["asset"], "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913");
        assert_eq!(a["extra"]["name"], "USD Coin");
        assert!(a.get("maxAmountRequired").is_none());
        assert!(c.payment_required_header.len() < 8 * 1024);
    }

    #[test]
    fn wire_requirements_are_read_strictly() {
        use super::payment::ProtocolVersion::{V1, V2};
        let nets = Networks::from_config(&builtin_networks());
        let v1 = serde_json::to_value(req("base-sepolia").to_v1()).unwrap();
        let back = PaymentRequirements::from_wire(&v1, V1, &nets).unwrap();
        assert_eq!(back.amount, UsdcAmount(10_000));
        assert_eq!(back.network.v1_name, "base-sepolia");
        let v2 = serde_json::to_value(req("base").to_v2()).unwrap();
        let back = PaymentRequirements::from_wire(&v2, V2, &nets).unwrap();
        assert_eq!(back.network.caip2, "eip155:8453");
        // v2 has no maxAmountRequired; v1 has no amount.
        assert_eq!(
            PaymentRequirements::from_wire(&v2, V1, &nets).unwrap_err(),
            RequirementsError::Field("maxAmountRequired")
        );
        let cases: [(&str, serde_json::Value, RequirementsError); 5] = [
            (
                "network",
                "solana".into(),
                RequirementsError::UnsupportedNetwork("solana".into()),
            ),
            (
                "asset",
                "0x0000000000000000000000000000000000000001".into(),
                RequirementsError::UnsupportedAsset(
                    "0x0000000000000000000000000000000000000001".into(),
                ),
            ),
            ("payTo", "nope".into(), RequirementsError::Field("payTo")),
            (
                "maxAmountRequired",
                "-1".into(),
                RequirementsError::Field("maxAmountRequired"),
            ),
            (
                "extra",
                serde_json::json!({"name": "Evil", "version": "2"}),
                RequirementsError::WrongDomain,
            ),
        ];
        for (field, value, want) in cases {
            let mut bad = v1.clone();
            bad[field] = value;
            assert_eq!(
                PaymentRequirements::from_wire(&bad, V1, &nets).unwrap_err(),
                want,
                "{field}"
            );
        }
    }
}

/// Whether traces are exported (`[telemetry]`): the paid path opens its spans only then, so a
/// deployment without traces pays nothing for them.
pub mod traces {
    use std::sync::atomic::{AtomicBool, Ordering};

    static ON: AtomicBool = AtomicBool::new(false);

    /// Called once traces are exported.
    pub fn enable() {
        ON.store(true, Ordering::Relaxed);
    }

    pub fn on() -> bool {
        ON.load(Ordering::Relaxed)
    }

    /// An INFO span named `$name` (a child of the current one) when traces are on, else none.
    #[macro_export]
    macro_rules! span {
        ($name:literal $(, $($field:tt)*)?) => {
            if $crate::traces::on() {
                tracing::info_span!($name $(, $($field)*)?)
            } else {
                tracing::Span::none()
            }
        };
    }
}
