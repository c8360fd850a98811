//! The Circle Payments Network adapter: paygate's payout provider trait over CPN's OFI API
//! (wire shapes in [`crate::cpn`]), and the JWE encryption CPN asks for (through `picky`'s JOSE).
//!
//! - A quote asks for a source-based `VERSION_2` quote of the USDC paygate will send and takes
//!   the first (best) option: its exchange rate, its total fee in USDC (the gas fixed in it),
//!   its expiry, its funding address and the key payment data is encrypted to.
//! - A payment is created from that quote with an `idempotencyKey` derived from paygate's payout
//!   id (a retry after a crash or a timeout is the same request, answered with the same
//!   payment), the beneficiary's account data and the travel-rule data each a JWE to the quote's
//!   key, and the on-chain funding already made.
//! - An RFI answer is a JWE of the answer object to the same key, idempotent on the RFI.

use crate::cpn::{self, AmountWire, CurrencyWire, FieldWire};
use crate::provider::{
    Api, PayoutProvider, PayoutRequest, ProviderError, ProviderPayout, ProviderQuote, RfiAnswer,
};
use crate::{Beneficiary, Currency};
use async_trait::async_trait;
use base64::Engine as _;
use paygate_x402::money::UsdcAmount;
use picky::jose::jwe::{Jwe, JweAlg, JweEnc};
use picky::jose::jwk::{Jwa, Jwk, JwkKeyType};
use picky::key::{EcCurve, PrivateKey, PublicKey};
use sha2::Digest as _;
use std::time::Duration;

/// The payment method paygate asks for per currency (the instant rail where there is one).
pub fn payment_method(currency: Currency) -> &'static str {
    match currency {
        Currency::Brl => "PIX",
        Currency::Mxn => "SPEI",
        Currency::Ngn | Currency::Kes | Currency::Zar => "BANK-TRANSFER",
    }
}

