//! Payout corridors: an organisation turns USDC into BRL, MXN, NGN, KES or ZAR paid to a bank
//! account through a payout provider, which confirms by signed webhook.
//!
//! - [`money`]: exact amounts, fees and the quote arithmetic (no floats anywhere);
//! - [`beneficiary`]: the bank account rules of SPEC.md section 8;
//! - [`webhook`]: `Provider-Signature` checking and the strict event payload;
//! - [`cpn`]: Circle Payments Network's notifications and their ECDSA signatures;
//! - [`provider`]: the provider trait and its HTTP client;
//! - [`store`]: what the payout store must do (`PayoutStore`; the sled implementation is in
//!   `paygate-store`);
//! - [`engine`]: exactly-once payouts, webhook events and reconciliation;
//! - [`views`]: the corridor API's response bodies;
//! - the records kept in the store are below.

pub mod bank_ids;
pub mod beneficiary;
pub mod cpn;
pub mod cpn_client;
pub mod engine;
pub mod funding;
pub mod money;
pub mod provider;
pub mod rfi;
pub mod store;
pub mod views;
pub mod webhook;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A destination currency and the one bank country it pays into.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema,
)]
pub enum Currency {
    #[serde(rename = "BRL")]
    Brl,
    #[serde(rename = "MXN")]
    Mxn,
    #[serde(rename = "NGN")]
    Ngn,
    #[serde(rename = "KES")]
    Kes,
    #[serde(rename = "ZAR")]
    Zar,
}

impl Currency {
    pub const ALL: [Currency; 5] = [Self::Brl, Self::Mxn, Self::Ngn, Self::Kes, Self::Zar];

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.code() == s)
    }

    pub const fn code(self) -> &'static str {
        match self {
            Self::Brl => "BRL",
            Self::Mxn => "MXN",
            Self::Ngn => "NGN",
            Self::Kes => "KES",
            Self::Zar => "ZAR",
        }
    }

    /// ISO 3166-1 alpha-2 code of the country whose banks receive this currency.
    pub const fn country(self) -> &'static str {
        match self {
            Self::Brl => "BR",
            Self::Mxn => "MX",
            Self::Ngn => "NG",
            Self::Kes => "KE",
            Self::Zar => "ZA",
        }
    }
}

impl std::fmt::Display for Currency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.code())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CorridorStatus {
    PendingKyc,
    Active,
}

impl CorridorStatus {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::PendingKyc => "PENDING_KYC",
            Self::Active => "ACTIVE",
        }
    }
}

/// One organisation's corridor to one currency (at most one per pair).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Corridor {
    pub id: String,
    pub org_id: String,
    pub dest_currency: Currency,
    pub status: CorridorStatus,
    pub created_at: String,
    pub updated_at: String,
}

/// A quote as given to the caller: single-use, valid until `expires_at_unix`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Quote {
    pub id: String,
    pub org_id: String,
    pub corridor_id: String,
    pub provider_quote_id: String,
    pub dest_currency: Currency,
    pub breakdown: money::QuoteBreakdown,
    pub expires_at_unix: i64,
    pub created_at: String,
    /// The payment that used this quote (quotes are single-use).
    pub used_by: Option<String>,
    /// Where the provider wants the USDC sent on chain (checksummed), when it is funded on
    /// chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub funding_address: Option<String>,
    /// The provider's key (a JWK) the payout's beneficiary data and RFI answers are encrypted
    /// to, when its API asks for them encrypted (CPN).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption_key: Option<String>,
}

impl Quote {
    pub fn expires_at(&self) -> String {
        time::OffsetDateTime::from_unix_timestamp(self.expires_at_unix)
            .map(paygate_domain::rfc3339)
            .unwrap_or_default()
    }
}

/// Where a payout stands. `Initiating` is internal (reserved, provider not yet confirmed) and is
/// shown as `PENDING`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PayoutStatus {
    Initiating,
    Pending,
    ComplianceHold,
    Settled,
    Failed,
}

