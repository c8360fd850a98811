//! Access windows on a cluster (issue 31): three nodes on one PostgreSQL behind one public
//! origin (`server.public_base_url`, as an operator sets it behind a load balancer). A window
//! paid on one node serves on every node, a sign-in's nonce spent on one node is refused on the
//! others, and racing sign-ins on all three never pass the window's calls.

use crate::common;

use common::chain::{Chain, PaymentSpec};
use common::cluster::{acme_route, paid_nodes};
use common::upstream::Upstream;
use common::windows::{challenge_at, sign_in};
use common::*;
use serde_json::{json, Value};
use std::sync::Arc;

const PATH: &str = "/gateway/acme/data";

async fn signed_in(node: &Gateway, header: &str) -> (u16, Value) {
    let r = node
        .http
        .get(node.url(PATH))
        .header("SIGN-IN-WITH-X", header)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or_default())
}

#[tokio::test]
async fn a_window_paid_on_one_node_serves_on_all_and_each_nonce_once() {
    let pg = paygate_store::testing::PgCluster::start();
    let chain = Arc::new(Chain::start());
    let n = paid_nodes(
        &chain,
        &pg.url(),
        &[(
            "PAYGATE__SERVER__PUBLIC_BASE_URL",
            "https://api.example.com",
        )],
    )
    .await;
    let upstream = Upstream::start().await;
    let (_key, receiver) = acme_route(
        &n,
        json!({"path": "data", "priceUSD": 0.01, "targetUrl": format!("{}/echo", upstream.url),
               "network": "base-sepolia", "accessWindowSeconds": 3600, "accessWindowCalls": 6}),
    )
    .await;
    let doc = challenge_at(&n[1], PATH).await;
    assert_eq!(
        doc["extensions"]["sign-in-with-x"]["info"]["domain"],
        "api.example.com"
    );

    let paid = n[0]
        .http
        .get(n[0].url(PATH))
        .header(
            "X-PAYMENT",
            PaymentSpec::new(2, receiver, 10_000).v1_header(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(paid.status(), 200);

    // Paid on node 0, served on node 1; the same sign-in again on node 2: its nonce is spent.
    let header = sign_in(&challenge_at(&n[2], PATH).await, 2, 2, |_| {});
    assert_eq!(signed_in(&n[1], &header).await.0, 200);
    let (status, body) = signed_in(&n[2], &header).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (402, Some("invalid_siwx_nonce"))
    );

    // Ten sign-ins raced over the three nodes: the window has five calls left.
    let mut headers = Vec::new();
    for _ in 0..10 {
        headers.push(sign_in(&challenge_at(&n[0], PATH).await, 2, 2, |_| {}));
    }
    let hits_before = upstream.hits();
    let sends = headers
        .iter()
        .enumerate()
        .map(|(i, h)| signed_in(&n[i % 3], h));
    let answers = futures_util::future::join_all(sends).await;
    let served = answers.iter().filter(|(s, _)| *s == 200).count();
    let refused: Vec<_> = answers
        .iter()
        .filter(|(s, _)| *s != 200)
        .map(|(_, b)| b["error"].as_str().unwrap_or("?").to_string())
        .collect();
    assert_eq!(served, 5, "{answers:?}");
    assert!(
        refused.iter().all(|r| r == "access_window_calls_used"),
        "{refused:?}"
    );
    assert_eq!(upstream.hits() - hits_before, 5);
}
