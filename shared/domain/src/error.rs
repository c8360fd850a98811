//! Error codes and the one place where the JSON error body `{code, message, requestId}` is built.

use serde::Serialize;

/// Every error code the service answers with. `as_str` is the wire spelling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    BadRequest,
    ValidationError,
    Unauthorized,
    Forbidden,
    NotFound,
    RouteNotFound,
    MethodNotAllowed,
    DuplicatePath,
    DuplicateRequest,
    AlreadyExists,
    PayloadTooLarge,
    /// A request body declared as something other than JSON.
    UnsupportedMediaType,
    OrgSuspended,
    Misconfigured,
    InvalidPayment,
    UpstreamTimeout,
    UpstreamUnavailable,
    NonceReplay,
    PaymentRejected,
    FacilitatorUnavailable,
    SettlementPending,
    PlanLimitExceeded,
    HeadersTooLarge,
    TooManyRequests,
    InvalidCurrency,
    InvalidAmount,
    InvalidBeneficiary,
    InsufficientFunds,
    InvalidQuote,
    QuoteExpired,
    QuoteAlreadyUsed,
    MissingIdempotencyKey,
    CorridorNotActive,
    LastActiveKey,
    PaymentIdConflict,
    /// A payout's request for information is not waiting for an answer.
    RfiNotOpen,
    /// A sign-in (`SIGN-IN-WITH-X`) that opens no access window: pay, or sign in again.
    SignInRefused,
    /// A Permit2 payment whose payer has not approved Permit2 for the token: approve once,
    /// then pay again (x402's `412` with `permit2_allowance_required`).
    Permit2ApprovalRequired,
    /// A refund of a payment that cannot be refunded (not a captured `auth-capture` payment,
    /// or refunded in full).
    NotRefundable,
    /// A refund after the payment's refund deadline (or of a route with refunds off).
    RefundWindowClosed,
    /// A refund above what was captured and not refunded (the escrow's `RefundExceedsCapture`).
    RefundExceedsCapture,
    /// A refund the seller's wallet (the payment's receiver) cannot fund: it has not approved
    /// the receiver refund collector for the amount, or holds less.
    RefundNotCovered,
    UpstreamError,
    StoreUnavailable,
    InternalError,
}

impl ErrorCode {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::BadRequest => "BAD_REQUEST",
            Self::ValidationError => "VALIDATION_ERROR",
            Self::Unauthorized => "UNAUTHORIZED",
            Self::Forbidden => "FORBIDDEN",
            Self::NotFound => "NOT_FOUND",
            Self::RouteNotFound => "ROUTE_NOT_FOUND",
            Self::MethodNotAllowed => "METHOD_NOT_ALLOWED",
            Self::DuplicatePath => "DUPLICATE_PATH",
            Self::DuplicateRequest => "DUPLICATE_REQUEST",
            Self::AlreadyExists => "ALREADY_EXISTS",
            Self::PayloadTooLarge => "PAYLOAD_TOO_LARGE",
            Self::UnsupportedMediaType => "UNSUPPORTED_MEDIA_TYPE",
            Self::OrgSuspended => "ORG_SUSPENDED",
            Self::Misconfigured => "MISCONFIGURED",
            Self::InvalidPayment => "INVALID_PAYMENT",
            Self::UpstreamTimeout => "UPSTREAM_TIMEOUT",
            Self::UpstreamUnavailable => "UPSTREAM_UNAVAILABLE",
            Self::NonceReplay => "NONCE_REPLAY",
            Self::PaymentRejected => "PAYMENT_REJECTED",
            Self::FacilitatorUnavailable => "FACILITATOR_UNAVAILABLE",
            Self::SettlementPending => "SETTLEMENT_PENDING",
            Self::PlanLimitExceeded => "PLAN_LIMIT_EXCEEDED",
            Self::HeadersTooLarge => "HEADERS_TOO_LARGE",
            Self::TooManyRequests => "TOO_MANY_REQUESTS",
            Self::InvalidCurrency => "INVALID_CURRENCY",
            Self::InvalidAmount => "INVALID_AMOUNT",
            Self::InsufficientFunds => "INSUFFICIENT_FUNDS",
            Self::InvalidBeneficiary => "INVALID_BENEFICIARY",
            Self::InvalidQuote => "INVALID_QUOTE",
            Self::QuoteExpired => "QUOTE_EXPIRED",
            Self::QuoteAlreadyUsed => "QUOTE_ALREADY_USED",
            Self::MissingIdempotencyKey => "MISSING_IDEMPOTENCY_KEY",
            Self::CorridorNotActive => "CORRIDOR_NOT_ACTIVE",
            Self::LastActiveKey => "LAST_ACTIVE_KEY",
            Self::PaymentIdConflict => "PAYMENT_ID_CONFLICT",
            Self::RfiNotOpen => "RFI_NOT_OPEN",
            Self::SignInRefused => "SIGN_IN_REFUSED",
            Self::Permit2ApprovalRequired => "PERMIT2_APPROVAL_REQUIRED",
            Self::NotRefundable => "NOT_REFUNDABLE",
            Self::RefundWindowClosed => "REFUND_WINDOW_CLOSED",
            Self::RefundExceedsCapture => "REFUND_EXCEEDS_CAPTURE",
            Self::RefundNotCovered => "REFUND_NOT_COVERED",
            Self::UpstreamError => "UPSTREAM_ERROR",
            Self::StoreUnavailable => "STORE_UNAVAILABLE",
            Self::InternalError => "INTERNAL_ERROR",
        }
    }

    /// The HTTP status this code is answered with.
    pub const fn status(self) -> u16 {
        match self {
            Self::BadRequest
            | Self::ValidationError
            | Self::InvalidPayment
            | Self::InvalidCurrency
            | Self::InvalidAmount
            | Self::InvalidBeneficiary
            | Self::InvalidQuote
            | Self::QuoteExpired
            | Self::MissingIdempotencyKey
            | Self::RefundExceedsCapture => 400,
            Self::Unauthorized => 401,
            Self::NonceReplay
            | Self::PaymentRejected
            | Self::PlanLimitExceeded
            | Self::SignInRefused => 402,
            Self::Forbidden | Self::OrgSuspended => 403,
            Self::NotFound | Self::RouteNotFound => 404,
            Self::MethodNotAllowed => 405,
            Self::DuplicatePath
            | Self::DuplicateRequest
            | Self::AlreadyExists
            | Self::QuoteAlreadyUsed
            | Self::CorridorNotActive
            | Self::LastActiveKey
            | Self::InsufficientFunds
            | Self::PaymentIdConflict
            | Self::RfiNotOpen
            | Self::NotRefundable
            | Self::RefundNotCovered
            | Self::RefundWindowClosed => 409,
            Self::Permit2ApprovalRequired => 412,
            Self::PayloadTooLarge => 413,
            Self::UnsupportedMediaType => 415,
            Self::TooManyRequests => 429,
            Self::HeadersTooLarge => 431,
            Self::InternalError => 500,
            Self::UpstreamError => 502,
            Self::Misconfigured
            | Self::UpstreamUnavailable
            | Self::FacilitatorUnavailable
            | Self::StoreUnavailable => 503,
            Self::UpstreamTimeout | Self::SettlementPending => 504,
        }
    }

    /// The code used when a response with this status was produced without one of ours
    /// (framework rejections, proxy failures).
    pub const fn for_status(status: u16) -> Self {
        match status {
            401 => Self::Unauthorized,
            403 => Self::Forbidden,
            404 => Self::NotFound,
            405 => Self::MethodNotAllowed,
            409 => Self::DuplicateRequest,
            413 => Self::PayloadTooLarge,
            415 => Self::UnsupportedMediaType,
            429 => Self::TooManyRequests,
            431 => Self::HeadersTooLarge,
            502 | 503 => Self::UpstreamUnavailable,
            504 => Self::UpstreamTimeout,
            400..=499 => Self::BadRequest,
            _ => Self::InternalError,
        }
    }
}

