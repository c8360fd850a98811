-- Payment channels (x402 batch-settlement): one row per channel, its record as JSON; every
-- write a compare-and-set on `version`. `unclaimed` marks channels with a charge the claimer
-- has not claimed on chain yet.

CREATE TABLE channels (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL,
    version BIGINT NOT NULL,
    unclaimed BOOLEAN NOT NULL,
    doc TEXT NOT NULL
);
CREATE INDEX channels_by_org ON channels (org_id);
CREATE INDEX channels_unclaimed ON channels (id) WHERE unclaimed;
