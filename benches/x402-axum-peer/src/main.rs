//! The paid-path benchmark's peer: one axum route behind the x402-axum middleware (x402-rs),
//! settling before the handler runs (as paygate does), whose handler forwards the request to the
//! benchmark's upstream. The middleware's facilitator client talks to paygate's facilitator API
//! (`/facilitator/{verify,settle,supported}`) with an organisation key, so both sides settle
//! through the same relayer, chain and nonce manager.
//!
//! Usage: `x402-axum-peer <listen> <upstream-url> <facilitator-base-url> <pay-to> <amount-base-units>`
//! with the organisation key in `PEER_FACILITATOR_KEY`.

use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use http::{HeaderMap, HeaderValue, StatusCode};
use std::sync::Arc;
use x402_axum::facilitator_client::FacilitatorClient;
use x402_axum::X402Middleware;
use x402_chain_eip155::chain::ChecksummedAddress;
use x402_chain_eip155::{KnownNetworkEip155, V2Eip155Exact};
use x402_types::networks::USDC;

#[derive(Clone)]
struct Upstream {
    client: reqwest::Client,
    url: Arc<str>,
}

async fn forward(State(up): State<Upstream>) -> Response {
    match up.client.get(&*up.url).send().await {
        Ok(resp) => {
            let status = resp.status();
            match resp.bytes().await {
                Ok(body) => (status, Body::from(body)).into_response(),
                Err(_) => StatusCode::BAD_GATEWAY.into_response(),
            }
        }
        Err(_) => StatusCode::BAD_GATEWAY.into_response(),
    }
}

fn usage() -> ! {
    eprintln!(
        "usage: x402-axum-peer <listen> <upstream-url> <facilitator-base-url> <pay-to> <amount-base-units>"
    );
    std::process::exit(2)
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [listen, upstream, facilitator, pay_to, amount] = &args[..] else {
        usage()
    };
    let pay_to: ChecksummedAddress = pay_to.parse().unwrap_or_else(|_| usage());
    let amount: u64 = amount.parse().unwrap_or_else(|_| usage());
    let key = std::env::var("PEER_FACILITATOR_KEY").unwrap_or_default();

    let mut headers = HeaderMap::new();
    let bearer = HeaderValue::from_str(&format!("Bearer {key}")).unwrap_or_else(|_| usage());
    headers.insert(http::header::AUTHORIZATION, bearer);
    let base = url::Url::parse(facilitator).unwrap_or_else(|_| usage());
    let client = FacilitatorClient::try_new(base)
        .unwrap_or_else(|_| usage())
        .with_headers(headers);
    let x402 = X402Middleware::from_facilitator(Arc::new(client)).settle_before_execution();
    let price = V2Eip155Exact::price_tag(pay_to, USDC::base_sepolia().amount(amount));

    let state = Upstream {
        client: reqwest::Client::new(),
        url: Arc::from(upstream.as_str()),
    };
    let app = Router::new()
        .route("/paid", get(forward).layer(x402.with_price_tag(price)))
        .with_state(state);
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .unwrap_or_else(|e| panic!("binding {listen}: {e}"));
    axum::serve(listener, app).await.expect("serving");
}
