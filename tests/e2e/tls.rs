//! TLS and HTTP/2 on the public listener (issue 18), through the real binary: certificates
//! made at test time, challenges, paid calls, streaming and control-plane paths over h2, SNI,
//! certificates reloaded without a restart, h2c, and a missing certificate at start.

use crate::common;

use axum::body::{Body, Bytes};
use common::chain::{address, Chain, PaymentSpec};
use common::*;
use std::path::Path;
use std::time::{Duration, Instant};

const PRICE: u64 = 10_000;

/// A self-signed certificate for `name`, written as PEM to `dir/{file}.pem` and `.key`; its DER.
fn certificate(dir: &Path, file: &str, name: &str) -> Vec<u8> {
    let made = rcgen::generate_simple_self_signed(vec![name.to_string()]).unwrap();
    std::fs::write(dir.join(format!("{file}.pem")), made.cert.pem()).unwrap();
    std::fs::write(
        dir.join(format!("{file}.key")),
        made.key_pair.serialize_pem(),
    )
    .unwrap();
    made.cert.der().to_vec()
}

/// A client that trusts `roots`, reaches `name` at `addr`, and can tell the peer certificate.
fn client(roots: &[&[u8]], name: &str, addr: std::net::SocketAddr) -> reqwest::Client {
    let mut b = reqwest::Client::builder()
        .tls_info(true)
        .resolve(name, addr)
        .timeout(Duration::from_secs(10));
    for der in roots {
        b = b.add_root_certificate(reqwest::Certificate::from_der(der).unwrap());
    }
    b.build().unwrap()
}

fn peer_certificate(r: &reqwest::Response) -> Vec<u8> {
    r.extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|i| i.peer_certificate())
        .expect("a TLS peer certificate")
        .to_vec()
}

