//! The payout provider behind a trait, and its HTTP client. The built-in sandbox provider (the
//! `paygate-sandbox` crate) serves the same HTTP API on its own loopback listener, so paygate
//! always talks to a provider over HTTP, sandbox or not.
//!
//! The API paygate uses: `POST /v1/quotes`, `POST /v1/payouts` (with `Idempotency-Key` = our
//! payout id: a retry returns the payout already created, which is all recovery needs; the
//! sandbox also serves `GET /v1/payouts/by-reference/{reference}` for inspection).

pub use super::FundingWire;
use super::{Beneficiary, Currency};
use async_trait::async_trait;
use paygate_x402::money::UsdcAmount;
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// A provider's quote: its rate (destination units per USDC), its rail fee, its expiry, and
/// where it wants the USDC sent on chain (a provider funded on chain names its address).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderQuote {
    pub id: String,
    pub fx_rate: Decimal,
    pub rail_fee: UsdcAmount,
    pub expires_at_unix: i64,
    pub funding_address: Option<alloy_primitives::Address>,
    /// The key (a JWK, JSON) payment data is encrypted to, when the provider asks for it.
    pub encryption_key: Option<String>,
}

/// A provider's quote that does not read: the provider failed (nothing to show a seller).
pub(crate) fn bad_quote(what: &str) -> ProviderError {
    ProviderError::Unavailable(format!("provider quote has a bad {what}"))
}

impl ProviderQuote {
    /// A quote from a provider's words, each given with its field's name for the error: a
    /// positive rate, a fee (zero allowed), an RFC 3339 expiry, an optional funding address.
    pub(crate) fn read(
        id: String,
        rate: (&str, &str),
        fee: (&str, &str),
        expires: (&str, &str),
        funding_address: Option<&str>,
    ) -> Result<Self, ProviderError> {
        let fx_rate = Decimal::from_str_exact(rate.1)
            .ok()
            .filter(|r| *r > Decimal::ZERO)
            .ok_or_else(|| bad_quote(rate.0))?;
        let rail_fee = match super::money::parse_amount(fee.1) {
            Ok(f) => f,
            Err(super::money::AmountError::NotPositive) => UsdcAmount(0),
            Err(_) => return Err(bad_quote(fee.0)),
        };
        let expires_at =
            time::OffsetDateTime::parse(expires.1, &time::format_description::well_known::Rfc3339)
                .map_err(|_| bad_quote(expires.0))?;
        let funding_address = funding_address
            .map(|a| a.parse().map_err(|_| bad_quote("fundingAddress")))
            .transpose()?;
        Ok(Self {
            id,
            fx_rate,
            rail_fee,
            expires_at_unix: expires_at.unix_timestamp(),
            funding_address,
            encryption_key: None,
        })
    }
}

/// What the provider is asked to pay out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PayoutRequest {
    /// Our payment id: the provider's idempotency reference.
    pub reference: String,
    pub quote_id: String,
    pub dest_currency: Currency,
    /// USDC the provider receives (the amount less the platform fee), 6-place string.
    pub source_amount: String,
    /// What the beneficiary gets, 2-place string.
    pub dest_amount: String,
    pub beneficiary: Beneficiary,
    /// The on-chain funding already made, when the quote named a funding address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub funding: Option<FundingWire>,
    /// The quote's encryption key (a provider that wants the beneficiary encrypted).
    #[serde(skip)]
    pub encryption_key: Option<String>,
    /// Who pays (the travel rule's originator): the organisation's id.
    #[serde(skip)]
    pub originator: String,
}

/// A payout as the provider knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderPayout {
    pub id: String,
    pub reference: String,
    pub status: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// The provider refused: nothing was created (expired quote, bad request).
    #[error("provider refused: {0}")]
    Rejected(String),
    /// The provider could not be reached or failed: the outcome is unknown; retry with the same
    /// reference.
    #[error("provider unavailable: {0}")]
    Unavailable(String),
}

#[async_trait]
pub trait PayoutProvider: Send + Sync + 'static {
    async fn quote(
        &self,
        currency: Currency,
        amount: UsdcAmount,
    ) -> Result<ProviderQuote, ProviderError>;
    /// Creates the payout, or returns the one already created for `req.reference`.
    async fn create_payout(&self, req: &PayoutRequest) -> Result<ProviderPayout, ProviderError>;
    /// Reads a payment's status from the provider, as an event paygate applies like a webhook
    /// (with its raw form), or `None` when the status tells nothing new to apply (still being
    /// created) or the provider has no such read.
    async fn payment_status(
        &self,
        payment_id: &str,
    ) -> Result<Option<(crate::webhook::ProviderEvent, Vec<u8>)>, ProviderError> {
        let _ = payment_id;
        Ok(None)
    }
    /// Sends the answer to a request for information (idempotent on the RFI: a repeat is
    /// answered as the first). A provider without RFIs refuses.
    async fn submit_rfi(&self, rfi: &RfiAnswer<'_>) -> Result<(), ProviderError> {
        let _ = rfi;
        Err(ProviderError::Rejected(
            "this payout provider takes no answers to requests for information".into(),
        ))
    }
}