impl PayoutStatus {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Initiating | Self::Pending => "PENDING",
            Self::ComplianceHold => "COMPLIANCE_HOLD",
            Self::Settled => "SETTLED",
            Self::Failed => "FAILED",
        }
    }

    pub const fn is_terminal(self) -> bool {
        matches!(self, Self::Settled | Self::Failed)
    }

    /// The state after `event`, or `None` if the event changes nothing (SPEC.md 3.2: terminal
    /// states never change; a hold can end either way). Progress keeps the state (and is kept
    /// in the timeline) until the payout is terminal.
    pub fn after(self, event: webhook::EventType) -> Option<Self> {
        use webhook::EventType as E;
        let next = match event {
            E::PaymentCompleted => Self::Settled,
            E::PaymentFailed => Self::Failed,
            E::ComplianceHold => Self::ComplianceHold,
            E::Progress if self.is_terminal() => return None,
            E::Progress => return Some(self),
        };
        match self {
            Self::Settled | Self::Failed => None,
            s if s == next => None,
            Self::ComplianceHold if next == Self::ComplianceHold => None,
            _ => Some(next),
        }
    }
}

/// The bank account a payout goes to (validated, see [`beneficiary`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Beneficiary {
    pub name: String,
    pub bank_name: String,
    /// Digits only, as extracted from the given account number (empty when the payout goes to
    /// a PIX key or an M-Pesa number).
    pub account_number: String,
    pub country: String,
    pub currency: Currency,
    /// BRL: the PIX key, canonical, and its kind (`CPF`, `CNPJ`, `EMAIL`, `PHONE`, `EVP`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pix_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pix_key_type: Option<String>,
    /// NGN: the bank's NUBAN code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bank_code: Option<String>,
    /// ZAR: the branch code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch_code: Option<String>,
    /// KES: the M-Pesa number, `+254...`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mobile_number: Option<String>,
}

impl Beneficiary {
    /// A bank account in `currency`'s country and nothing else (records built outside a pay
    /// request: seeds, tests).
    pub fn bank_account(
        name: &str,
        bank_name: &str,
        account_number: &str,
        currency: Currency,
    ) -> Self {
        Self {
            name: name.into(),
            bank_name: bank_name.into(),
            account_number: account_number.into(),
            country: currency.country().into(),
            currency,
            pix_key: None,
            pix_key_type: None,
            bank_code: None,
            branch_code: None,
            mobile_number: None,
        }
    }
}

/// A provider event applied to (or kept for) a payout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppliedEvent {
    pub event_type: String,
    pub provider_status: String,
    pub update_date: String,
    pub received_at: String,
}

/// A payout to a bank account.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Payout {
    pub id: String,
    pub org_id: String,
    pub corridor_id: String,
    pub quote_id: String,
    pub provider_quote_id: String,
    pub idempotency_key: String,
    pub from_address: String,
    pub dest_currency: Currency,
    pub breakdown: money::QuoteBreakdown,
    pub beneficiary: Beneficiary,
    pub status: PayoutStatus,
    /// The provider's id, once the provider accepted the payout.
    pub cpn_payment_id: Option<String>,
    /// The on-chain funding from the payout wallet, when the provider is funded on chain: set
    /// (without a transaction) when the payout is reserved, its transaction once sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub funding: Option<FundingWire>,
    pub events: Vec<AppliedEvent>,
    /// The quote's encryption key (see [`Quote::encryption_key`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption_key: Option<String>,
    /// The provider's latest request for information about this payout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rfi: Option<PayoutRfi>,
    /// Why a `FAILED` payout failed: a word (`PROVIDER_REJECTED`, or the provider's status
    /// word of its `payment_failed` event) and a sentence.
    #[serde(default)]
    pub failure_code: Option<String>,
    #[serde(default)]
    pub failure_message: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

/// A request for information the provider holds a payout for: what it asks (a JSON Schema of
/// the answer) and where it stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PayoutRfi {
    pub id: String,
    /// `INFORMATION_REQUIRED` (answer it: `POST /corridors/{id}/payments/{paymentId}/rfi`),
    /// `IN_REVIEW`, `APPROVED` or `FAILED`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<String>,
    /// The JSON Schema of the answer: an object of the fields asked for.
    #[schema(value_type = Object)]
    pub schema: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// When the seller's answer was accepted by the provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered_at: Option<String>,
}

impl PayoutRfi {
    /// How far along an RFI's status is: a notification never moves it back.
    fn rank(status: &str) -> u8 {
        match status {
            "INFORMATION_REQUIRED" => 0,
            "IN_REVIEW" => 1,
            _ => 2,
        }
    }

    /// Whether the seller can answer it now.
    pub fn open(&self) -> bool {
        self.status == "INFORMATION_REQUIRED"
    }
}

