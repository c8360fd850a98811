-- Payout corridors: corridors (one per organisation and currency), quotes (single-use),
-- payouts (`initiating` marks those the provider has not confirmed: what payout
-- reconciliation drives), their Idempotency-Keys, processed provider events and events that
-- arrived before their payout was known.

CREATE TABLE corridors (
    id            text PRIMARY KEY,
    org_id        text NOT NULL,
    dest_currency text NOT NULL,
    doc           text NOT NULL,
    CONSTRAINT corridors_one_per_currency UNIQUE (org_id, dest_currency)
);

CREATE TABLE quotes (
    id     text PRIMARY KEY,
    org_id text NOT NULL,
    doc    text NOT NULL
);

CREATE TABLE payouts (
    id             text PRIMARY KEY,
    org_id         text NOT NULL,
    corridor_id    text NOT NULL,
    cpn_payment_id text UNIQUE,
    initiating     boolean NOT NULL,
    created_at     text NOT NULL,
    doc            text NOT NULL
);
CREATE INDEX payouts_initiating ON payouts (id) WHERE initiating;
CREATE INDEX payouts_by_corridor ON payouts (corridor_id, created_at);

CREATE TABLE pay_keys (
    org_id text NOT NULL,
    key    text NOT NULL,
    doc    text NOT NULL,
    PRIMARY KEY (org_id, key)
);

CREATE TABLE payout_events (
    event_key   text PRIMARY KEY,
    received_at text NOT NULL
);

CREATE TABLE payout_orphans (
    cpn_payment_id text NOT NULL,
    event_key      text NOT NULL,
    raw            bytea NOT NULL,
    PRIMARY KEY (cpn_payment_id, event_key)
);
