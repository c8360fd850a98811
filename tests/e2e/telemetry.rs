//! Traces over OTLP end to end (issue 32, item 1): the real binary exports to an OTLP/HTTP
//! receiver this test runs (OTLP's own protobuf messages, `opentelemetry-proto`, decoded as a
//! collector would), and the span tree of one paid request is checked: a root continuing the
//! caller's `traceparent`, with children for the verification, the store writes, the settlement
//! (its chain RPCs beneath it) and the upstream call, whose context reached the origin; the
//! access log carries the trace id. Without an endpoint nothing is exported.

use crate::common;

use common::chain::{address, PaymentSpec};
use common::upstream::Upstream;
use common::*;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One exported span: name, ids (hex) and its parent's.
#[derive(Debug, Clone)]
struct Exported {
    name: String,
    trace_id: String,
    span_id: String,
    parent: String,
}

/// An OTLP/HTTP receiver on a loopback port: every span of every `POST /v1/traces`.
struct Receiver {
    url: String,
    spans: Arc<Mutex<Vec<Exported>>>,
}

impl Receiver {
    async fn start() -> Self {
        let spans: Arc<Mutex<Vec<Exported>>> = Arc::default();
        let kept = spans.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: axum::body::Bytes| {
                let kept = kept.clone();
                async move {
                    let req = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
                    let hex = |b: &[u8]| alloy_primitives::hex::encode(b);
                    let mut out = kept.lock().unwrap();
                    for rs in req.resource_spans {
                        for ss in rs.scope_spans {
                            for s in ss.spans {
                                out.push(Exported {
                                    name: s.name,
                                    trace_id: hex(&s.trace_id),
                                    span_id: hex(&s.span_id),
                                    parent: hex(&s.parent_span_id),
                                });
                            }
                        }
                    }
                    axum::http::StatusCode::OK
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { url, spans }
    }

    /// The spans of `trace_id`, once its root (`root`, the last to end) and `at_least` spans
    /// arrived (or 20 s passed).
    async fn trace(&self, trace_id: &str, root: &str, at_least: usize) -> Vec<Exported> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let spans: Vec<Exported> = self
                .spans
                .lock()
                .unwrap()
                .iter()
                .filter(|s| s.trace_id == trace_id)
                .cloned()
                .collect();
            let rooted = spans.iter().any(|s| s.name == root);
            if (rooted && spans.len() >= at_least) || Instant::now() > deadline {
                return spans;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Organisation `acme` with a paid echo route, paid once with the caller's `traceparent`: what
/// the origin received (the echo's JSON).
async fn pay_once(gw: &Gateway, traceparent: &str) -> Value {
    let upstream = Upstream::start().await;
    let receiver_wallet = address(9);
    let (_, key) = gw
        .create_org("acme", Some(&receiver_wallet.to_checksum(None)))
        .await;
    gw.create_paid_route(&key, "echo", &format!("{}/echo", upstream.url), false)
        .await;
    let r = gw
        .http
        .get(gw.url("/gateway/acme/echo"))
        .header(
            "X-PAYMENT",
            PaymentSpec::new(1, receiver_wallet, 10_000).v1_header(),
        )
        .header("traceparent", traceparent)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", gw.log());
    r.json().await.unwrap()
}

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paid_request_is_one_trace_continuing_the_callers() {
    let receiver = Receiver::start().await;
    let endpoint = receiver.url.clone();
    let gw = Gateway::start_with(&[
        ("PAYGATE__TELEMETRY__OTLP_ENDPOINT", endpoint.as_str()),
        // The SDK's batch is sent every 200 ms (its standard variable).
        ("OTEL_BSP_SCHEDULE_DELAY", "200"),
    ])
    .await;
    let echoed = pay_once(&gw, &format!("00-{TRACE_ID}-{CALLER_SPAN}-01")).await;

    let spans = receiver.trace(TRACE_ID, "paid_request", 9).await;
    let named = |n: &str| spans.iter().filter(|s| s.name == n).collect::<Vec<_>>();
    let root = named("paid_request");
    assert_eq!(root.len(), 1, "{spans:#?}\n{}", gw.log());
    let root = root[0];
    assert_eq!(
        root.parent, CALLER_SPAN,
        "the caller's span is the root's parent"
    );
    let child_of = |name: &str, parent: &Exported| {
        let found = named(name);
        assert!(
            found.iter().any(|s| s.parent == parent.span_id),
            "{name} under {}: {spans:#?}",
            parent.name
        );
        found
            .into_iter()
            .find(|s| s.parent == parent.span_id)
            .unwrap()
    };
    child_of("verify", root);
    child_of("store.reserve", root);
    let settle = child_of("settle", root);
    child_of("rpc.send_transaction", settle);
    child_of("rpc.wait_receipt", settle);
    child_of("store.record", root);
    let up = child_of("upstream", root);
    // The origin was sent the upstream call's context, in the caller's trace.
    let sent = echoed["headers"]["traceparent"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(sent, format!("00-{TRACE_ID}-{}-01", up.span_id), "{echoed}");
    // The access log names the trace.
    let log = gw.log();
    assert!(
        log.lines().any(|l| l.contains("paygate::access")
            && l.contains("trace_id")
            && l.contains(TRACE_ID)),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_endpoint_nothing_is_exported_and_the_callers_traceparent_passes() {
    let gw = Gateway::start().await;
    let caller = format!("00-{TRACE_ID}-{CALLER_SPAN}-01");
    let echoed = pay_once(&gw, &caller).await;
    assert_eq!(echoed["headers"]["traceparent"], caller.as_str());
    assert!(
        !gw.log().contains("trace_id="),
        "no trace ids without traces"
    );
}
