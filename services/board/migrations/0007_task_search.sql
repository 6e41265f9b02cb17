-- Text search over tasks (GET /tasks?q=): an FTS5 index of title, identifier and description.
--
-- External content: the index holds no copy of the text, only the trigram postings, and reads the
-- text back from `tasks` by rowid. The triggers below keep it equal to the table on every write,
-- raw writers included. The trigram tokenizer answers "contains this text" (case-insensitive),
-- the same question the portable LIKE path of queries/tasks.py asks, so both engines agree.
-- A `VACUUM` may renumber the implicit rowids of `tasks`; after one, run
-- `INSERT INTO tasks_search(tasks_search) VALUES ('rebuild')`.
CREATE VIRTUAL TABLE tasks_search USING fts5(
    title, identifier, description,
    content = 'tasks', content_rowid = 'rowid', tokenize = 'trigram'
);

CREATE TRIGGER tasks_search_after_insert AFTER INSERT ON tasks
BEGIN
    INSERT INTO tasks_search (rowid, title, identifier, description)
    VALUES (NEW.rowid, NEW.title, NEW.identifier, NEW.description);
END;

CREATE TRIGGER tasks_search_after_delete AFTER DELETE ON tasks
BEGIN
    INSERT INTO tasks_search (tasks_search, rowid, title, identifier, description)
    VALUES ('delete', OLD.rowid, OLD.title, OLD.identifier, OLD.description);
END;

-- Only a change of the indexed text touches the index: claims, heartbeats and moves do not.
CREATE TRIGGER tasks_search_after_update AFTER UPDATE OF title, identifier, description ON tasks
BEGIN
    INSERT INTO tasks_search (tasks_search, rowid, title, identifier, description)
    VALUES ('delete', OLD.rowid, OLD.title, OLD.identifier, OLD.description);
    INSERT INTO tasks_search (rowid, title, identifier, description)
    VALUES (NEW.rowid, NEW.title, NEW.identifier, NEW.description);
END;

-- Tasks written before this migration.
INSERT INTO tasks_search (tasks_search) VALUES ('rebuild');
