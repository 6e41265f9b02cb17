-- Taskloom board schema, generation 7, on PostgreSQL (../0007_task_search.sql on SQLite).
--
-- SQLite answers GET /tasks?q= from an FTS5 trigram index (tasks_search) kept by triggers.
-- PostgreSQL has no FTS5; queries/tasks.py's portable path asks the same question ("contains this
-- text", ASCII case-insensitive) as `lower(column) LIKE '%word%'`, and pg_trgm's trigram GIN
-- indexes on exactly those expressions answer it without reading every row. pg_trgm ships with
-- PostgreSQL and is a trusted extension: the database's owner may create it.

CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE INDEX tasks_title_trigrams ON tasks USING gin (lower(title) gin_trgm_ops);
CREATE INDEX tasks_identifier_trigrams ON tasks USING gin (lower(identifier) gin_trgm_ops);
CREATE INDEX tasks_description_trigrams ON tasks USING gin (lower(description) gin_trgm_ops);

INSERT INTO schema_version (version, applied_at)
VALUES (7, to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'));