/// An answer to a request for information.
pub struct RfiAnswer<'a> {
    pub payment_id: &'a str,
    pub rfi_id: &'a str,
    /// The quote's encryption key.
    pub encryption_key: Option<&'a str>,
    pub answer: &'a serde_json::Value,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QuoteRequestWire {
    pub dest_currency: Currency,
    pub source_amount: String,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QuoteWire {
    pub id: String,
    pub dest_currency: Currency,
    pub rate: String,
    pub rail_fee: String,
    pub expires_at: String,
    /// Where the provider wants the USDC sent on chain, if it is funded on chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub funding_address: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct ErrorWire {
    pub error: String,
}

/// An HTTP client for a provider's API: bounded in time, following no redirect.
pub fn client(timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap_or_default()
}

/// An error body that says `message` (CPN's `{code, message}`, and many other APIs').
#[derive(Deserialize)]
struct MessageWire {
    message: String,
}

/// A provider's words, as shown to a seller: at most 200 characters, no control characters.
fn clip(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(200).collect()
}

/// A provider's HTTP API: its base URL and bearer key, bounded in time.
pub(crate) struct Api {
    base: String,
    api_key: Option<String>,
    http: reqwest::Client,
}

impl Api {
    pub(crate) fn new(base: &str, api_key: Option<String>, timeout: Duration) -> Self {
        Self {
            base: base.trim_end_matches('/').to_string(),
            api_key,
            http: client(timeout),
        }
    }

    pub(crate) fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let rb = self.http.request(method, format!("{}{path}", self.base));
        match &self.api_key {
            Some(k) => rb.bearer_auth(k),
            None => rb,
        }
    }

    /// Sends `rb`; a `2xx` answer's body, else the failure its status and body say.
    pub(crate) async fn call(rb: reqwest::RequestBuilder) -> Result<Vec<u8>, ProviderError> {
        let (status, body) = Self::send(rb).await?;
        if (200..300).contains(&status) {
            Ok(body)
        } else {
            Err(Self::failure(status, &body))
        }
    }

    async fn send(rb: reqwest::RequestBuilder) -> Result<(u16, Vec<u8>), ProviderError> {
        let resp = rb
            .send()
            .await
            .map_err(|e| ProviderError::Unavailable(e.to_string()))?;
        let status = resp.status().as_u16();
        let body = resp
            .bytes()
            .await
            .map_err(|e| ProviderError::Unavailable(e.to_string()))?;
        Ok((status, body.to_vec()))
    }

    fn failure(status: u16, body: &[u8]) -> ProviderError {
        let reason = serde_json::from_slice::<ErrorWire>(body)
            .map(|e| e.error)
            .or_else(|_| serde_json::from_slice::<MessageWire>(body).map(|e| e.message))
            .map(|r| clip(&r))
            .unwrap_or_else(|_| format!("HTTP {status}"));
        if (400..500).contains(&status) && status != 408 && status != 429 {
            ProviderError::Rejected(reason)
        } else {
            ProviderError::Unavailable(reason)
        }
    }

    pub(crate) fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ProviderError> {
        serde_json::from_slice(body)
            .map_err(|e| ProviderError::Unavailable(format!("unreadable provider answer: {e}")))
    }
}

/// The HTTP client of a provider (the sandbox, or a real one speaking the same API).
pub struct HttpProvider {
    api: Api,
}

impl HttpProvider {
    pub fn new(base: &str, api_key: Option<String>, timeout: Duration) -> Self {
        Self {
            api: Api::new(base, api_key, timeout),
        }
    }
}

#[async_trait]
impl PayoutProvider for HttpProvider {
    async fn quote(
        &self,
        currency: Currency,
        amount: UsdcAmount,
    ) -> Result<ProviderQuote, ProviderError> {
        let req = QuoteRequestWire {
            dest_currency: currency,
            source_amount: super::money::usdc_string(amount),
        };
        let body = Api::call(
            self.api
                .request(reqwest::Method::POST, "/v1/quotes")
                .json(&req),
        )
        .await?;
        let q: QuoteWire = Api::parse(&body)?;
        if q.dest_currency != currency {
            return Err(bad_quote("currency"));
        }
        ProviderQuote::read(
            q.id,
            ("rate", &q.rate),
            ("railFee", &q.rail_fee),
            ("expiresAt", &q.expires_at),
            q.funding_address.as_deref(),
        )
    }

    async fn create_payout(&self, req: &PayoutRequest) -> Result<ProviderPayout, ProviderError> {
        let rb = self
            .api
            .request(reqwest::Method::POST, "/v1/payouts")
            .header("Idempotency-Key", &req.reference)
            .json(req);
        let p: ProviderPayout = Api::parse(&Api::call(rb).await?)?;
        if p.reference != req.reference || p.id.is_empty() {
            return Err(ProviderError::Unavailable(
                "provider answered for another payout".into(),
            ));
        }
        Ok(p)
    }
}
