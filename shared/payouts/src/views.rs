//! What the corridor API answers: each response body is one type, serialised by the handlers
//! (and, for an accepted payout, stored by the engine as the key's answer) and described by
//! the OpenAPI document from the same derives.

use super::money::{minor_string, usdc_string, QuoteBreakdown};
use super::{Corridor, Currency, Payout, PayoutStatus, Quote};
use rust_decimal::Decimal;
use serde::Serialize;
use utoipa::ToSchema;

#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Corridor)]
#[serde(rename_all = "camelCase")]
pub struct CorridorView {
    id: String,
    org_id: String,
    dest_currency: Currency,
    /// `PENDING_KYC` or `ACTIVE`.
    status: &'static str,
    created_at: String,
    updated_at: String,
}

impl From<&Corridor> for CorridorView {
    fn from(c: &Corridor) -> Self {
        Self {
            id: c.id.clone(),
            org_id: c.org_id.clone(),
            dest_currency: c.dest_currency,
            status: c.status.as_str(),
            created_at: c.created_at.clone(),
            updated_at: c.updated_at.clone(),
        }
    }
}

/// The fees of a quote, in USDC decimal strings.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Fees {
    /// Always `USDC`.
    currency: &'static str,
    platform_fee_percent: String,
    platform_fee: String,
    rail_fee: String,
    total: String,
}

impl From<&QuoteBreakdown> for Fees {
    fn from(b: &QuoteBreakdown) -> Self {
        let mut pct = Decimal::from(b.platform_fee_bps) / Decimal::from(100);
        pct.rescale(2);
        Self {
            currency: "USDC",
            platform_fee_percent: pct.to_string(),
            platform_fee: usdc_string(b.platform_fee),
            rail_fee: usdc_string(b.rail_fee),
            total: usdc_string(b.total_fee),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Quote)]
#[serde(rename_all = "camelCase")]
pub struct QuoteView {
    quote_id: String,
    corridor_id: String,
    /// USDC, decimal string.
    amount: String,
    fx_rate: String,
    dest_amount: String,
    dest_currency: Currency,
    fees: Fees,
    expires_at: String,
}

impl From<&Quote> for QuoteView {
    fn from(q: &Quote) -> Self {
        let b = &q.breakdown;
        Self {
            quote_id: q.id.clone(),
            corridor_id: q.corridor_id.clone(),
            amount: usdc_string(b.amount),
            fx_rate: b.fx_rate.to_string(),
            dest_amount: minor_string(b.dest_amount),
            dest_currency: q.dest_currency,
            fees: Fees::from(b),
            expires_at: q.expires_at(),
        }
    }
}

/// The `202` body of the pay endpoint.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PayoutAccepted {
    payment_id: String,
    #[schema(required)]
    cpn_payment_id: Option<String>,
    /// Always `PENDING`: the provider confirms by webhook.
    status: &'static str,
}

impl From<&Payout> for PayoutAccepted {
    fn from(p: &Payout) -> Self {
        Self {
            payment_id: p.id.clone(),
            cpn_payment_id: p.cpn_payment_id.clone(),
            status: PayoutStatus::Pending.as_str(),
        }
    }
}

/// The bank account as shown: the account number, a PIX key and an M-Pesa number masked but
/// for their last four characters.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = BeneficiaryShown)]
#[serde(rename_all = "camelCase")]
pub struct BeneficiaryView {
    name: String,
    bank_name: String,
    /// Empty when the payout goes to a PIX key or an M-Pesa number.
    account_number: String,
    country: String,
    currency: Currency,
    #[serde(skip_serializing_if = "Option::is_none")]
    pix_key: Option<String>,
    /// `CPF`, `CNPJ`, `EMAIL`, `PHONE` or `EVP`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pix_key_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bank_code: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    branch_code: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mobile_number: Option<String>,
}

