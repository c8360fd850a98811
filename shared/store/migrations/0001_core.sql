-- paygate's store on PostgreSQL, first part: organisations, API keys, routes with their path
-- index and idempotency records, counters (plan usage, MCP spending) and metric buckets.
-- Each record is kept whole as JSON text (`doc`, the same serde form the sled store writes; text,
-- not jsonb, which refuses the `\u0000` a client may put in a name); the columns beside it are
-- what constraints and queries need.

CREATE TABLE orgs (
    id   text PRIMARY KEY,
    slug text NOT NULL UNIQUE,
    doc  text NOT NULL
);

CREATE TABLE api_keys (
    key_id text PRIMARY KEY,
    org_id text NOT NULL,
    doc    text NOT NULL
);
CREATE INDEX api_keys_by_org ON api_keys (org_id);

CREATE TABLE routes (
    org_id text NOT NULL,
    id     text NOT NULL,
    path   text NOT NULL,
    doc    text NOT NULL,
    PRIMARY KEY (org_id, id),
    CONSTRAINT routes_path_unique UNIQUE (org_id, path)
);

CREATE TABLE idempotency (
    org_id          text NOT NULL,
    key             text NOT NULL,
    created_at_unix bigint NOT NULL,
    doc             text NOT NULL,
    PRIMARY KEY (org_id, key)
);
CREATE INDEX idempotency_by_age ON idempotency (created_at_unix);

CREATE TABLE plan_usage (
    org_id text NOT NULL,
    month  text NOT NULL,
    count  bigint NOT NULL,
    PRIMARY KEY (org_id, month)
);

CREATE TABLE mcp_spend (
    org_id text NOT NULL,
    day    text NOT NULL,
    total  bigint NOT NULL CHECK (total >= 0),
    PRIMARY KEY (org_id, day)
);

CREATE TABLE metric_buckets (
    org_id           text NOT NULL,
    minute           bigint NOT NULL,
    total            bigint NOT NULL,
    unpaid402        bigint NOT NULL,
    paid             bigint NOT NULL,
    errors           bigint NOT NULL,
    challenge_us_sum bigint NOT NULL,
    challenge_count  bigint NOT NULL,
    settle_ms_sum    bigint NOT NULL,
    settle_count     bigint NOT NULL,
    PRIMARY KEY (org_id, minute)
);
