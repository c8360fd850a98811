//! A remote facilitator over the standard HTTP API. Reads `isValid` / `success`, never just the
//! status: failures often come back as `200`. Connect failures mean nothing was settled; a timeout
//! on `/settle` is ambiguous.

use super::wire::{FacilitatorRequest, SettleResponse, SupportedResponse, VerifyResponse};
use super::{Facilitator, FacilitatorError, PaymentRequest, Settlement, SupportedKind};
use crate::payment::PaymentPayload;
use crate::verify::Rejection;
use alloy_primitives::{Address, B256};
use async_trait::async_trait;
use std::time::Duration;

pub struct RemoteFacilitator {
    base: String,
    bearer: Option<String>,
    http: reqwest::Client,
}

/// A facilitator's reason word as our rejection: the exact inverse of the wire reasons.
fn reason_to_rejection(reason: Option<&str>) -> Rejection {
    Rejection::from_reason(reason.unwrap_or_default())
}

impl RemoteFacilitator {
    pub fn new(
        base: &str,
        bearer: Option<String>,
        timeout: Duration,
    ) -> Result<Self, super::SetupError> {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(Duration::from_secs(5).min(timeout))
            .build()?;
        Ok(Self {
            base: base.trim_end_matches('/').to_string(),
            bearer,
            http,
        })
    }

    fn body(req: &PaymentRequest<'_>) -> FacilitatorRequest {
        let requirements = match req.payment {
            PaymentPayload::V1(_) => serde_json::to_value(req.requirements.to_v1()),
            PaymentPayload::V2(_) => serde_json::to_value(req.requirements.to_v2()),
        }
        .unwrap_or_default();
        FacilitatorRequest {
            x402_version: req.payment.x402_version(),
            payment_payload: req.payment.to_json(),
            payment_requirements: requirements,
        }
    }

    async fn post<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        body: &FacilitatorRequest,
        ambiguous_on_timeout: bool,
    ) -> Result<T, FacilitatorError> {
        let mut r = self.http.post(format!("{}{path}", self.base)).json(body);
        if let Some(t) = &self.bearer {
            r = r.bearer_auth(t);
        }
        let resp = r.send().await.map_err(|e| {
            if ambiguous_on_timeout && !e.is_connect() {
                FacilitatorError::Ambiguous(e.to_string())
            } else {
                FacilitatorError::Unavailable(e.to_string())
            }
        })?;
        let status = resp.status();
        let text = resp.text().await.map_err(|e| {
            if ambiguous_on_timeout {
                FacilitatorError::Ambiguous(e.to_string())
            } else {
                FacilitatorError::Unavailable(e.to_string())
            }
        })?;
        serde_json::from_str(&text).map_err(|_| {
            let msg = format!("{path} answered {status} with an unreadable body");
            if ambiguous_on_timeout && status.is_server_error() {
                FacilitatorError::Ambiguous(msg)
            } else {
                FacilitatorError::Unavailable(msg)
            }
        })
    }
}

/// The transaction of a settlement the facilitator sent and has not seen confirmed
/// (`settlement_pending` with its hash).
fn pending(s: &SettleResponse) -> Option<B256> {
    let pending = !s.success
        && s.error_reason.as_deref() == Some(crate::facilitator::wire::SETTLEMENT_PENDING);
    pending.then(|| s.transaction.parse().ok()).flatten()
}

#[async_trait]
impl Facilitator for RemoteFacilitator {
    async fn verify(&self, req: &PaymentRequest<'_>) -> Result<Address, FacilitatorError> {
        let v: VerifyResponse = self.post("/verify", &Self::body(req), false).await?;
        if v.is_valid {
            Ok(req.auth.from)
        } else {
            Err(FacilitatorError::Rejected(reason_to_rejection(
                v.invalid_reason.as_deref(),
            )))
        }
    }

    async fn settle(&self, req: &PaymentRequest<'_>) -> Result<Settlement, FacilitatorError> {
        let body = Self::body(req);
        let mut s: SettleResponse = self.post("/settle", &body, true).await?;
        if pending(&s).is_some() {
            // Sent, not confirmed in its time: asked once more with the same payment (x402's
            // servers do), which the facilitator answers from the transaction it sent.
            s = self.post("/settle", &body, true).await?;
        }
        if let Some(transaction) = pending(&s) {
            return Err(FacilitatorError::Pending {
                transaction,
                message: s.error_message.clone().unwrap_or_default(),
            });
        }
        if !s.success {
            return Err(FacilitatorError::Rejected(reason_to_rejection(
                s.error_reason.as_deref(),
            )));
        }
        let transaction: B256 = s.transaction.parse().map_err(|_| {
            FacilitatorError::Ambiguous("settle succeeded without a transaction hash".into())
        })?;
        Ok(Settlement {
            transaction,
            payer: req.auth.from,
        })
    }

    async fn supported(&self) -> Result<Vec<SupportedKind>, FacilitatorError> {
        let mut r = self.http.get(format!("{}/supported", self.base));
        if let Some(t) = &self.bearer {
            r = r.bearer_auth(t);
        }
        let resp = r
            .send()
            .await
            .map_err(|e| FacilitatorError::Unavailable(e.to_string()))?;
        let s: SupportedResponse = resp
            .json()
            .await
            .map_err(|e| FacilitatorError::Unavailable(e.to_string()))?;
        Ok(s.kinds
            .into_iter()
            .map(|k| SupportedKind {
                x402_version: k.x402_version,
                scheme: k.scheme,
                network: k.network,
            })
            .collect())
    }

    /// The facilitator's base URL without user, password, query or fragment.
    fn url(&self) -> String {
        public_url(&self.base)
    }
}

/// `url` without its credentials, query and fragment.
fn public_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.set_query(None);
            u.set_fragment(None);
            u.to_string().trim_end_matches('/').to_string()
        }
        Err(_) => String::new(),
    }
}

#[cfg(test)]
mod url_tests {
    #[test]
    fn the_public_url_keeps_no_credential() {
        assert_eq!(
            super::public_url("https://user:s3cret@facilitator.example/x402/?key=abc#f"),
            "https://facilitator.example/x402"
        );
        assert_eq!(
            super::public_url("http://127.0.0.1:4021"),
            "http://127.0.0.1:4021"
        );
        assert_eq!(super::public_url("not a url"), "");
    }
}
