//! paygate's end-to-end tests, one test binary (built and linked once): each module starts the
//! real `paygate` binary (harness in `common/`) against real components on loopback: anvil with
//! Circle's USDC, PostgreSQL (`PAYGATE_TEST_BACKEND=postgres` runs the suite on it), the
//! official x402 clients. Module names are the test names' first part (`payments::...`); the
//! crash harnesses are `crash*::`, the cluster tests `cluster*::`.

mod common;

mod audit;
mod auth_capture;
mod challenge;
mod channel_contract;
mod channels;
mod cli;
mod cluster;
mod cluster_faults;
mod cluster_limits;
mod cluster_windows;
mod console;
mod corridors;
mod crash;
mod crash_auth_capture;
mod crash_upto;
mod crash_windows;
mod edge;
mod escrow_reclaim;
mod facilitator;
mod facilitator_ways;
mod forwarding;
mod fuzz_replay;
mod interop;
mod jwe_interop;
mod keys;
mod ledger;
mod ledger_audit;
mod management;
mod mcp;
mod mcp_x402;
mod metrics;
mod money_model;
mod mpp;
mod mpp_origin;
mod openapi;
mod payments;
mod payout_funding;
mod permit2;
mod permit2_contracts;
mod readme;
mod receipts;
mod self_service;
mod settleable;
mod smart_wallets;
mod soak;
mod telemetry;
mod tls;
mod webhooks;
mod windows;
