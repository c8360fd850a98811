-- x402 payment identifiers (the payment-identifier extension): per organisation and client id,
-- the payment they name and, once answered, the answer a retry gets back. Purged after the
-- idempotency window.

CREATE TABLE payment_ids (
    org_id TEXT NOT NULL,
    key TEXT NOT NULL,
    created_at_unix BIGINT NOT NULL,
    doc TEXT NOT NULL,
    PRIMARY KEY (org_id, key)
);
CREATE INDEX payment_ids_by_age ON payment_ids (created_at_unix);
