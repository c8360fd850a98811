//! How sled records and keys are written: JSON values, composite keys, the payment ledger's
//! and the channels' index keys. A leaf: every other module of the sled store may use it.

use paygate_domain::model::GatewayPayment;
use paygate_domain::{StoreError, StoreResult};
use serde::{de::DeserializeOwned, Serialize};

pub(super) fn backend<E: std::fmt::Display>(e: E) -> StoreError {
    StoreError::Backend(e.to_string())
}

pub(super) fn enc<T: Serialize>(v: &T) -> StoreResult<Vec<u8>> {
    serde_json::to_vec(v).map_err(backend)
}

pub(super) fn dec<T: DeserializeOwned>(b: &[u8]) -> StoreResult<T> {
    serde_json::from_slice(b).map_err(backend)
}

/// `a \0 b`: composite keys scoped by organisation (ids and slugs never contain NUL).
pub(super) fn key2(a: &str, b: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(a.len() + b.len() + 1);
    k.extend_from_slice(a.as_bytes());
    k.push(0);
    k.extend_from_slice(b.as_bytes());
    k
}

pub(super) fn prefix(a: &str) -> Vec<u8> {
    let mut k = a.as_bytes().to_vec();
    k.push(0);
    k
}

/// The ledger index keys of `p`: `o|r|p|s \0 org [\0 route|payer|status] \0 id`.
pub(super) fn ledger_keys(p: &GatewayPayment) -> [Vec<u8>; 4] {
    [
        ledger_prefix(&p.org_id, None, &p.id),
        ledger_prefix(&p.org_id, Some(("r", &p.route_id)), &p.id),
        ledger_prefix(&p.org_id, Some(("p", &p.payer.to_ascii_lowercase())), &p.id),
        ledger_prefix(&p.org_id, Some(("s", p.status.as_str())), &p.id),
    ]
}

/// An index key (or, with an empty `tail`, the prefix of one index's keys for an org).
pub(super) fn ledger_prefix(org: &str, by: Option<(&str, &str)>, tail: &str) -> Vec<u8> {
    let (kind, value) = by.unwrap_or(("o", ""));
    let mut k = key2(kind, org);
    if by.is_some() {
        k.push(0);
        k.extend_from_slice(value.as_bytes());
    }
    k.push(0);
    k.extend_from_slice(tail.as_bytes());
    k
}

/// The key of channel `id` in its organisation's index.
pub(super) fn org_key(org_id: &str, id: &[u8]) -> Vec<u8> {
    let mut k = prefix(org_id);
    k.extend_from_slice(id);
    k
}
