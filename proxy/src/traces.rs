//! A paid request's trace (issue 32): its span, a child of the caller's W3C `traceparent` when
//! it sent one; the upstream call's span, whose context goes to the origin as `traceparent`;
//! the trace id for the access log. Nothing is opened while traces are off.

use opentelemetry::propagation::{Extractor, Injector};
use opentelemetry::trace::TraceContextExt;
use pingora::http::RequestHeader;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

struct Headers<'a>(&'a http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

struct Upstream<'a>(&'a mut RequestHeader);

impl Injector for Upstream<'_> {
    fn set(&mut self, key: &str, value: String) {
        let _ = self.0.insert_header(key.to_string(), value);
    }
}

/// The span of a paid request to `route`, continuing the caller's trace.
pub(crate) fn paid_request(req: &RequestHeader, org: &str, route: &str) -> Span {
    if !paygate_x402::traces::on() {
        return Span::none();
    }
    let span = tracing::info_span!("paid_request", org, route, http.method = %req.method);
    let parent =
        opentelemetry::global::get_text_map_propagator(|p| p.extract(&Headers(&req.headers)));
    let _ = span.set_parent(parent);
    span
}

/// The upstream call's span under `paid`, its context written into the forwarded request's
/// `traceparent` (replacing the caller's: the origin's parent is this call).
pub(crate) fn upstream(paid: &Span, forwarded: &mut RequestHeader) -> Span {
    if paid.is_none() {
        return Span::none();
    }
    let span = tracing::info_span!(parent: paid, "upstream");
    let cx = span.context();
    opentelemetry::global::get_text_map_propagator(|p| {
        p.inject_context(&cx, &mut Upstream(forwarded))
    });
    span
}

/// The trace id of `span`, for the access log (`None` while traces are off).
pub(crate) fn trace_id(span: &Span) -> Option<String> {
    if span.is_none() {
        return None;
    }
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    sc.is_valid().then(|| sc.trace_id().to_string())
}
