-- user_version 5
-- index memories_change
CREATE INDEX memories_change ON memories (change_seq);
-- index memories_live
CREATE INDEX memories_live ON memories (scope_id, last_seen_at) WHERE superseded_by IS NULL;
-- index memories_scope
CREATE INDEX memories_scope ON memories (scope_id);
-- index memories_successor
CREATE INDEX memories_successor ON memories (superseded_by) WHERE superseded_by IS NOT NULL;
-- index rollouts_pending
CREATE INDEX rollouts_pending ON rollouts (scope_id, staged_at, seq) WHERE consumed_at IS NULL AND parked_at IS NULL;
-- table memories
CREATE TABLE memories ( rowid INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, scope_id TEXT NOT NULL, kind TEXT NOT NULL, content TEXT NOT NULL, tags TEXT NOT NULL DEFAULT '[]', confidence REAL NOT NULL, source_run_id TEXT, created_at REAL, seen_count INTEGER NOT NULL DEFAULT 1, last_seen_at REAL, superseded_by TEXT, embedding BLOB, ngrams INTEGER NOT NULL DEFAULT 0 , change_seq INTEGER NOT NULL DEFAULT 0);
-- table meta
CREATE TABLE meta ( key TEXT PRIMARY KEY, value TEXT NOT NULL );
-- table rollouts
CREATE TABLE rollouts ( seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, scope_id TEXT NOT NULL, run_id TEXT, messages TEXT NOT NULL, final TEXT NOT NULL, staged_at REAL NOT NULL, consumed_at REAL , failed_passes INTEGER NOT NULL DEFAULT 0, parked_at REAL, split_size INTEGER, parked_batch INTEGER, failed_as TEXT);