/// An upstream whose `/stream` sends three chunks a while apart, and whose other paths echo the
/// `x-forwarded-proto` they got.
async fn upstream() -> String {
    let app = axum::Router::new()
        .route(
            "/stream",
            axum::routing::get(|| async {
                let chunks = futures_util::stream::unfold(0u32, |i| async move {
                    if i == 3 {
                        return None;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    Some((
                        Ok::<_, std::io::Error>(Bytes::from(format!("chunk {i}\n"))),
                        i + 1,
                    ))
                });
                Body::from_stream(chunks)
            }),
        )
        .fallback(|headers: axum::http::HeaderMap| async move {
            headers
                .get("x-forwarded-proto")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string()
        });
    let (url, _) = common::upstream::serve(app).await;
    url
}

#[tokio::test]
async fn paid_calls_streams_and_the_control_plane_work_over_tls_and_http2() {
    let dir = tempfile::tempdir().unwrap();
    let default_der = certificate(dir.path(), "default", "localhost");
    let sni_der = certificate(dir.path(), "api", "api.paygate.test");
    let pem = |f: &str| dir.path().join(f).display().to_string();
    let sni = format!(
        r#"[{{names = ["api.paygate.test"], cert = "{}", key = "{}"}}]"#,
        pem("api.pem"),
        pem("api.key")
    );
    let chain = Chain::start();
    let mut env = chain.gateway_env();
    for (k, v) in [
        ("PAYGATE__SERVER__TLS__LISTEN", "127.0.0.1:0".to_string()),
        ("PAYGATE__SERVER__TLS__CERT", pem("default.pem")),
        ("PAYGATE__SERVER__TLS__KEY", pem("default.key")),
        ("PAYGATE__SERVER__TLS__SNI", sni),
        (
            "PAYGATE__SERVER__TLS__RELOAD_CHECK_SECONDS",
            "1".to_string(),
        ),
        ("PAYGATE__SERVER__H2C", "true".to_string()),
    ] {
        env.push((k.to_string(), v));
    }
    let gw = Gateway::start_with_owned(env).await;
    let tls: std::net::SocketAddr = gw.addresses()["tlsListen"]
        .as_str()
        .expect("tlsListen in paygate.addr")
        .parse()
        .unwrap();
    let (_, key) = gw
        .create_org("acme", Some(&address(9).to_checksum(None)))
        .await;
    let up = upstream().await;
    gw.create_paid_route(&key, "echo", &up, false).await;
    gw.create_paid_route(&key, "stream", &format!("{up}/stream"), true)
        .await;
    let https = client(&[&default_der, &sni_der], "localhost", tls);
    let base = format!("https://localhost:{}", tls.port());

    // The challenge, over HTTP/2, names the https resource.
    let r = https
        .get(format!("{base}/gateway/acme/echo"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.version(), reqwest::Version::HTTP_2);
    assert_eq!(r.status(), 402);
    assert_eq!(peer_certificate(&r), default_der);
    let challenge: serde_json::Value = r.json().await.unwrap();
    let resource = challenge["accepts"][0]["resource"].as_str().unwrap();
    assert!(resource.starts_with("https://"), "{resource}");

    // A paid call over HTTP/2: the upstream hears it came over TLS.
    let paid = |path: &'static str| {
        https
            .get(format!("{base}/gateway/acme/{path}"))
            .header(
                "X-PAYMENT",
                PaymentSpec::new(1, address(9), PRICE).v1_header(),
            )
            .send()
    };
    let r = paid("echo").await.unwrap();
    assert_eq!(r.version(), reqwest::Version::HTTP_2);
    assert_eq!(r.status(), 200, "{}", gw.log());
    assert!(r.headers().contains_key("x-payment-response"));
    assert_eq!(r.text().await.unwrap(), "https");

    // A streaming route over HTTP/2: the chunks arrive as they are sent.
    let t = Instant::now();
    let mut r = paid("stream").await.unwrap();
    assert_eq!(r.status(), 200);
    let first = r.chunk().await.unwrap().unwrap();
    let first_at = t.elapsed();
    let mut body = first.to_vec();
    while let Some(c) = r.chunk().await.unwrap() {
        body.extend_from_slice(&c);
    }
    assert_eq!(body, b"chunk 0\nchunk 1\nchunk 2\n");
    assert!(t.elapsed() >= first_at + Duration::from_millis(150));

    // The control plane over HTTP/2.
    let r = https.get(format!("{base}/healthz")).send().await.unwrap();
    assert_eq!(
        (r.version(), r.status().as_u16()),
        (reqwest::Version::HTTP_2, 200)
    );
    let r = https
        .get(format!("{base}/api/routes"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.json::<serde_json::Value>()
            .await
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        2
    );

    // SNI: the name the client asks for picks its certificate.
    let api = client(&[&default_der, &sni_der], "api.paygate.test", tls);
    let r = api
        .get(format!("https://api.paygate.test:{}/healthz", tls.port()))
        .send()
        .await
        .unwrap();
    assert_eq!(peer_certificate(&r), sni_der);

    // h2c on the plain listener.
    let h2c = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let r = h2c.get(gw.url("/healthz")).send().await.unwrap();
    assert_eq!(
        (r.version(), r.status().as_u16()),
        (reqwest::Version::HTTP_2, 200)
    );

    // A new certificate written over the files is served without a restart.
    let renewed_der = certificate(dir.path(), "default", "localhost");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // A new client each time: a kept connection keeps the certificate it began with.
        let renewed = client(&[&default_der, &renewed_der], "localhost", tls);
        let r = renewed.get(format!("{base}/healthz")).send().await.unwrap();
        if peer_certificate(&r) == renewed_der {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the renewed certificate was never served"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(gw.log().contains("TLS certificates reloaded"));
}

#[tokio::test]
async fn a_missing_certificate_stops_the_start_with_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.pem").display().to_string();
    let log = Gateway::start_or_exit(&[
        ("PAYGATE__SERVER__TLS__LISTEN", "127.0.0.1:0"),
        ("PAYGATE__SERVER__TLS__CERT", &missing),
        ("PAYGATE__SERVER__TLS__KEY", &missing),
    ])
    .await
    .err()
    .expect("the gateway must not start");
    let errors: Vec<&str> = log.lines().filter(|l| l.starts_with("paygate: ")).collect();
    assert_eq!(errors.len(), 1, "{log}");
    assert!(errors[0].contains("nope.pem"), "{log}");
}
