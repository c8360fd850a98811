//! The paid-path load generator of `make bench`: asks `--url` for its `402`, signs `--requests`
//! EIP-3009 payments for the first v2 requirement (before the clock starts, each with its own
//! nonce), then sends them with `--concurrency` requests in flight and prints one JSON line:
//! requests/s, latency percentiles, status counts and how many answers carried a settlement
//! receipt. Works against any v2 x402 server (paygate, and the x402-axum peer).

use alloy_signer_local::PrivateKeySigner;
use base64::Engine;
use clap::Parser;
use paygate_x402::network::{builtin_networks, Networks};
use paygate_x402::payment::ProtocolVersion;
use paygate_x402::{sign, PaymentRequirements};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Parser)]
struct Args {
    /// The paid resource.
    #[arg(long)]
    url: String,
    #[arg(long, default_value_t = 200)]
    requests: usize,
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// The payer's private key (hex); it must hold the USDC.
    #[arg(long, env = "PAID_LOAD_PAYER_KEY")]
    payer_key: String,
}

struct Outcome {
    status: u16,
    receipt: bool,
    latency: Duration,
    /// The start of a refused answer's body (the first one is reported).
    refusal: Option<String>,
}

fn fail(msg: String) -> ! {
    eprintln!("paid_load: {msg}");
    std::process::exit(1)
}

/// The first usable requirement of the server's v2 `PAYMENT-REQUIRED` header, read and as sent.
async fn requirement(
    client: &reqwest::Client,
    url: &str,
) -> (PaymentRequirements, serde_json::Value) {
    let resp = client
        .get(url)
        .send()
        .await
        .unwrap_or_else(|e| fail(format!("GET {url}: {e}")));
    if resp.status().as_u16() != 402 {
        fail(format!("GET {url}: expected 402, got {}", resp.status()));
    }
    let header = resp
        .headers()
        .get("payment-required")
        .unwrap_or_else(|| fail("the 402 has no PAYMENT-REQUIRED header".into()));
    let json = base64::engine::general_purpose::STANDARD
        .decode(header.as_bytes())
        .unwrap_or_else(|e| fail(format!("PAYMENT-REQUIRED is not base64: {e}")));
    let required: serde_json::Value =
        serde_json::from_slice(&json).unwrap_or_else(|e| fail(format!("PAYMENT-REQUIRED: {e}")));
    let networks = Networks::from_config(&builtin_networks());
    let accepts = required["accepts"].as_array().cloned().unwrap_or_default();
    accepts
        .iter()
        .find_map(|a| {
            PaymentRequirements::from_wire(a, ProtocolVersion::V2, &networks)
                .ok()
                .map(|r| (r, a.clone()))
        })
        .unwrap_or_else(|| fail(format!("no usable requirement in {required}")))
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    // reqwest is built without a TLS provider of its own (as in the paygate binary).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let signer: PrivateKeySigner = args
        .payer_key
        .trim()
        .parse()
        .unwrap_or_else(|_| fail("--payer-key is not a private key".into()));
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.concurrency)
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap_or_else(|e| fail(e.to_string()));
    let (req, offered) = requirement(&client, &args.url).await;
    let now = paygate_domain::unix_now();
    let headers: Arc<Vec<String>> = Arc::new(
        (0..args.requests)
            .map(|_| sign::payment_header_echoing(&req, offered.clone(), &signer, now))
            .collect::<Result<_, _>>()
            .unwrap_or_else(|e| fail(e.to_string())),
    );

    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let workers: Vec<_> = (0..args.concurrency)
        .map(|_| {
            let (client, headers, next, url) = (
                client.clone(),
                headers.clone(),
                next.clone(),
                args.url.clone(),
            );
            tokio::spawn(async move {
                let mut out = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(h) = headers.get(i) else { break };
                    let t = Instant::now();
                    let (status, receipt, body) =
                        match client.get(&url).header("payment-signature", h).send().await {
                            Ok(resp) => {
                                let receipt = resp.headers().contains_key("payment-response");
                                let status = resp.status().as_u16();
                                // The whole answer, as a client would read it.
                                let body = resp.bytes().await.unwrap_or_default();
                                (status, receipt, String::from_utf8_lossy(&body).into_owned())
                            }
                            Err(e) => (0, false, e.to_string()),
                        };
                    out.push(Outcome {
                        status,
                        receipt,
                        latency: t.elapsed(),
                        refusal: (status != 200).then(|| body.chars().take(300).collect()),
                    });
                }
                out
            })
        })
        .collect();
    let mut outcomes = Vec::with_capacity(args.requests);
    for w in workers {
        outcomes.extend(w.await.unwrap_or_default());
    }
    let elapsed = start.elapsed().as_secs_f64();

    let mut statuses = BTreeMap::<String, usize>::new();
    for o in &outcomes {
        *statuses.entry(o.status.to_string()).or_default() += 1;
    }
    let mut ok: Vec<Duration> = outcomes
        .iter()
        .filter(|o| o.status == 200)
        .map(|o| o.latency)
        .collect();
    ok.sort();
    let mean_ms = if ok.is_empty() {
        0.0
    } else {
        ok.iter().map(Duration::as_secs_f64).sum::<f64>() * 1000.0 / ok.len() as f64
    };
    let report = serde_json::json!({
        "requests": outcomes.len(),
        "ok": ok.len(),
        "receipts": outcomes.iter().filter(|o| o.status == 200 && o.receipt).count(),
        "statuses": statuses,
        "seconds": elapsed,
        "rps": ok.len() as f64 / elapsed,
        "p50_ms": percentile(&ok, 0.50),
        "p99_ms": percentile(&ok, 0.99),
        "mean_ms": mean_ms,
        "first_refusal": outcomes.iter().find_map(|o| o.refusal.clone()),
    });
    println!("{report}");
}
