-- Seller webhooks (issue 32): endpoints per organisation, and the durable queue of deliveries.
-- A delivery is due while `pending` and its next attempt and lease have passed; the oldest
-- pending one of an endpoint and object goes first (`object_key` = endpoint \0 object).

CREATE TABLE webhook_endpoints (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL,
    doc TEXT NOT NULL
);
CREATE INDEX webhook_endpoints_by_org ON webhook_endpoints (org_id, id);

CREATE TABLE webhook_deliveries (
    id TEXT PRIMARY KEY,
    endpoint_id TEXT NOT NULL,
    object_key TEXT NOT NULL,
    pending BOOLEAN NOT NULL,
    next_attempt_ms BIGINT NOT NULL,
    lease_until_ms BIGINT NOT NULL,
    doc TEXT NOT NULL
);
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (id) WHERE pending;
CREATE INDEX webhook_deliveries_pending_object ON webhook_deliveries (object_key, id) WHERE pending;
CREATE INDEX webhook_deliveries_by_endpoint ON webhook_deliveries (endpoint_id, id DESC);
