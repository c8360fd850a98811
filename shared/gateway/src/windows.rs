//! Access windows (route `accessWindowSeconds`, issue 31): a settled `exact` payment opens its
//! payer's window on the route; within it the payer is served by signing in (x402's
//! `sign-in-with-x`, [`paygate_x402::siwx`]) instead of paying again, each call counted.
//!
//! A sign-in is checked in this order, nothing written before the last step: the header's
//! fields against the configured public origin, the route's URI and chain, and the clock; the
//! signature (the address's key, EIP-191; else the chain, EIP-1271, for a smart wallet); then
//! one store step spends the nonce and counts the call, only if the window still serves.
//! A window call takes no plan slot and settles nothing; its receipt says it was a window's.

use crate::route_entry::RouteEntry;
use paygate_domain::model::GatewayPayment;
use paygate_domain::window::{AccessWindow, WindowUse};
use paygate_store::Store;
use paygate_x402::facilitator::ChainCalls;
use paygate_x402::siwx::{self, Origin, SignIn, SignInError, Signer};
use paygate_x402::PaymentRequirements;
use std::sync::Arc;
use time::OffsetDateTime;

/// Why a sign-in did not open the route: the caller gets the route's `402` with the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WindowRefusal {
    #[error("{0}")]
    SignIn(#[from] SignInError),
    #[error("this address has not paid for this route: pay once to open its access window")]
    NotPaid,
    #[error("the access window of this address ended: pay again to open a new one")]
    Ended,
    #[error("the calls of this address's access window are used up: pay again to open a new one")]
    CallsUsed,
    /// The store could not decide (nothing was spent).
    #[error("access windows cannot be checked now; nothing was charged, retry later")]
    Unavailable,
}

impl WindowRefusal {
    /// The `error` a `402` carries for it.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::SignIn(e) => e.reason(),
            Self::NotPaid => "access_window_not_paid",
            Self::Ended => "access_window_ended",
            Self::CallsUsed => "access_window_calls_used",
            Self::Unavailable => "access_window_unavailable",
        }
    }
}

/// The access windows of this deployment's routes.
pub struct Windows {
    store: Arc<dyn Store>,
    /// Asked for a smart wallet's signature (EIP-1271); `None`: only keys' signatures pass.
    chain: Option<Arc<dyn ChainCalls>>,
    origin: Origin,
}

impl Windows {
    pub fn new(store: Arc<dyn Store>, chain: Option<Arc<dyn ChainCalls>>, origin: Origin) -> Self {
        Self {
            store,
            chain,
            origin,
        }
    }

    /// A fresh `sign-in-with-x` declaration (nonce, time) for a `402` of the route `req` pays.
    pub fn declaration(&self, req: &PaymentRequirements) -> serde_json::Value {
        siwx::declaration(
            &self.origin,
            &req.resource,
            &req.network.caip2,
            OffsetDateTime::now_utc(),
        )
    }

    /// Serves one call of `org_id`'s route `route_id` (paid as `req` says) through the window of
    /// the sign-in in `header`: the window after the call was counted.
    pub async fn sign_in(
        &self,
        org_id: &str,
        route_id: &str,
        req: &PaymentRequirements,
        header: &[u8],
    ) -> Result<AccessWindow, WindowRefusal> {
        let proof = SignIn::from_header(header)?;
        let checked = proof.check(
            &self.origin,
            &req.resource,
            &req.network.caip2,
            OffsetDateTime::now_utc(),
        )?;
        let chain_id = req.network.config.chain_id;
        match proof.signer(&checked)? {
            Signer::Key(_) => {}
            Signer::AskChain {
                address,
                hash,
                signature,
            } => self.ask_chain(chain_id, address, hash, signature).await?,
        }
        let payer = format!("{:#x}", checked.address);
        let used = self
            .store
            .use_window(
                org_id,
                route_id,
                &payer,
                &proof.nonce,
                checked.nonce_until,
                paygate_domain::unix_now(),
            )
            .await;
        match used {
            Ok(WindowUse::Granted(w)) => Ok(w),
            Ok(WindowUse::NotPaid) => Err(WindowRefusal::NotPaid),
            Ok(WindowUse::Ended(_)) => Err(WindowRefusal::Ended),
            Ok(WindowUse::CallsUsed(_)) => Err(WindowRefusal::CallsUsed),
            Ok(WindowUse::NonceUsed) => Err(SignInError::Nonce.into()),
            Err(e) => {
                tracing::warn!(error = %e, "access window not checked: store unavailable");
                Err(WindowRefusal::Unavailable)
            }
        }
    }

    /// A smart wallet's signature, asked of the chain (EIP-1271).
    async fn ask_chain(
        &self,
        chain_id: u64,
        address: alloy_primitives::Address,
        hash: alloy_primitives::B256,
        signature: alloy_primitives::Bytes,
    ) -> Result<(), SignInError> {
        let Some(chain) = &self.chain else {
            return Err(SignInError::Signature);
        };
        match chain
            .wallet_accepts(chain_id, address, hash, signature)
            .await
        {
            Ok(true) => Ok(()),
            Ok(false) => Err(SignInError::Signature),
            Err(e) => Err(SignInError::Verifier(e.to_string())),
        }
    }

    /// Gives back the call counted for a request the origin did not serve (the nonce stays
    /// spent). A failure is logged: the payer lost one call of its window.
    pub async fn give_back(&self, w: &AccessWindow) {
        let given = self
            .store
            .return_window_call(&w.org_id, &w.route_id, &w.payer, &w.payment_id)
            .await;
        if let Err(e) = given {
            tracing::warn!(error = %e, payment = %w.payment_id, "access window call not given back");
        }
    }

    /// Opens the payer's window for the route `record` was settled for. Called once the
    /// payment is recorded settled, before its request is forwarded; a failure is logged (the
    /// payer paid for this request, which is served; it pays again for the next).
    pub async fn open(&self, entry: &RouteEntry, record: &GatewayPayment) {
        let Some(seconds) = entry.route.access_window_seconds else {
            return;
        };
        let now = paygate_domain::unix_now();
        let window = AccessWindow {
            org_id: record.org_id.clone(),
            route_id: record.route_id.clone(),
            payer: record.payer.to_ascii_lowercase(),
            payment_id: record.id.clone(),
            opened_at: now,
            expires_at: now.saturating_add(seconds),
            calls_allowed: entry.route.access_window_calls,
            calls_used: 0,
        };
        if let Err(e) = self.store.open_window(&window).await {
            tracing::error!(error = %e, payment = %record.id, "access window not opened");
        }
    }
}

/// The receipt of a call served through `window`: a settle response that moved nothing (no
/// transaction, amount 0) and says which window served it; `extensions`, the signed receipt
/// where the deployment signs them.
pub fn receipt(
    window: &AccessWindow,
    network: &str,
    extensions: Option<serde_json::Value>,
) -> String {
    use base64::Engine;
    let mut body = serde_json::json!({
        "success": true,
        "transaction": "",
        "network": network,
        "payer": window.payer,
        "amount": "0",
        "accessWindow": {
            "paymentId": window.payment_id,
            "expiresAt": paygate_domain::rfc3339(
                OffsetDateTime::from_unix_timestamp(window.expires_at as i64)
                    .unwrap_or(OffsetDateTime::UNIX_EPOCH)
            ),
            "callsUsed": window.calls_used,
            "callsLeft": window.calls_left(),
        },
    });
    if let Some(e) = extensions {
        body["extensions"] = e;
    }
    base64::engine::general_purpose::STANDARD.encode(body.to_string())
}
