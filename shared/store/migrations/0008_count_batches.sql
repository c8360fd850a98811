-- The metrics aggregators' flushes taken, by batch id, so a flush retried after an unknown
-- outcome (an answer lost, a flush cut short at exit) is added once. Ids sort by time; rows older
-- than a day are deleted by the flushes themselves.

CREATE TABLE count_batches (
    id TEXT COLLATE "C" PRIMARY KEY
);
