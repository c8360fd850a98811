-- Access windows (issue 31): a payer's window on a route, opened by a payment, its calls counted
-- by the sign-ins it served; and the spent nonces of those sign-ins (single use across every
-- node: the primary key), each kept until its sign-in could no longer be accepted anyway.

CREATE TABLE access_windows (
    org_id TEXT NOT NULL,
    route_id TEXT NOT NULL,
    payer TEXT NOT NULL,
    payment_id TEXT NOT NULL,
    expires_at BIGINT NOT NULL,
    doc TEXT NOT NULL,
    PRIMARY KEY (org_id, route_id, payer)
);
CREATE INDEX access_windows_by_end ON access_windows (expires_at);

CREATE TABLE sign_in_nonces (
    nonce TEXT PRIMARY KEY,
    kept_until BIGINT NOT NULL
);
CREATE INDEX sign_in_nonces_by_end ON sign_in_nonces (kept_until);
