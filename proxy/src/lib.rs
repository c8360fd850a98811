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
