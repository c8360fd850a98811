//! paygate's hot path: one Pingora `ProxyHttp` that owns the public listener. `/gateway/*` is
//! decided here (`decide.rs`: challenge, refusal, or the payment service takes the payment and
//! the request is forwarded to the route's upstream) and answered once (`answer.rs`). Every
//! other path is passed to the control plane on its loopback address.

mod answer;
mod ctx;
mod decide;
mod gateway;
mod headers;
pub mod limits;
mod service;
mod traces;
mod upstream;
pub use gateway::{Gateway, GatewayParts, ProxySettings};

/// The benchmark binary's free pass: a request carrying `x-paygate-bench-free` skips the payment
/// step (the proxy path's floor, measured with the same client as paid requests). Off unless
/// the `paygate-bench` binary's `main` turns it on before serving: nothing in a configuration
/// or the environment reaches it, and the `paygate` binary never calls [`allow_bench_free_pass`].
/// (A run-time switch rather than a cargo feature, so every benchmark binary is built by one
/// cargo invocation with one feature set: issue 54.)
static BENCH_FREE_PASS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Turns the free pass on for this process (the `paygate-bench` binary only).
pub fn allow_bench_free_pass() {
    BENCH_FREE_PASS.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Whether this process honours `x-paygate-bench-free`.
pub fn bench_free_pass() -> bool {
    BENCH_FREE_PASS.load(std::sync::atomic::Ordering::Relaxed)
}
