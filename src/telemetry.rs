//! Logs and traces. Logs go to stderr (`PAYGATE_LOG` filters them, `PAYGATE_LOG_FORMAT=json`).
//! Traces (issue 32) go over OTLP/HTTP to `[telemetry] otlp_endpoint` when it is set: the
//! `tracing` spans the code opens for a paid request become OpenTelemetry spans through
//! `tracing-opentelemetry`, sampled by `sample_ratio` unless the caller's `traceparent` decided,
//! batched on the SDK's own thread. `serve` starts both once its configuration is read (the
//! layer is built in, not swapped in later: `tracing-opentelemetry` reaches its span data by
//! downcasting the subscriber, which a reloadable layer does not allow).

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use paygate_config::TelemetryConfig;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Starts logging, and traces when `telemetry` says so (the other commands log only).
pub fn init(telemetry: Option<&TelemetryConfig>) -> anyhow::Result<Traces> {
    use tracing_subscriber::EnvFilter;
    // Pingora's fd hand-over logs its own expected first poll of an upgrade as an ERROR ("No
    // incoming socket transfer, sleep 1s"): not something an operator acts on. A failed
    // hand-over is still reported by the bootstrap and the server modules. Its connection pool
    // logs an ERROR when two requests race for one idle connection ("failed to acquire reusable
    // stream"; the loser opens a new connection): silenced, its submodules (connect, TLS) kept.
    let filter = EnvFilter::try_from_env("PAYGATE_LOG").unwrap_or_else(|_| {
        EnvFilter::new(concat!(
            "info,pingora_core=warn,pingora_proxy=warn,pingora_core::server::transfer_fd=off,",
            "pingora_core::connectors=off,pingora_core::connectors::l4=warn,",
            "pingora_core::connectors::tls=warn,pingora_core::connectors::http=warn"
        ))
    });
    let provider = telemetry.map(provider).transpose()?.flatten();
    // One filter for both layers (what is logged is what is traced: paygate's INFO spans, its
    // libraries' warnings). Per-layer filters were tried first: with PostgreSQL's driver
    // emitting events every layer filters out, a following span was lost to the traces.
    let otel = provider
        .as_ref()
        .map(|p| tracing_opentelemetry::layer().with_tracer(p.tracer("paygate")));
    let registry = tracing_subscriber::registry().with(filter).with(otel);
    let fmt = tracing_subscriber::fmt::layer();
    if std::env::var("PAYGATE_LOG_FORMAT").as_deref() == Ok("json") {
        registry.with(fmt.json()).init();
    } else {
        registry.with(fmt).init();
    }
    if let (Some(t), Some(_)) = (telemetry, &provider) {
        paygate_x402::traces::enable();
        tracing::info!(
            endpoint = t.otlp_endpoint.trim(),
            sample_ratio = t.sample_ratio,
            "exporting traces over OTLP"
        );
    }
    Ok(Traces(provider))
}

/// Keeps the tracer provider; dropped at exit, it exports what is still batched.
pub struct Traces(Option<SdkTracerProvider>);

impl Drop for Traces {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            if let Err(e) = p.shutdown() {
                tracing::warn!(error = %e, "traces: the last batch was not exported");
            }
        }
    }
}

/// The tracer provider `cfg` asks for (`None` when its endpoint is empty), exporting over
/// OTLP/HTTP; the W3C trace-context propagator installed with it.
fn provider(cfg: &TelemetryConfig) -> anyhow::Result<Option<SdkTracerProvider>> {
    let endpoint = cfg.otlp_endpoint.trim().trim_end_matches('/');
    if endpoint.is_empty() {
        return Ok(None);
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(format!("{endpoint}/v1/traces"))
        .build()?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            cfg.sample_ratio,
        ))))
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name(cfg.service_name.clone())
                .build(),
        )
        .build();
    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
    Ok(Some(provider))
}
