-- Revenue and usage roll-ups (GET /api/gateway/metrics): per organisation, route (`''` is the
-- organisation's total), tier (1 hourly, 2 daily) and period start (unix seconds), with a
-- settlement-latency histogram (bins of paygate_domain::rollup::SETTLE_EDGES_MS) that every
-- node adds to element-wise.

CREATE TABLE metric_rollups (
    org_id        text NOT NULL,
    tier          smallint NOT NULL,
    period        bigint NOT NULL,
    route_id      text NOT NULL,
    requests      bigint NOT NULL,
    paid          bigint NOT NULL,
    errors        bigint NOT NULL,
    revenue       bigint NOT NULL,
    settle_count  bigint NOT NULL,
    settle_ms_sum bigint NOT NULL,
    settle_hist   bigint[] NOT NULL,
    PRIMARY KEY (org_id, tier, period, route_id)
);

-- The minute buckets count revenue too (the window figures of the same endpoint).
ALTER TABLE metric_buckets ADD COLUMN revenue bigint NOT NULL DEFAULT 0;