/// One problem with one input field, listed in `details` of a `VALIDATION_ERROR`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct FieldProblem {
    pub field: String,
    pub problem: String,
}

impl FieldProblem {
    pub fn new(field: impl Into<String>, problem: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            problem: problem.into(),
        }
    }
}

// Serialized through `ErrorBody::to_json`, or flattened into a typed body of its own (the x402
// refusals' `RefusedPaymentBody`).
/// The JSON error body of every non-2xx answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = Error)]
#[serde(rename_all = "camelCase")]
pub struct ErrorBody<'a> {
    /// Machine-readable code, e.g. `VALIDATION_ERROR`, `NOT_FOUND`.
    pub code: &'static str,
    pub message: &'a str,
    /// Also sent as the `x-request-id` response header.
    pub request_id: &'a str,
    /// One entry per field in error (validation errors only).
    #[serde(skip_serializing_if = "<[FieldProblem]>::is_empty")]
    #[schema(required = false)]
    pub details: &'a [FieldProblem],
}

impl<'a> ErrorBody<'a> {
    pub fn new(code: ErrorCode, message: &'a str, request_id: &'a str) -> Self {
        Self {
            code: code.as_str(),
            message,
            request_id,
            details: &[],
        }
    }

    pub fn with_details(mut self, details: &'a [FieldProblem]) -> Self {
        self.details = details;
        self
    }

    pub fn to_json(&self) -> Vec<u8> {
        // Serialising plain strings into a Vec cannot fail.
        serde_json::to_vec(self).unwrap_or_else(|_| b"{}".to_vec())
    }
}

/// Why a store operation failed; the business outcomes (a path or slug taken, a key used,
/// a concurrent change) are variants callers answer, `Backend` is the storage itself.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Another route of the organisation has this path.
    #[error("path already used by another route")]
    DuplicatePath,
    /// An organisation with this slug exists.
    #[error("slug already taken")]
    DuplicateSlug,
    /// The idempotency key was already used; the stored record is returned.
    #[error("idempotency key already used")]
    IdempotencyKeyUsed(Box<crate::model::IdempotencyRecord>),
    /// The record changed since it was read (optimistic concurrency); retry.
    #[error("record changed concurrently")]
    Conflict,
    /// The record does not exist.
    #[error("not found")]
    NotFound,
    /// The storage cannot be reached now (a database restarting): worth retrying.
    #[error("storage unreachable: {0}")]
    Unavailable(String),
    #[error("storage: {0}")]
    Backend(String),
}

pub type StoreResult<T> = Result<T, StoreError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_has_code_message_request_id() {
        let v: serde_json::Value = serde_json::from_slice(
            &ErrorBody::new(ErrorCode::RouteNotFound, "no \"route\"", "req_1").to_json(),
        )
        .unwrap();
        assert_eq!(v["code"], "ROUTE_NOT_FOUND");
        assert_eq!(v["message"], "no \"route\"");
        assert_eq!(v["requestId"], "req_1");
        assert!(v.get("details").is_none());
    }

    #[test]
    fn details_are_listed_when_present() {
        let d = [FieldProblem::new("priceUSD", "must be greater than 0")];
        let v: serde_json::Value = serde_json::from_slice(
            &ErrorBody::new(ErrorCode::ValidationError, "priceUSD: bad", "r")
                .with_details(&d)
                .to_json(),
        )
        .unwrap();
        assert_eq!(v["details"][0]["field"], "priceUSD");
    }
}
