//! The paid-path load generator of `make bench`: asks `--url` for its `402`, signs `--requests`
//! payments before the clock starts, then sends them with `--concurrency` requests in flight
//! and prints one JSON line: requests/s, latency percentiles, status counts and how many answers
//! carried a receipt. `--scheme exact` (the default): one EIP-3009 payment a request for the
//! first v2 requirement, each with its own nonce (any v2 x402 server: paygate, the x402-axum
//! peer). `--scheme batch-settlement`: every connection its own payment channel, opened by a
//! deposit before the clock starts, then one cumulative voucher a request. `--scheme mpp`: one
//! MPP `charge` credential a request (`Authorization: Payment`, as `paygate pay --protocol mpp`
//! signs it), each for a challenge of its own (asked of the server one after another before the
//! clock starts: a route's challenge changes every millisecond). `--scheme auth-capture`: one
//! escrowed payment a request (`paygate pay --scheme auth-capture`'s signing), each with its own
//! salt, all for the escrow terms of one `402` (the deadlines leave 900 s). `--scheme free`: no
//! payment, the bench build's `x-paygate-bench-free` pass (the same client on the free path).

use alloy_signer_local::PrivateKeySigner;
use base64::Engine;
use clap::Parser;
use paygate_x402::network::{builtin_networks, Networks};
use paygate_x402::payment::ProtocolVersion;
use paygate_x402::{sign, PaymentRequirements};
use std::collections::BTreeMap;
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
    /// `exact`, `auth-capture`, `batch-settlement`, `mpp` or `free`.
    #[arg(long, default_value = "exact")]
    scheme: String,
    /// Requests per second offered in all (0: each connection sends its next request as soon
    /// as the previous one is answered). Paced, each request has its time; its latency is
    /// counted from that time, so a late answer also counts against the requests behind it.
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
    /// Once its payments are ready (channels opened, vouchers signed), print `ready` and wait
    /// for a line on standard input before the clock starts: several loads started together
    /// measure only their requests, not each other's preparation.
    #[arg(long)]
    wait_go: bool,
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
async fn payment_required(client: &reqwest::Client, url: &str) -> serde_json::Value {
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
    serde_json::from_slice(&json).unwrap_or_else(|e| fail(format!("PAYMENT-REQUIRED: {e}")))
}