/// `s` with every character but the last four shown as `*`.
fn masked(s: &str) -> String {
    let n = s.chars().count();
    s.chars()
        .enumerate()
        .map(|(i, c)| if i + 4 < n { '*' } else { c })
        .collect()
}

/// A payout as `GET /corridors/{id}/payments/{paymentId}` shows it.
/// A payout's status as the API answers it: the names [`PayoutStatus::as_str`] gives
/// (`Initiating` is shown as `PENDING`).
pub struct PayoutStatusName;

impl utoipa::PartialSchema for PayoutStatusName {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use PayoutStatus as S;
        let names = [S::Pending, S::ComplianceHold, S::Settled, S::Failed].map(S::as_str);
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .enum_values(Some(names))
            .into()
    }
}

impl ToSchema for PayoutStatusName {}

#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Payout)]
#[serde(rename_all = "camelCase")]
pub struct PayoutView {
    payment_id: String,
    corridor_id: String,
    #[schema(required)]
    cpn_payment_id: Option<String>,
    /// `PENDING`, `COMPLIANCE_HOLD`, `SETTLED` or `FAILED`.
    #[schema(value_type = PayoutStatusName)]
    status: &'static str,
    quote_id: String,
    from_address: String,
    /// The on-chain transfer from the payout wallet to the provider, when payouts are funded on
    /// chain (`transaction` once known).
    funding: Option<super::provider::FundingWire>,
    #[serde(rename = "amountUSDC")]
    amount_usdc: String,
    fx_rate: String,
    dest_amount: String,
    dest_currency: Currency,
    fees: Fees,
    beneficiary: BeneficiaryView,
    /// The last provider event applied, if any.
    #[schema(required)]
    last_event: Option<super::AppliedEvent>,
    /// Every provider event applied, oldest first: the payout's status timeline.
    events: Vec<super::AppliedEvent>,
    /// Why a `FAILED` payout failed (`PROVIDER_REJECTED`, or the provider's status word of its
    /// failure event); null otherwise.
    #[schema(required)]
    failure_code: Option<String>,
    /// The same in a sentence; null unless `FAILED`.
    #[schema(required)]
    failure_message: Option<String>,
    /// The provider's latest request for information about this payout, if it made one.
    #[serde(skip_serializing_if = "Option::is_none")]
    rfi: Option<super::PayoutRfi>,
    created_at: String,
    updated_at: String,
}

impl From<&Payout> for PayoutView {
    fn from(p: &Payout) -> Self {
        let b = &p.breakdown;
        let ben = &p.beneficiary;
        Self {
            payment_id: p.id.clone(),
            corridor_id: p.corridor_id.clone(),
            cpn_payment_id: p.cpn_payment_id.clone(),
            status: p.status.as_str(),
            quote_id: p.quote_id.clone(),
            from_address: p.from_address.clone(),
            funding: p.funding.clone(),
            amount_usdc: usdc_string(b.amount),
            fx_rate: b.fx_rate.to_string(),
            dest_amount: minor_string(b.dest_amount),
            dest_currency: p.dest_currency,
            fees: Fees::from(b),
            beneficiary: BeneficiaryView {
                name: ben.name.clone(),
                bank_name: ben.bank_name.clone(),
                account_number: masked(&ben.account_number),
                country: ben.country.clone(),
                currency: ben.currency,
                pix_key: ben.pix_key.as_deref().map(masked),
                pix_key_type: ben.pix_key_type.clone(),
                bank_code: ben.bank_code.clone(),
                branch_code: ben.branch_code.clone(),
                mobile_number: ben.mobile_number.as_deref().map(masked),
            },
            last_event: p.events.last().cloned(),
            events: p.events.clone(),
            failure_code: p.failure_code.clone(),
            failure_message: p.failure_message.clone(),
            rfi: p.rfi.clone(),
            created_at: p.created_at.clone(),
            updated_at: p.updated_at.clone(),
        }
    }
}
