"""The documents index's SQLite schema (runtime.documents.index): its tables, the FTS5 index over the chunks and
the triggers that keep it and the generation counter in step. `SCHEMA_VERSION` is what `PRAGMA user_version`
says of a file written with it; a file with a lower one is brought up to it."""

SCHEMA_VERSION = 2  # 2: the generation counter
SCHEMA = """
CREATE TABLE IF NOT EXISTS collections (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    created REAL NOT NULL,
    embedding_model TEXT  -- the model whose vectors `embeddings` holds for this collection; NULL: none yet
);
-- What was added (folders and files, walked again by sync) and what was removed from under them (excluded).
CREATE TABLE IF NOT EXISTS roots (
    collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
    path BLOB NOT NULL,
    excluded INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (collection_id, path)
);
CREATE TABLE IF NOT EXISTS files (
    id INTEGER PRIMARY KEY,
    collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
    path BLOB NOT NULL,
    format TEXT,
    size INTEGER,      -- NULL when it could not be read: sync tries it again
    mtime_ns INTEGER,
    sha256 TEXT,
    state TEXT NOT NULL CHECK (state IN ('pending', 'indexed', 'error')),
    error TEXT,        -- one line, when state = 'error'
    chunks INTEGER NOT NULL DEFAULT 0,
    indexed_at REAL,
    UNIQUE (collection_id, path)
);
CREATE INDEX IF NOT EXISTS files_pending ON files(state) WHERE state = 'pending';
CREATE TABLE IF NOT EXISTS chunks (
    id INTEGER PRIMARY KEY,
    file_id INTEGER NOT NULL REFERENCES files(id) ON DELETE CASCADE,
    ordinal INTEGER NOT NULL,
    text TEXT NOT NULL,
    heading TEXT,
    page INTEGER,
    first_line INTEGER,
    last_line INTEGER,
    UNIQUE (file_id, ordinal)
);
-- External content: the text lives once, in chunks; the triggers keep the index in step in the same transaction.
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(
    text, heading, content='chunks', content_rowid='id', tokenize='porter unicode61 remove_diacritics 2'
);
CREATE TRIGGER IF NOT EXISTS chunks_ai AFTER INSERT ON chunks BEGIN
    INSERT INTO chunks_fts(rowid, text, heading) VALUES (new.id, new.text, new.heading);
END;
CREATE TRIGGER IF NOT EXISTS chunks_ad AFTER DELETE ON chunks BEGIN
    INSERT INTO chunks_fts(chunks_fts, rowid, text, heading) VALUES ('delete', old.id, old.text, old.heading);
END;
CREATE TRIGGER IF NOT EXISTS chunks_au AFTER UPDATE ON chunks BEGIN
    INSERT INTO chunks_fts(chunks_fts, rowid, text, heading) VALUES ('delete', old.id, old.text, old.heading);
    INSERT INTO chunks_fts(rowid, text, heading) VALUES (new.id, new.text, new.heading);
END;
-- Dense vectors beside BM25: float32 little-endian, one row per chunk, gone with its chunk.
CREATE TABLE IF NOT EXISTS embeddings (
    chunk_id INTEGER PRIMARY KEY REFERENCES chunks(id) ON DELETE CASCADE,
    model TEXT NOT NULL,
    vector BLOB NOT NULL
);
-- One number that grows with every chunk or vector written or deleted (cascades included, by any process):
-- a reader keeps what it loaded (the vectors as one matrix) until it changes.
CREATE TABLE IF NOT EXISTS generation (id INTEGER PRIMARY KEY CHECK (id = 1), n INTEGER NOT NULL);
INSERT OR IGNORE INTO generation VALUES (1, 0);
CREATE TRIGGER IF NOT EXISTS chunks_gen_ai AFTER INSERT ON chunks BEGIN UPDATE generation SET n = n + 1; END;
CREATE TRIGGER IF NOT EXISTS chunks_gen_ad AFTER DELETE ON chunks BEGIN UPDATE generation SET n = n + 1; END;
CREATE TRIGGER IF NOT EXISTS embeddings_gen_ai AFTER INSERT ON embeddings BEGIN UPDATE generation SET n = n + 1; END;
CREATE TRIGGER IF NOT EXISTS embeddings_gen_ad AFTER DELETE ON embeddings BEGIN UPDATE generation SET n = n + 1; END;
CREATE TRIGGER IF NOT EXISTS embeddings_gen_au AFTER UPDATE ON embeddings BEGIN UPDATE generation SET n = n + 1; END;
"""
