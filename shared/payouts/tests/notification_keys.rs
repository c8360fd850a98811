//! CPN's notification keys through real HTTP: a key server on a loopback port (as the provider's
//! `/v2/cpn/notifications/publicKey/{keyId}`), counting what it is asked.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine as _;
use p256::ecdsa::signature::Signer as _;
use p256::ecdsa::{Signature, SigningKey};
use p256::pkcs8::EncodePublicKey as _;
use paygate_payouts::cpn::{self, NotificationKeys, SignatureError};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const FIRST: &str = "879dc113-5ca4-4ff7-a6b7-54652083fcf8";
const SECOND: &str = "2f0c7d1e-1111-4222-8333-444455556666";
const BROKEN: &str = "00000000-0000-4000-8000-00000000dead";
const WRONG_ALGORITHM: &str = "00000000-0000-4000-8000-0000000000a1";

#[derive(Default)]
struct Server {
    keys: Mutex<HashMap<String, SigningKey>>,
    asked: AtomicU64,
    /// Whether the endpoint fails (a provider outage).
    down: std::sync::atomic::AtomicBool,
    auth: Mutex<Vec<String>>,
}

async fn key(
    State(s): State<Arc<Server>>,
    headers: axum::http::HeaderMap,
    Path(id): Path<String>,
) -> Response {
    s.asked.fetch_add(1, Ordering::SeqCst);
    if let Some(a) = headers.get("authorization").and_then(|v| v.to_str().ok()) {
        s.auth.lock().unwrap().push(a.to_string());
    }
    if s.down.load(Ordering::SeqCst) || id == BROKEN {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    let keys = s.keys.lock().unwrap();
    let Some(k) = keys.get(&id) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let der = k.verifying_key().to_public_key_der().unwrap();
    let algorithm = if id == WRONG_ALGORITHM {
        "RSA_SHA_256"
    } else {
        cpn::ALGORITHM
    };
    Json(
        serde_json::json!({"data": {"id": id, "algorithm": algorithm,
        "publicKey": base64::engine::general_purpose::STANDARD.encode(der.as_bytes()),
        "createDate": "2026-11-26T00:00:00Z"}}),
    )
    .into_response()
}

async fn serve() -> (Arc<Server>, String) {
    let s = Arc::new(Server::default());
    let app = axum::Router::new()
        .route(
            &format!("{}{{id}}", cpn::PUBLIC_KEY_PATH),
            axum::routing::get(key),
        )
        .with_state(s.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (s, format!("http://{addr}"))
}

fn sign(k: &SigningKey, body: &[u8]) -> String {
    let sig: Signature = k.sign(body);
    base64::engine::general_purpose::STANDARD.encode(sig.to_der().as_bytes())
}

#[tokio::test]
async fn keys_are_fetched_once_by_id_and_only_from_the_configured_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (server, base) = serve().await;
    let first = SigningKey::random(&mut rand::rngs::OsRng);
    server
        .keys
        .lock()
        .unwrap()
        .insert(FIRST.into(), first.clone());
    let keys = NotificationKeys::new(&base, Some("cpn-key".into()), Duration::from_secs(5));
    let body = br#"{"notificationType":"cpn.payment.completed"}"#;
    let asked = || server.asked.load(Ordering::SeqCst);

    // Known key: fetched once (with the API key), then kept.
    for _ in 0..3 {
        assert_eq!(
            keys.verify(Some(FIRST), Some(&sign(&first, body)), body)
                .await,
            Ok(())
        );
    }
    assert_eq!(asked(), 1);
    assert_eq!(keys.fetches(), 1);
    assert_eq!(server.auth.lock().unwrap().as_slice(), ["Bearer cpn-key"]);
    // The key id's case does not matter; a tampered body or another key's signature does.
    assert_eq!(
        keys.verify(Some(&FIRST.to_uppercase()), Some(&sign(&first, body)), body)
            .await,
        Ok(())
    );
    assert_eq!(
        keys.verify(Some(FIRST), Some(&sign(&first, body)), b"{}")
            .await,
        Err(SignatureError::Mismatch)
    );
    let stranger = SigningKey::random(&mut rand::rngs::OsRng);
    assert_eq!(
        keys.verify(Some(FIRST), Some(&sign(&stranger, body)), body)
            .await,
        Err(SignatureError::Mismatch)
    );
    assert_eq!(asked(), 1);

    // A key the provider does not know: asked once, then not again for a while.
    for _ in 0..3 {
        assert_eq!(
            keys.verify(Some(SECOND), Some(&sign(&stranger, body)), body)
                .await,
            Err(SignatureError::UnknownKey)
        );
    }
    assert_eq!(asked(), 2);
    // Not a UUID (nothing a request names reaches the URL): never asked.
    for bad in ["../../v1/payouts", "http://evil.example/key", ""] {
        assert_eq!(
            keys.verify(Some(bad), Some(&sign(&first, body)), body)
                .await,
            Err(SignatureError::KeyId),
            "{bad}"
        );
    }
    assert_eq!(
        keys.verify(None, Some(&sign(&first, body)), body).await,
        Err(SignatureError::Missing)
    );
    assert_eq!(
        keys.verify(Some(FIRST), None, body).await,
        Err(SignatureError::Missing)
    );
    assert_eq!(asked(), 2);

    // A key of another algorithm is not used.
    server
        .keys
        .lock()
        .unwrap()
        .insert(WRONG_ALGORITHM.into(), stranger.clone());
    assert_eq!(
        keys.verify(Some(WRONG_ALGORITHM), Some(&sign(&stranger, body)), body)
            .await,
        Err(SignatureError::UnknownKey)
    );

    // An outage is not the key's fault: the webhook is answered as unchecked, and the next
    // delivery asks again.
    assert!(matches!(
        keys.verify(Some(BROKEN), Some(&sign(&first, body)), body)
            .await,
        Err(SignatureError::KeyUnavailable(_))
    ));
    let before = asked();
    assert!(matches!(
        keys.verify(Some(BROKEN), Some(&sign(&first, body)), body)
            .await,
        Err(SignatureError::KeyUnavailable(_))
    ));
    assert_eq!(asked(), before + 1);

    // Rotation: a new key id is fetched; the old one keeps working from the cache even while
    // the provider is down.
    let third_id = "6c9b2a41-7777-4888-9999-aaaabbbbcccc";
    let third = SigningKey::random(&mut rand::rngs::OsRng);
    server
        .keys
        .lock()
        .unwrap()
        .insert(third_id.into(), third.clone());
    assert_eq!(
        keys.verify(Some(third_id), Some(&sign(&third, body)), body)
            .await,
        Ok(())
    );
    server.down.store(true, Ordering::SeqCst);
    assert_eq!(
        keys.verify(Some(FIRST), Some(&sign(&first, body)), body)
            .await,
        Ok(())
    );
    assert_eq!(
        keys.verify(Some(third_id), Some(&sign(&third, body)), body)
            .await,
        Ok(())
    );
}
