-- Gateway payments and the replay guard: which payment holds each authorization's nonce.
-- `open` marks the payments reconciliation still has to decide (RESERVED or UNKNOWN), indexed
-- so reconciliation never walks history.

CREATE TABLE payments (
    id         text PRIMARY KEY,
    nonce_key  text NOT NULL,
    org_id     text NOT NULL,
    route_id   text NOT NULL,
    status     text NOT NULL,
    open       boolean NOT NULL,
    created_at text NOT NULL,
    doc        text NOT NULL
);
CREATE INDEX payments_open ON payments (id) WHERE open;
CREATE INDEX payments_by_org ON payments (org_id, created_at);

CREATE TABLE nonces (
    nonce_key  text PRIMARY KEY,
    payment_id text NOT NULL REFERENCES payments (id)
);