/// A UUID (version 4 in form) fixed by `seed`: the same request sent again carries the same
/// `idempotencyKey`.
pub fn idempotency_key(seed: &str) -> String {
    let digest = sha2::Sha256::digest(seed.as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_random_bytes(bytes)
        .into_uuid()
        .hyphenated()
        .to_string()
}

#[derive(Debug, thiserror::Error)]
pub enum JweError {
    #[error("the provider's encryption key is not a usable EC key: {0}")]
    Key(String),
    #[error("encryption failed: {0}")]
    Encrypt(String),
    #[error("not a JWE this key opens: {0}")]
    Decrypt(String),
}

/// An EC public key from its JWK (JSON), and the JWK's `kid`.
fn public_key(json: &str) -> Result<(PublicKey, Option<String>), JweError> {
    let jwk = Jwk::from_json(json).map_err(|e| JweError::Key(e.to_string()))?;
    if !matches!(jwk.key, JwkKeyType::Ec(_)) {
        return Err(JweError::Key("kty must be EC".into()));
    }
    let key = jwk
        .to_public_key()
        .map_err(|e| JweError::Key(e.to_string()))?;
    Ok((key, jwk.kid))
}

/// Checks that `json` is a public key data can be encrypted to.
pub fn check_key(json: &str) -> Result<(), JweError> {
    public_key(json).map(|_| ())
}

/// Encrypts `payload` to the public key `json` (a JWK): compact JWE, ECDH-ES+A128KW, A128GCM.
pub fn encrypt(json: &str, payload: &[u8]) -> Result<String, JweError> {
    let (key, kid) = public_key(json)?;
    let mut jwe = Jwe::new(
        JweAlg::EcdhEsAesKeyWrap128,
        JweEnc::Aes128Gcm,
        payload.to_vec(),
    );
    // The parties, said (RFC 7518 4.6.1.2): picky writes absent ones as `null`, which other
    // JOSE implementations refuse; the producer is paygate, the recipient the key's id.
    let b64 = |v: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
    jwe.header.apu = Some(b64("paygate"));
    jwe.header.apv = Some(b64(kid.as_deref().unwrap_or("recipient")));
    jwe.header.kid = kid;
    jwe.encode(&key)
        .map_err(|e| JweError::Encrypt(e.to_string()))
}

/// Opens a compact JWE with the private key `pem` (PKCS#8; what the provider, or its
/// simulator, does). Only ECDH-ES+A128KW with A128GCM is taken.
pub fn decrypt(pem: &str, jwe: &str) -> Result<Vec<u8>, JweError> {
    let key = PrivateKey::from_pem_str(pem).map_err(|e| JweError::Key(e.to_string()))?;
    let opened = Jwe::decode(jwe, &key).map_err(|e| JweError::Decrypt(e.to_string()))?;
    if opened.header.alg != JweAlg::EcdhEsAesKeyWrap128 || opened.header.enc != JweEnc::Aes128Gcm {
        return Err(JweError::Decrypt(
            "must be ECDH-ES+A128KW with A128GCM".into(),
        ));
    }
    Ok(opened.payload)
}

/// A new P-256 key pair for encryption: (private key PEM, public JWK JSON named `kid`).
pub fn new_key_pair(kid: &str) -> Result<(String, String), JweError> {
    let private =
        PrivateKey::generate_ec(EcCurve::NistP256).map_err(|e| JweError::Key(e.to_string()))?;
    let public = private
        .to_public_key()
        .map_err(|e| JweError::Key(e.to_string()))?;
    let mut jwk = Jwk::from_public_key(&public).map_err(|e| JweError::Key(e.to_string()))?;
    jwk.kid = Some(kid.to_string());
    jwk.alg = Some(Jwa::CEKAlg(JweAlg::EcdhEsAesKeyWrap128));
    let pem = private
        .to_pem_str()
        .map_err(|e| JweError::Key(e.to_string()))?;
    let json = jwk.to_json().map_err(|e| JweError::Key(e.to_string()))?;
    Ok((pem, json))
}

/// The beneficiary's account data as paygate names it for CPN (kept here, with the wire
/// types, to be corrected in one place): the recipient's name, bank and country always; then
/// the rail's identifier: BRL the PIX key (`PIX_KEY`, `PIX_KEY_TYPE`, and a CPF or CNPJ key also
/// as `RECIPIENT_ID_NUMBER`), MXN the `CLABE`, NGN `ACCOUNT_NUMBER` and `BANK_CODE`, KES the
/// `MOBILE_NUMBER` or `ACCOUNT_NUMBER`, ZAR `ACCOUNT_NUMBER` and `BRANCH_CODE`.
pub fn beneficiary_fields(b: &Beneficiary) -> Vec<FieldWire> {
    let mut out = vec![
        field("RECIPIENT_LEGAL_NAME", &b.name),
        field("BANK_COUNTRY", &b.country),
    ];
    if !b.bank_name.is_empty() {
        out.push(field("BANK_NAME", &b.bank_name));
    }
    let account = match b.currency {
        Currency::Mxn => "CLABE",
        _ => "ACCOUNT_NUMBER",
    };
    if !b.account_number.is_empty() {
        out.push(field(account, &b.account_number));
    }
    if let (Some(key), Some(kind)) = (&b.pix_key, &b.pix_key_type) {
        out.push(field("PIX_KEY", key));
        out.push(field("PIX_KEY_TYPE", kind));
        if matches!(kind.as_str(), "CPF" | "CNPJ") {
            out.push(field("RECIPIENT_ID_NUMBER", key));
        }
    }
    for (name, v) in [
        ("BANK_CODE", &b.bank_code),
        ("BRANCH_CODE", &b.branch_code),
        ("MOBILE_NUMBER", &b.mobile_number),
    ] {
        if let Some(v) = v {
            out.push(field(name, v));
        }
    }
    out
}

/// The travel rule's originator: the organisation paying, from its payout wallet.
pub fn travel_rule_fields(originator: &str, wallet: &str) -> Vec<FieldWire> {
    vec![
        field("ORIGINATOR_NAME", originator),
        field("ORIGINATOR_WALLET_ADDRESS", wallet),
    ]
}

fn field(name: &str, value: &str) -> FieldWire {
    FieldWire {
        name: name.into(),
        value: value.into(),
    }
}

/// The CPN adapter.
pub struct CpnProvider {
    api: Api,
    blockchain: String,
}

impl CpnProvider {
    /// `blockchain`: CPN's name of the chain payouts are funded on (e.g. `ETH-SEPOLIA`).
    pub fn new(base: &str, api_key: Option<String>, blockchain: &str, timeout: Duration) -> Self {
        Self {
            api: Api::new(base, api_key, timeout),
            blockchain: blockchain.into(),
        }
    }

    fn encrypt_json<T: serde::Serialize>(key: &str, v: &T) -> Result<String, ProviderError> {
        let body = serde_json::to_vec(v).map_err(|e| ProviderError::Rejected(e.to_string()))?;
        encrypt(key, &body).map_err(|e| ProviderError::Rejected(e.to_string()))
    }
}

use crate::provider::bad_quote as bad;

#[async_trait]
impl PayoutProvider for CpnProvider {
    async fn quote(
        &self,
        currency: Currency,
        amount: UsdcAmount,
    ) -> Result<ProviderQuote, ProviderError> {
        let req = cpn::QuoteRequestWire {
            idempotency_key: uuid::Uuid::new_v4().hyphenated().to_string(),
            payment_method_type: payment_method(currency).into(),
            source_amount: AmountWire {
                amount: crate::money::usdc_string(amount),
                currency: "USDC".into(),
            },
            destination_amount: CurrencyWire {
                currency: currency.code().into(),
            },
            destination_country: currency.country().into(),
            blockchain: self.blockchain.clone(),
            sender_type: "BUSINESS".into(),
            recipient_type: "INDIVIDUAL".into(),
            transaction_version: "VERSION_2".into(),
        };
        let rb = self
            .api
            .request(reqwest::Method::POST, cpn::QUOTES_PATH)
            .json(&req);
        let answer: cpn::QuotesAnswer = Api::parse(&Api::call(rb).await?)?;
        let q = answer
            .data
            .into_iter()
            .find(|q| q.destination_amount.currency == currency.code())
            .ok_or_else(|| bad("option list (none in the currency asked)"))?;
        let source =
            crate::money::parse_amount(&q.source_amount.amount).map_err(|_| bad("sourceAmount"))?;
        if source != amount {
            return Err(bad("sourceAmount (not the amount asked)"));
        }
        if !matches!(q.fees.total_amount.currency.as_str(), "USDC" | "USD") {
            return Err(bad("fee currency"));
        }
        let key = q.certificate.jwk.to_string();
        check_key(&key).map_err(|_| bad("certificate.jwk"))?;
        let quote = ProviderQuote::read(
            q.id,
            ("exchangeRate", &q.exchange_rate.rate),
            ("fees.totalAmount", &q.fees.total_amount.amount),
            ("quoteExpireDate", &q.quote_expire_date),
            q.funding_address.as_deref(),
        )?;
        Ok(ProviderQuote {
            encryption_key: Some(key),
            ..quote
        })
    }

    async fn create_payout(&self, req: &PayoutRequest) -> Result<ProviderPayout, ProviderError> {
        let key = req.encryption_key.as_deref().ok_or_else(|| {
            ProviderError::Rejected("the quote carries no key to encrypt the beneficiary to".into())
        })?;
        let wallet = req.funding.as_ref().map(|f| f.from.as_str()).unwrap_or("");
        let body = cpn::PaymentRequestWire {
            idempotency_key: idempotency_key(&format!("paygate/cpn/payment/{}", req.reference)),
            quote_id: req.quote_id.clone(),
            customer_ref_id: req.reference.clone(),
            sender_address: wallet.into(),
            blockchain: self.blockchain.clone(),
            beneficiary_account_data: Self::encrypt_json(
                key,
                &beneficiary_fields(&req.beneficiary),
            )?,
            travel_rule_data: Self::encrypt_json(
                key,
                &travel_rule_fields(&req.originator, wallet),
            )?,
            reason_for_payment: "PMT001".into(),
            funding: req.funding.clone(),
        };
        let rb = self
            .api
            .request(reqwest::Method::POST, cpn::PAYMENTS_PATH)
            .json(&body);
        let answer: cpn::PaymentAnswer = Api::parse(&Api::call(rb).await?)?;
        let p = answer.data;
        if p.id.is_empty()
            || p.customer_ref_id
                .as_deref()
                .is_some_and(|r| r != req.reference)
        {
            return Err(ProviderError::Unavailable(
                "provider answered for another payout".into(),
            ));
        }
        if p.status == "FAILED" {
            let why = p.failure_reason.or(p.failure_code).unwrap_or_default();
            return Err(ProviderError::Rejected(format!(
                "payment failed at creation {why}"
            )));
        }
        Ok(ProviderPayout {
            id: p.id,
            reference: req.reference.clone(),
            status: p.status,
        })
    }

    async fn payment_status(
        &self,
        payment_id: &str,
    ) -> Result<Option<(crate::webhook::ProviderEvent, Vec<u8>)>, ProviderError> {
        if !cpn::is_uuid(payment_id) {
            return Err(ProviderError::Rejected("not a CPN payment id".into()));
        }
        let path = format!("{}/{payment_id}", cpn::PAYMENTS_PATH);
        let rb = self.api.request(reqwest::Method::GET, &path);
        let answer: cpn::PaymentAnswer = Api::parse(&Api::call(rb).await?)?;
        if answer.data.id != payment_id {
            return Err(ProviderError::Unavailable(
                "provider answered for another payment".into(),
            ));
        }
        let Some(raw) = cpn::status_notification(&answer.data, &paygate_domain::now_rfc3339())
        else {
            return Ok(None);
        };
        let event = cpn::parse_notification(&raw)
            .map_err(|e| ProviderError::Unavailable(format!("unreadable payment: {e}")))?;
        Ok(Some((event, raw)))
    }

    async fn submit_rfi(&self, rfi: &RfiAnswer<'_>) -> Result<(), ProviderError> {
        let key = rfi.encryption_key.ok_or_else(|| {
            ProviderError::Rejected("the payout carries no key to encrypt the answer to".into())
        })?;
        let body = cpn::RfiSubmitWire {
            idempotency_key: idempotency_key(&format!("paygate/cpn/rfi/{}", rfi.rfi_id)),
            encrypted_data: Self::encrypt_json(key, rfi.answer)?,
        };
        let rb = self
            .api
            .request(
                reqwest::Method::POST,
                &cpn::rfi_submit_path(rfi.payment_id, rfi.rfi_id),
            )
            .json(&body);
        Api::call(rb).await.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jwe_round_trip_and_wrong_key() {
        let (private, public) = new_key_pair("k1").unwrap();
        check_key(&public).unwrap();
        let jwe = encrypt(&public, b"{\"a\":1}").unwrap();
        assert_eq!(jwe.split('.').count(), 5, "compact JWE");
        let header: serde_json::Value = serde_json::from_slice(
            &base64::Engine::decode(
                &base64::engine::general_purpose::URL_SAFE_NO_PAD,
                jwe.split('.').next().unwrap(),
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(header["alg"], "ECDH-ES+A128KW");
        assert_eq!(header["enc"], "A128GCM");
        assert_eq!(header["kid"], "k1");
        assert_eq!(decrypt(&private, &jwe).unwrap(), b"{\"a\":1}");
        let (other, _) = new_key_pair("k2").unwrap();
        assert!(decrypt(&other, &jwe).is_err());
        assert!(check_key("{\"kty\":\"oct\",\"k\":\"AAAA\"}").is_err());
        assert!(check_key("not json").is_err());
    }

    #[test]
    fn idempotency_keys_are_fixed_uuids() {
        let a = idempotency_key("paygate/cpn/payment/po_1");
        assert_eq!(a, idempotency_key("paygate/cpn/payment/po_1"));
        assert_ne!(a, idempotency_key("paygate/cpn/payment/po_2"));
        let u = uuid::Uuid::parse_str(&a).unwrap();
        assert_eq!(u.get_version_num(), 4);
    }

    #[test]
    fn beneficiary_fields_per_rail() {
        let mut b = Beneficiary::bank_account("Ana", "", "", Currency::Brl);
        b.pix_key = Some("52998224725".into());
        b.pix_key_type = Some("CPF".into());
        let names: Vec<_> = beneficiary_fields(&b).into_iter().map(|f| f.name).collect();
        assert_eq!(
            names,
            [
                "RECIPIENT_LEGAL_NAME",
                "BANK_COUNTRY",
                "PIX_KEY",
                "PIX_KEY_TYPE",
                "RECIPIENT_ID_NUMBER"
            ]
        );
        let b = Beneficiary::bank_account("Luis", "BBVA", "002010077777777771", Currency::Mxn);
        let f = beneficiary_fields(&b);
        assert!(f.contains(&field("CLABE", "002010077777777771")));
        assert!(f.contains(&field("BANK_NAME", "BBVA")));
    }
}