/// The first usable `exact` requirement of the server's challenge, read and as sent.
fn requirement(required: &serde_json::Value) -> (PaymentRequirements, serde_json::Value) {
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
    let required = payment_required(&client, &args.url).await;
    let lists = match args.scheme.as_str() {
        "exact" => exact_payments(&required, &signer, &args),
        "auth-capture" => escrow_payments(&required, &signer, &args),
        "batch-settlement" => channel_payments(&client, &required, &signer, &args).await,
        "mpp" => mpp_payments(&client, &signer, &args).await,
        "free" => {
            vec![vec![String::new(); args.requests.div_ceil(args.concurrency)]; args.concurrency]
        }
        other => fail(format!(
            "--scheme {other}: exact, auth-capture, batch-settlement, mpp or free"
        )),
    };
    let (header, receipt_header) = match args.scheme.as_str() {
        "free" => ("x-paygate-bench-free", "payment-response"),
        "mpp" => ("authorization", "payment-receipt"),
        _ => ("payment-signature", "payment-response"),
    };

    if args.wait_go {
        println!("ready");
        let mut go = String::new();
        if std::io::stdin().read_line(&mut go).is_err() {
            fail("no go on standard input".into());
        }
    }
    let started_unix = unix_seconds();
    let start = Instant::now();
    let conns = lists.len();
    // Request k of connection w is due at (k * conns + w) / rate seconds.
    let interval = (args.rate > 0.0).then(|| Duration::from_secs_f64(1.0 / args.rate));
    let workers: Vec<_> = lists
        .into_iter()
        .enumerate()
        .map(|(w, list)| {
            let (client, url) = (client.clone(), args.url.clone());
            tokio::spawn(async move {
                let mut out = Vec::new();
                for (k, h) in list.into_iter().enumerate() {
                    let t = match interval {
                        Some(every) => {
                            let due = start + every * (k * conns + w) as u32;
                            tokio::time::sleep_until(due.into()).await;
                            due
                        }
                        None => Instant::now(),
                    };
                    let (status, receipt, body) =
                        match client.get(&url).header(header, h).send().await {
                            Ok(resp) => {
                                let receipt = resp.headers().contains_key(receipt_header);
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
    let ended_unix = unix_seconds();

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
        "scheme": args.scheme,
        "requests": outcomes.len(),
        "ok": ok.len(),
        "receipts": outcomes.iter().filter(|o| o.status == 200 && o.receipt).count(),
        "statuses": statuses,
        "seconds": elapsed,
        "started_unix": started_unix,
        "ended_unix": ended_unix,
        "rps": ok.len() as f64 / elapsed,
        "p50_ms": percentile(&ok, 0.50),
        "p99_ms": percentile(&ok, 0.99),
        "mean_ms": mean_ms,
        "first_refusal": outcomes.iter().find_map(|o| o.refusal.clone()),
    });
    println!("{report}");
}

/// Wall-clock seconds since the Unix epoch (loads in other processes compare theirs).
fn unix_seconds() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// `--requests` EIP-3009 payments for the first `exact` requirement, dealt to the connections.
fn exact_payments(
    required: &serde_json::Value,
    signer: &PrivateKeySigner,
    args: &Args,
) -> Vec<Vec<String>> {
    let (req, offered) = requirement(required);
    let now = paygate_domain::unix_now();
    let mut lists = vec![Vec::new(); args.concurrency];
    for i in 0..args.requests {
        let h = sign::payment_header_echoing(&req, offered.clone(), signer, now)
            .unwrap_or_else(|e| fail(e.to_string()));
        lists[i % args.concurrency].push(h);
    }
    lists
}

/// `--requests` escrowed payments for the challenge's `auth-capture` offer, dealt to the
/// connections.
fn escrow_payments(
    required: &serde_json::Value,
    signer: &PrivateKeySigner,
    args: &Args,
) -> Vec<Vec<String>> {
    use paygate_x402::auth_capture::{client::EscrowOffer, SCHEME};
    let networks = Networks::from_config(&builtin_networks());
    let offered = required["accepts"]
        .as_array()
        .and_then(|a| a.iter().find(|a| a["scheme"] == SCHEME))
        .unwrap_or_else(|| fail(format!("no {SCHEME} offer in {required}")));
    let mut offer = EscrowOffer::read(offered, &networks).unwrap_or_else(|e| fail(e.to_string()));
    offer.req.resource = required["resource"]["url"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let now = paygate_domain::unix_now();
    let mut lists = vec![Vec::new(); args.concurrency];
    for i in 0..args.requests {
        let h = offer
            .payment_header(signer, now)
            .unwrap_or_else(|e| fail(e.to_string()));
        lists[i % args.concurrency].push(h);
    }
    lists
}

/// `--requests` MPP credentials, each for a challenge of its own, dealt to the connections.
async fn mpp_payments(
    client: &reqwest::Client,
    signer: &PrivateKeySigner,
    args: &Args,
) -> Vec<Vec<String>> {
    use paygate_gateway::payments::ways::mpp::client;
    let networks = Networks::from_config(&builtin_networks());
    let mut seen = std::collections::HashSet::new();
    let mut lists = vec![Vec::new(); args.concurrency];
    while seen.len() < args.requests {
        let resp = client
            .get(&args.url)
            .send()
            .await
            .unwrap_or_else(|e| fail(format!("GET {}: {e}", args.url)));
        let challenge = resp
            .headers()
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_else(|| fail(format!("{} offers no MPP challenge", args.url)))
            .to_string();
        if !seen.insert(challenge.clone()) {
            tokio::time::sleep(Duration::from_micros(200)).await;
            continue;
        }
        let credential = client::offer(&challenge, &networks)
            .and_then(|o| o.credential(signer))
            .unwrap_or_else(|e| fail(e));
        lists[seen.len() % args.concurrency].push(credential);
    }
    lists
}

/// A channel per connection, each opened now (a deposit covering its share of the requests and
/// its first voucher, sent before the clock starts), and that share of vouchers signed.
async fn channel_payments(
    client: &reqwest::Client,
    required: &serde_json::Value,
    signer: &PrivateKeySigner,
    args: &Args,
) -> Vec<Vec<String>> {
    use alloy_primitives::{keccak256, U256};
    use paygate_x402::batch::client::PayerChannel;
    let accepted = required["accepts"]
        .as_array()
        .and_then(|a| a.iter().find(|a| a["scheme"] == "batch-settlement"))
        .unwrap_or_else(|| fail(format!("no batch-settlement offer in {required}")));
    let price: u128 = accepted["amount"]
        .as_str()
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| fail("the offer's amount is not an integer".into()));
    let per = args.requests.div_ceil(args.concurrency) as u128;
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let opened = (0..args.concurrency).map(|w| {
        let salt = keccak256(format!("{run}/{w}"));
        let ch = PayerChannel::for_offer(signer.address(), accepted, salt)
            .unwrap_or_else(|| fail(format!("not a usable offer: {accepted}")));
        let deposit = ch.deposit(
            price * (per + 1),
            price,
            paygate_domain::unix_now() + 3600,
            U256::from_be_bytes(salt.0),
            signer,
        );
        let (client, url, header) = (client.clone(), args.url.clone(), ch.header(&deposit));
        async move {
            let resp = client
                .get(&url)
                .header("payment-signature", header)
                .send()
                .await
                .unwrap_or_else(|e| fail(format!("deposit: {e}")));
            if resp.status() != 200 {
                let status = resp.status();
                let body = resp.text().await.unwrap_or_default();
                fail(format!("deposit answered {status}: {body}"));
            }
            (2..=per + 1)
                .map(|k| ch.header(&ch.voucher(price * k, signer)))
                .collect::<Vec<_>>()
        }
    });
    futures_util::future::join_all(opened).await
}
