//! Access windows on sled: `windows` holds each payer's window by `org \0 route \0 payer`,
//! `sign_in_nonces` the spent nonces (the unix second they are kept until, big-endian). A
//! sign-in reads and writes both in one transaction.

use super::*;
use crate::traits::WindowStore;
use paygate_domain::window::{check_call, window_key, AccessWindow, CallCheck, WindowUse};

#[async_trait]
impl WindowStore for SledStore {
    async fn open_window(&self, w: &AccessWindow) -> StoreResult<()> {
        let key = window_key(&w.org_id, &w.route_id, &w.payer);
        let bytes = enc(w)?;
        let windows = &self.windows;
        windows
            .transaction(|t| {
                if let Some(old) = t.get(key.as_bytes())? {
                    let old: AccessWindow = dec(&old).or_else(abort)?;
                    if old.payment_id == w.payment_id {
                        return Ok(());
                    }
                }
                t.insert(key.as_bytes(), bytes.as_slice())?;
                Ok(())
            })
            .map_err(tx_err)?;
        self.durable().await
    }

    async fn use_window(
        &self,
        org_id: &str,
        route_id: &str,
        payer: &str,
        nonce: &str,
        nonce_until: u64,
        now: u64,
    ) -> StoreResult<WindowUse> {
        let key = window_key(org_id, route_id, payer);
        let outcome = (&self.windows, &self.sign_in_nonces)
            .transaction(|(windows, nonces)| {
                let stored = match windows.get(key.as_bytes())? {
                    Some(v) => Some(dec::<AccessWindow>(&v).or_else(abort)?),
                    None => None,
                };
                let mut w = match check_call(stored, now) {
                    CallCheck::Serves(w) => w,
                    CallCheck::Refused(outcome) => return Ok(outcome),
                };
                if nonces.get(nonce.as_bytes())?.is_some() {
                    return Ok(WindowUse::NonceUsed);
                }
                nonces.insert(nonce.as_bytes(), &nonce_until.to_be_bytes()[..])?;
                let granted = w.count_call();
                windows.insert(key.as_bytes(), enc(&w).or_else(abort)?)?;
                Ok(granted)
            })
            .map_err(tx_err)?;
        if matches!(outcome, WindowUse::Granted(_)) {
            self.durable().await?;
        }
        Ok(outcome)
    }

    async fn return_window_call(
        &self,
        org_id: &str,
        route_id: &str,
        payer: &str,
        payment_id: &str,
    ) -> StoreResult<bool> {
        let key = window_key(org_id, route_id, payer);
        let returned = self
            .windows
            .transaction(|t| {
                let Some(stored) = t.get(key.as_bytes())? else {
                    return Ok(false);
                };
                let mut w: AccessWindow = dec(&stored).or_else(abort)?;
                if !w.give_back_call(payment_id) {
                    return Ok(false);
                }
                t.insert(key.as_bytes(), enc(&w).or_else(abort)?)?;
                Ok(true)
            })
            .map_err(tx_err)?;
        if returned {
            self.durable().await?;
        }
        Ok(returned)
    }

    async fn active_windows(
        &self,
        org_id: &str,
        payer: Option<&str>,
        now: u64,
    ) -> StoreResult<Vec<AccessWindow>> {
        let mut out = Vec::new();
        for item in self.windows.scan_prefix(prefix(org_id)) {
            let (_, v) = item.map_err(backend)?;
            let w: AccessWindow = dec(&v)?;
            let theirs = payer.is_none_or(|p| p.eq_ignore_ascii_case(&w.payer));
            if theirs && w.serves(now) {
                out.push(w);
            }
        }
        out.sort_by(|a, b| a.expires_at.cmp(&b.expires_at).then(a.payer.cmp(&b.payer)));
        Ok(out)
    }

    async fn prune_windows(&self, now: u64) -> StoreResult<usize> {
        let mut gone = 0;
        for item in self.sign_in_nonces.iter() {
            let (k, v) = item.map_err(backend)?;
            if decode_u64(&v).is_none_or(|until| until < now) {
                self.sign_in_nonces.remove(k).map_err(backend)?;
                gone += 1;
            }
        }
        for item in self.windows.iter() {
            let (k, v) = item.map_err(backend)?;
            let w: AccessWindow = dec(&v)?;
            if w.expires_at < now {
                // Only if still this window: a payment may have opened a new one meanwhile.
                if self
                    .windows
                    .compare_and_swap(&k, Some(v), None::<&[u8]>)
                    .map_err(backend)?
                    .is_ok()
                {
                    gone += 1;
                }
            }
        }
        if gone > 0 {
            self.durable().await?;
        }
        Ok(gone)
    }
}