impl Payout {
    /// Takes the RFI an event states: a new RFI replaces the last, the same one only moves
    /// forward. `true` if anything changed.
    fn merge_rfi(&mut self, rfi: &webhook::EventRfi, received_at: &str) -> bool {
        match &mut self.rfi {
            Some(r) if r.id == rfi.id => {
                if PayoutRfi::rank(&rfi.status) <= PayoutRfi::rank(&r.status) {
                    return false;
                }
                if r.open() {
                    r.answered_at = Some(received_at.to_string());
                }
                r.status = rfi.status.clone();
                if let Some(schema) = &rfi.schema {
                    r.schema = schema.clone();
                }
                true
            }
            _ => {
                self.rfi = Some(PayoutRfi {
                    id: rfi.id.clone(),
                    status: rfi.status.clone(),
                    level: rfi.level.clone(),
                    schema: rfi
                        .schema
                        .clone()
                        .unwrap_or_else(|| serde_json::json!({"type": "object"})),
                    expires_at: rfi.expires_at.clone(),
                    answered_at: None,
                });
                true
            }
        }
    }

    /// Applies a verified provider event: the next status (`None`: the event changes nothing,
    /// e.g. after a terminal status), the event kept in the timeline, and a failure's reason.
    /// An RFI the event states is taken while the payout is not terminal, even when the status
    /// stays (a second hold, a review moving on).
    pub fn apply_event(
        &mut self,
        event: &webhook::ProviderEvent,
        received_at: &str,
    ) -> Option<PayoutStatus> {
        let next = self.status.after(event.event_type);
        let rfi_changed = match &event.rfi {
            Some(r) if !self.status.is_terminal() => self.merge_rfi(r, received_at),
            _ => false,
        };
        let next = match next {
            Some(n) => n,
            None if rfi_changed => self.status,
            None => return None,
        };
        self.status = next;
        self.updated_at = received_at.to_string();
        self.events.push(AppliedEvent {
            event_type: event.name().to_string(),
            provider_status: event.provider_status.clone(),
            update_date: event.update_date.clone(),
            received_at: received_at.to_string(),
        });
        if next == PayoutStatus::Failed {
            if let (Some(f), Some(r)) = (self.funding.as_mut(), &event.returned) {
                f.returned = true;
                f.returned_transaction = r.transaction.clone();
            }
            let returned = match &event.returned {
                Some(r) => match &r.transaction {
                    Some(tx) => format!(" and was returned to the payout wallet ({tx})"),
                    None => " and was returned to the payout wallet".to_string(),
                },
                None => String::new(),
            };
            match &event.failure {
                Some(f) => {
                    let code = if f.code.is_empty() {
                        &f.reason
                    } else {
                        &f.code
                    };
                    self.failure_code = Some(code.to_ascii_uppercase());
                    self.failure_message = Some(format!(
                        "the payout provider failed the payment on {} ({}{}{}); the USDC was \
                         not delivered to the beneficiary{returned}",
                        event.update_date,
                        f.reason,
                        if f.reason.is_empty() || f.code.is_empty() {
                            ""
                        } else {
                            " "
                        },
                        f.code
                    ));
                }
                None => {
                    self.failure_code = Some(event.provider_status.to_ascii_uppercase());
                    self.failure_message = Some(format!(
                        "the payout provider reported the payment as {} on {}: rejected or not \
                         completed; the USDC was not delivered to the beneficiary{returned}",
                        event.provider_status, event.update_date
                    ));
                }
            }
        }
        Some(next)
    }
}

/// What an `Idempotency-Key` of the pay endpoint stands for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PayIdempotency {
    pub org_id: String,
    pub key: String,
    pub fingerprint: String,
    pub payment_id: String,
    /// The `202` body once the provider accepted the payout; `None` while in flight.
    pub response: Option<String>,
    pub created_at_unix: i64,
}

/// The on-chain funding of a payout, as recorded and as the provider is told: the payout
/// wallet's EIP-3009 transfer to the provider's address, its nonce fixed by the payout id
/// (`funding::funding_nonce`), and its transaction once known.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FundingWire {
    pub from: String,
    pub to: String,
    /// USDC, 6-place string.
    pub amount: String,
    pub nonce: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transaction: Option<String>,
    /// Whether the provider gave the USDC back to the payout wallet (the payout failed after it
    /// was funded), and its transaction when known.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub returned: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub returned_transaction: Option<String>,
}
