-- MCP Streamable HTTP sessions: the client's `initialize`, so any node can serve a session
-- another node opened. (Leases are PostgreSQL advisory locks: no table.)

CREATE TABLE mcp_sessions (
    id         text PRIMARY KEY,
    state      text NOT NULL,
    created_at bigint NOT NULL
);
CREATE INDEX mcp_sessions_by_age ON mcp_sessions (created_at);
