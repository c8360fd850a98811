-- Paid requests counted by the protocol they came in (issue 53): of `paid`, those paid in MPP.
ALTER TABLE metric_buckets ADD COLUMN paid_mpp bigint NOT NULL DEFAULT 0;
