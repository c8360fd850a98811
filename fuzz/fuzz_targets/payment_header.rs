//! The payment header decoder (`X-PAYMENT` v1, `PAYMENT-SIGNATURE` v2), then what the proxy does
//! next with a decoded payload: extract the authorization and check its signature; for a
//! Permit2 payload (`exact` through Permit2, `upto`) its digest, the EIP-2612 permit it may
//! carry (`eip2612GasSponsoring`) and the proxy call settling it; a smart wallet's ERC-6492
//! wrapping of the signature.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| paygate_fuzz::payment_header(data));
