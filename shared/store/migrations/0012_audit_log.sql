-- The audit log (issue 32): every management change, as JSON, listed per organisation newest
-- first (ids are time-ordered).

CREATE TABLE audit_log (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL,
    doc TEXT NOT NULL
);
CREATE INDEX audit_log_by_org ON audit_log (org_id, id DESC);
