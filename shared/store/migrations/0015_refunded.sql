-- Refunds counted beside revenue (issue 52): the seller's figures are shown net of refunds.
ALTER TABLE metric_buckets ADD COLUMN refunded bigint NOT NULL DEFAULT 0;
ALTER TABLE metric_rollups ADD COLUMN refunded bigint NOT NULL DEFAULT 0;
