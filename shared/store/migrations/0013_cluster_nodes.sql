-- The nodes of a cluster as they last said they were alive (issue 32): how many share the
-- cluster-wide rate limits.

CREATE TABLE cluster_nodes (
    node TEXT PRIMARY KEY,
    seen_unix BIGINT NOT NULL
);
