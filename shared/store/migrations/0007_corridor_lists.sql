-- Lists (GET /corridors, GET /corridors/{id}/payments): a corridor's payouts newest first by
-- id (time-ordered), byte-wise whatever the collation.

DROP INDEX payouts_by_corridor;
CREATE INDEX payouts_by_corridor ON payouts (corridor_id, id COLLATE "C");
