//! What a route asks to be paid ([`PaymentRequirements`]), in every form the protocol writes
//! it (v1, v2 per scheme, the v2 `PaymentRequired` document), and read back from another
//! server's facilitator request; the schemes a challenge offers ([`Offer`]).

use crate::extensions::Extensions;
use crate::extra::{ChannelExtra, TokenExtra};
use crate::money::UsdcAmount;
use crate::network::{self, Network};
use crate::{batch, payment, v1, v2};
use alloy_primitives::Address;

/// One scheme a route's challenge offers, with the terms its requirement carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Offered {
    /// `exact` (EIP-3009, or Permit2 for a token without it: the route's token decides).
    Exact,
    /// `upto`, with the address of the facilitator that settles it (the embedded one's relayer).
    Upto(Address),
    /// `batch-settlement`, with its channel terms.
    Batch(BatchTerms),
    /// `auth-capture`, with its escrow terms (the deadlines are counted when rendered).
    AuthCapture(EscrowTerms),
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

    /// `auth-capture`'s escrow terms, when offered.
    pub fn escrow(&self) -> Option<&EscrowTerms> {
        self.0.iter().find_map(|o| match o {
            Offered::AuthCapture(t) => Some(t),
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

/// The `auth-capture` scheme's name.
pub const AUTH_CAPTURE_SCHEME: &str = "auth-capture";

/// The `auth-capture` escrow (v1.1, the address the official client signs for by default).
pub const AUTH_CAPTURE_ESCROW: Address =
    alloy_primitives::address!("f96815976523E00e65Be8f34cA5e64b4f41EB19c");

/// What a route offers under `auth-capture`: the operator that authorizes, captures, voids and
/// refunds (this deployment's relayer), how long after a `402` a payment may be captured, and
/// how long after that it may be refunded (the route's refund window; zero: no refunds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EscrowTerms {
    pub operator: Address,
    pub capture_window: u64,
    pub refund_window: u64,
}

impl PaymentRequirements {
    /// The v2 `auth-capture` requirement under `terms`, its deadlines counted from `now`. No
    /// fee is taken on chain (both bounds zero, the operator its recipient).
    pub fn to_v2_auth_capture(&self, terms: &EscrowTerms, now: u64) -> v2::PaymentRequirementsV2 {
        let mut r = self.to_v2();
        r.scheme = AUTH_CAPTURE_SCHEME.into();
        r.extra.payment_flow = Some(crate::extra::ESCROW_FLOW.into());
        let capture = now.saturating_add(terms.capture_window);
        let operator = terms.operator.to_checksum(None);
        r.extra.escrow = Some(Box::new(crate::extra::EscrowExtra {
            capture_authorizer: Some(operator.clone()),
            fee_recipient: Some(operator),
            capture_deadline: Some(capture),
            refund_deadline: Some(capture.saturating_add(terms.refund_window)),
            min_fee_bps: Some(0),
            max_fee_bps: Some(0),
            auth_capture_escrow: Some(AUTH_CAPTURE_ESCROW.to_checksum(None)),
        }));
        r
    }
}

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
                Offered::AuthCapture(t) => self.to_v2_auth_capture(t, crate::clock::unix_now()),
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
    #[error("scheme {0} is not taken here")]
    UnsupportedScheme(String),
    #[error("network {0} is not supported here")]
    UnsupportedNetwork(String),
    #[error("asset {0} is not the USDC contract of this network")]
    UnsupportedAsset(String),
    #[error("paymentRequirements.extra does not name this network's token domain")]
    WrongDomain,
}

impl RequirementsError {
    /// x402's reason word for a facilitator's answer to such requirements.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::UnsupportedScheme(_) => "unsupported_scheme",
            Self::UnsupportedNetwork(_) => "invalid_network",
            _ => "invalid_payment_requirements",
        }
    }
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

    /// [`Self::from_wire`] for a requirement naming `scheme` (`upto`, `auth-capture`: the
    /// fields settlement depends on are the same).
    pub fn from_wire_as(
        v: &serde_json::Value,
        version: payment::ProtocolVersion,
        networks: &crate::network::Networks,
        scheme: &str,
    ) -> Result<Self, RequirementsError> {
        Self::read_wire(v, version, networks, scheme)
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

    pub(crate) fn read_wire(
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
        let asked = text("scheme")?;
        if asked != scheme {
            return Err(RequirementsError::UnsupportedScheme(asked.to_string()));
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
