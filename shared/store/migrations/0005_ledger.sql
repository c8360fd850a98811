-- The payments ledger (GET /api/payments): newest first by id (payment ids are time-ordered,
-- so a time range is an id range), filtered by route, payer or status, each served by an
-- index. Ids compare byte-wise ("C"), whatever the database's collation.

ALTER TABLE payments ADD COLUMN payer text NOT NULL DEFAULT '';
UPDATE payments SET payer = lower(doc::jsonb ->> 'payer');
DROP INDEX payments_by_org;
CREATE INDEX payments_ledger ON payments (org_id, id COLLATE "C");
CREATE INDEX payments_ledger_route ON payments (org_id, route_id, id COLLATE "C");
CREATE INDEX payments_ledger_payer ON payments (org_id, payer, id COLLATE "C");
CREATE INDEX payments_ledger_status ON payments (org_id, status, id COLLATE "C");
