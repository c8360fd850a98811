//! Requests for information: a provider holds a payout until it learns more (about the sender,
//! the payment's purpose, the beneficiary). The payout shows `COMPLIANCE_HOLD` with the RFI and
//! the JSON Schema of what is asked; the seller's answer is checked against that schema here
//! (every problem named, nothing sent), encrypted to the quote's key and sent to the provider,
//! then recorded as the RFI going to review through the same locked path as a webhook, so it
//! never races one. A repeat of an answer the provider already took is harmless (the provider
//! call is idempotent on the RFI), and an RFI no longer waiting is `409 RFI_NOT_OPEN`.

use crate::engine::PayoutEngine;
use crate::provider::{ProviderError, RfiAnswer};
use crate::webhook::{EventType, ProviderEvent};
use crate::Payout;
use paygate_domain::{ErrorCode, FieldProblem, StoreError};
use rust_decimal::Decimal;

#[derive(Debug, thiserror::Error)]
pub enum RfiError {
    #[error("no payment with this id in this corridor")]
    NotFound,
    #[error("this payout has no request for information waiting for an answer")]
    NotOpen,
    #[error("the answer does not meet the request for information")]
    Invalid(Vec<FieldProblem>),
    #[error("the payout provider refused: {0}")]
    Refused(String),
    #[error("the payout provider did not answer: {0}; try again")]
    Unanswered(String),
    #[error("no payout provider is configured on this server")]
    NoProvider,
    #[error("storage: {0}")]
    Store(#[from] StoreError),
}

impl RfiError {
    pub const fn code(&self) -> ErrorCode {
        match self {
            Self::NotFound => ErrorCode::NotFound,
            Self::NotOpen => ErrorCode::RfiNotOpen,
            Self::Invalid(_) => ErrorCode::ValidationError,
            Self::Refused(_) | Self::Unanswered(_) => ErrorCode::UpstreamError,
            Self::NoProvider => ErrorCode::Misconfigured,
            Self::Store(_) => ErrorCode::InternalError,
        }
    }
}

/// The problems of `answer` under `schema`, each named by its field (`answers.FIELD`); the
/// values are never repeated in the words (they may be personal data).
pub fn problems(schema: &serde_json::Value, answer: &serde_json::Value) -> Vec<FieldProblem> {
    let Ok(validator) = jsonschema::validator_for(schema) else {
        return vec![FieldProblem {
            field: "answers".into(),
            problem: "the provider's schema for this request cannot be read".into(),
        }];
    };
    validator
        .iter_errors(answer)
        .map(|e| {
            let at = match e.kind() {
                jsonschema::error::ValidationErrorKind::Required { property } => {
                    format!("/{}", property.as_str().unwrap_or_default())
                }
                _ => e.instance_path().to_string(),
            };
            let field = format!("answers{}", at.replace('/', "."));
            let problem = match e.kind() {
                jsonschema::error::ValidationErrorKind::Required { .. } => "is required".into(),
                _ => e.masked().to_string(),
            };
            FieldProblem { field, problem }
        })
        .take(50)
        .collect()
}

impl PayoutEngine {
    /// Answers payout `payout_id`'s open RFI (the payout must be `org_id`'s and in
    /// `corridor_id`).
    pub async fn answer_rfi(
        &self,
        org_id: &str,
        corridor_id: &str,
        payout_id: &str,
        answer: &serde_json::Value,
    ) -> Result<Payout, RfiError> {
        let payout = match self.store.get_payout(payout_id).await? {
            Some(p) if p.org_id == org_id && p.corridor_id == corridor_id => p,
            _ => return Err(RfiError::NotFound),
        };
        let (Some(rfi), Some(payment_id)) = (&payout.rfi, &payout.cpn_payment_id) else {
            return Err(RfiError::NotOpen);
        };
        if !rfi.open() || payout.status.is_terminal() {
            return Err(RfiError::NotOpen);
        }
        let found = problems(&rfi.schema, answer);
        if !found.is_empty() {
            return Err(RfiError::Invalid(found));
        }
        let provider = self.provider().map_err(|_| RfiError::NoProvider)?;
        let sent = provider
            .submit_rfi(&RfiAnswer {
                payment_id,
                rfi_id: &rfi.id,
                encryption_key: payout.encryption_key.as_deref(),
                answer,
            })
            .await;
        match sent {
            Ok(()) => {}
            Err(ProviderError::Rejected(why)) => return Err(RfiError::Refused(why)),
            Err(ProviderError::Unavailable(why)) => return Err(RfiError::Unanswered(why)),
        }
        tracing::info!(payout = %payout.id, rfi = %rfi.id, "RFI answered");
        let now = paygate_domain::now_rfc3339();
        let event = ProviderEvent {
            event_type: EventType::Progress,
            name: Some("paygate.rfi.answered".into()),
            notification_id: Some(format!("paygate-rfi-answer:{}", rfi.id)),
            payment_id: payment_id.clone(),
            provider_status: "IN_REVIEW".into(),
            amount: Decimal::ZERO,
            currency: String::new(),
            update_date: now.clone(),
            failure: None,
            returned: None,
            rfi: Some(crate::webhook::EventRfi {
                id: rfi.id.clone(),
                status: "IN_REVIEW".into(),
                level: rfi.level.clone(),
                schema: None,
                expires_at: None,
            }),
        };
        self.apply_event(&event, b"").await?;
        Ok(self.store.get_payout(payout_id).await?.unwrap_or(payout))
    }
}

impl PayoutEngine {
    /// Reads payout `payout_id`'s status from the provider and applies it as a webhook would
    /// be (the same lock, the same rules: never backwards, a repeat a duplicate): what recovers
    /// a payout whose notifications were lost. A payout the provider has not accepted yet, or
    /// one already final, is returned as it is.
    pub async fn refresh(
        &self,
        org_id: &str,
        corridor_id: &str,
        payout_id: &str,
    ) -> Result<Payout, RfiError> {
        let payout = match self.store.get_payout(payout_id).await? {
            Some(p) if p.org_id == org_id && p.corridor_id == corridor_id => p,
            _ => return Err(RfiError::NotFound),
        };
        let Some(payment_id) = payout.cpn_payment_id.clone() else {
            return Ok(payout);
        };
        if payout.status.is_terminal() {
            return Ok(payout);
        }
        let provider = self.provider().map_err(|_| RfiError::NoProvider)?;
        match provider.payment_status(&payment_id).await {
            Ok(Some((event, raw))) => {
                self.apply_event(&event, &raw).await?;
            }
            Ok(None) => {}
            Err(ProviderError::Rejected(why)) => return Err(RfiError::Refused(why)),
            Err(ProviderError::Unavailable(why)) => return Err(RfiError::Unanswered(why)),
        }
        Ok(self.store.get_payout(payout_id).await?.unwrap_or(payout))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn problems_name_fields_not_values() {
        let schema = json!({
            "type": "object",
            "properties": {
                "ORIGINATOR_DOB": {"type": "string", "pattern": "^\\d{4}-\\d{2}-\\d{2}$"},
                "SOURCE_OF_FUNDS": {"type": "string", "minLength": 1}
            },
            "required": ["ORIGINATOR_DOB", "SOURCE_OF_FUNDS"],
            "additionalProperties": false
        });
        assert!(problems(
            &schema,
            &json!({"ORIGINATOR_DOB": "1990-01-31", "SOURCE_OF_FUNDS": "sales"})
        )
        .is_empty());
        let p = problems(&schema, &json!({"ORIGINATOR_DOB": "31/01/1990-secret"}));
        let fields: Vec<_> = p.iter().map(|p| p.field.as_str()).collect();
        assert!(fields.contains(&"answers.ORIGINATOR_DOB"), "{p:?}");
        assert!(fields.contains(&"answers.SOURCE_OF_FUNDS"), "{p:?}");
        assert!(p.iter().all(|p| !p.problem.contains("secret")), "{p:?}");
        assert!(!problems(&schema, &json!("text")).is_empty());
        assert!(!problems(&json!({"type": 12}), &json!({})).is_empty());
    }
}
