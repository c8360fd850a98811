//! Access windows in PostgreSQL: `access_windows` (one row per organisation, route and payer)
//! and `sign_in_nonces`. A sign-in locks the window's row, then inserts its nonce, in one
//! transaction: two nodes serving sign-ins on one window take turns, and a nonce's primary key
//! refuses a second use.

use super::sql::{backend, doc, json};
use super::PgStore;
use crate::WindowStore;
use async_trait::async_trait;
use paygate_domain::window::{check_call, AccessWindow, CallCheck, WindowUse};
use paygate_domain::StoreResult;
use sqlx::{Postgres, Transaction};

fn big(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The payer's window, its row locked until `tx` ends.
async fn locked(
    tx: &mut Transaction<'_, Postgres>,
    org_id: &str,
    route_id: &str,
    payer: &str,
) -> StoreResult<Option<AccessWindow>> {
    let row = sqlx::query(
        "SELECT doc FROM access_windows WHERE org_id = $1 AND route_id = $2 AND payer = $3 \
         FOR UPDATE",
    )
    .bind(org_id)
    .bind(route_id)
    .bind(payer)
    .fetch_optional(&mut **tx)
    .await
    .map_err(backend)?;
    row.as_ref().map(doc).transpose()
}

/// Writes `w` over its row (locked by [`locked`]).
async fn save(tx: &mut Transaction<'_, Postgres>, w: &AccessWindow) -> StoreResult<()> {
    sqlx::query(
        "UPDATE access_windows SET doc = $4 WHERE org_id = $1 AND route_id = $2 AND payer = $3",
    )
    .bind(&w.org_id)
    .bind(&w.route_id)
    .bind(w.payer.to_ascii_lowercase())
    .bind(json(w)?)
    .execute(&mut **tx)
    .await
    .map_err(backend)?;
    Ok(())
}

#[async_trait]
impl WindowStore for PgStore {
    async fn open_window(&self, w: &AccessWindow) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO access_windows (org_id, route_id, payer, payment_id, expires_at, doc) \
             VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (org_id, route_id, payer) DO UPDATE \
             SET payment_id = EXCLUDED.payment_id, expires_at = EXCLUDED.expires_at, \
                 doc = EXCLUDED.doc \
             WHERE access_windows.payment_id <> EXCLUDED.payment_id",
        )
        .bind(&w.org_id)
        .bind(&w.route_id)
        .bind(w.payer.to_ascii_lowercase())
        .bind(&w.payment_id)
        .bind(big(w.expires_at))
        .bind(json(w)?)
        .execute(&self.pool)
        .await
        .map_err(backend)?;
        Ok(())
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
        let payer = payer.to_ascii_lowercase();
        let mut tx = self.pool.begin().await.map_err(backend)?;
        let stored = locked(&mut tx, org_id, route_id, &payer).await?;
        let mut w = match check_call(stored, now) {
            CallCheck::Serves(w) => w,
            CallCheck::Refused(outcome) => return Ok(outcome),
        };
        let spent = sqlx::query(
            "INSERT INTO sign_in_nonces (nonce, kept_until) VALUES ($1, $2) \
             ON CONFLICT (nonce) DO NOTHING",
        )
        .bind(nonce)
        .bind(big(nonce_until))
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
        if spent.rows_affected() == 0 {
            return Ok(WindowUse::NonceUsed);
        }
        let granted = w.count_call();
        save(&mut tx, &w).await?;
        tx.commit().await.map_err(backend)?;
        Ok(granted)
    }

    async fn return_window_call(
        &self,
        org_id: &str,
        route_id: &str,
        payer: &str,
        payment_id: &str,
    ) -> StoreResult<bool> {
        let payer = payer.to_ascii_lowercase();
        let mut tx = self.pool.begin().await.map_err(backend)?;
        let Some(mut w) = locked(&mut tx, org_id, route_id, &payer).await? else {
            return Ok(false);
        };
        if !w.give_back_call(payment_id) {
            return Ok(false);
        }
        save(&mut tx, &w).await?;
        tx.commit().await.map_err(backend)?;
        Ok(true)
    }

    async fn active_windows(
        &self,
        org_id: &str,
        payer: Option<&str>,
        now: u64,
    ) -> StoreResult<Vec<AccessWindow>> {
        let rows: Vec<AccessWindow> = self
            .all(
                sqlx::query(
                    "SELECT doc FROM access_windows WHERE org_id = $1 AND expires_at > $2 \
                     AND ($3::TEXT IS NULL OR payer = $3) ORDER BY expires_at, payer",
                )
                .bind(org_id)
                .bind(big(now))
                .bind(payer.map(str::to_ascii_lowercase)),
            )
            .await?;
        Ok(rows.into_iter().filter(|w| w.serves(now)).collect())
    }

    async fn prune_windows(&self, now: u64) -> StoreResult<usize> {
        let nonces = sqlx::query("DELETE FROM sign_in_nonces WHERE kept_until < $1")
            .bind(big(now))
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        let windows = sqlx::query("DELETE FROM access_windows WHERE expires_at < $1")
            .bind(big(now))
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        Ok((nonces.rows_affected() + windows.rows_affected()) as usize)
    }
}
