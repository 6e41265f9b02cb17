-- Taskloom board schema, generation 1, on PostgreSQL: the same tables, columns, defaults and rules
-- as ../0001_initial.sql (SQLite), so a number in schema_version means one schema on both engines.
--
-- How the SQLite types map:
--   INTEGER        → BIGINT (SQLite's integers are 64-bit)
--   TEXT           → TEXT COLLATE "C": byte order, as SQLite's BINARY collation, so ORDER BY, UNIQUE
--                    and comparisons on text mean the same whatever locale the database was made with
--   *_json TEXT    → TEXT (the text the board wrote, byte for byte; JSON is read in Python)
--   timestamps     → TEXT, ISO-8601 UTC with milliseconds as shared/timestamps.py writes them
--
-- Every trigger raises the exact text its SQLite twin passes to RAISE(ABORT, …), so one error
-- translation serves both engines (the text arrives as the error's primary message, SQLSTATE P0001).
--
-- Concurrency. SQLite has one writer, so a trigger's reads cannot race another writer. Here every
-- rule that reads other rows first takes the global_revision row lock (FOR UPDATE) and only then
-- reads; under READ COMMITTED each later statement sees what the previous holder committed. The
-- same lock orders revisions: it is held from the first bump to COMMIT, so revisions are assigned
-- and become visible in commit order. The store takes it as the first statement of every write.

-- Which migrations this database has had, one row each; the store refuses a database whose
-- highest number is newer than the files it ships. Each file records itself as its last statement.
CREATE TABLE schema_version (
    version    BIGINT PRIMARY KEY CHECK (version >= 1),
    applied_at TEXT COLLATE "C" NOT NULL
);

CREATE TABLE global_revision (
    singleton BIGINT PRIMARY KEY CHECK (singleton = 1),
    revision  BIGINT NOT NULL
);
INSERT INTO global_revision (singleton, revision) VALUES (1, 0);

-- board_id, retention floor and settings; board_id is filled by the store when it creates the database.
CREATE TABLE board_meta (
    key   TEXT COLLATE "C" PRIMARY KEY,
    value TEXT COLLATE "C" NOT NULL
);
INSERT INTO board_meta (key, value) VALUES ('floor', '0');

-- The status graph (SPEC §4.3). The Python table in shared/domain.py must equal it.
CREATE TABLE status_transitions (
    from_status TEXT COLLATE "C" NOT NULL,
    to_status   TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (from_status, to_status)
);
INSERT INTO status_transitions (from_status, to_status) VALUES
    ('backlog', 'todo'), ('backlog', 'canceled'),
    ('todo', 'backlog'), ('todo', 'in_progress'), ('todo', 'blocked'), ('todo', 'canceled'),
    ('in_progress', 'todo'), ('in_progress', 'awaiting'), ('in_progress', 'blocked'),
    ('in_progress', 'in_review'), ('in_progress', 'canceled'),
    ('awaiting', 'todo'), ('awaiting', 'in_progress'), ('awaiting', 'canceled'),
    ('blocked', 'todo'), ('blocked', 'in_progress'), ('blocked', 'in_review'), ('blocked', 'canceled'),
    ('in_review', 'done'), ('in_review', 'in_progress'), ('in_review', 'blocked'), ('in_review', 'todo'),
    ('done', 'todo'), ('canceled', 'todo');

CREATE TABLE projects (
    -- SQLite: id GLOB '[a-z0-9]*' AND id NOT GLOB '*[^a-z0-9-]*' (ranges by code point, as here).
    id             TEXT COLLATE "C" PRIMARY KEY CHECK (id ~ '^[a-z0-9][a-z0-9-]*$' AND length(id) <= 32),
    name           TEXT COLLATE "C" NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    prefix         TEXT COLLATE "C" NOT NULL UNIQUE,
    workspace_path TEXT COLLATE "C" UNIQUE CHECK (workspace_path IS NULL OR substr(workspace_path, 1, 1) = '/'),
    readme         TEXT COLLATE "C" NOT NULL DEFAULT '',
    meta_json      TEXT COLLATE "C" NOT NULL DEFAULT '{}',
    settings_json  TEXT COLLATE "C" NOT NULL DEFAULT '{}',
    next_number    BIGINT NOT NULL DEFAULT 1,
    revision       BIGINT,
    created_at     TEXT COLLATE "C" NOT NULL,
    updated_at     TEXT COLLATE "C" NOT NULL
);

-- The assignee/reporter dictionary. Counters move with the task event that named them.
CREATE TABLE actors (
    kind          TEXT COLLATE "C" NOT NULL,
    id            TEXT COLLATE "C" NOT NULL,
    use_count     BIGINT NOT NULL DEFAULT 0,
    first_seen_at TEXT COLLATE "C" NOT NULL,
    last_seen_at  TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (kind, id)
);

CREATE TABLE tasks (
    id              TEXT COLLATE "C" PRIMARY KEY,
    project_id      TEXT COLLATE "C" NOT NULL REFERENCES projects (id),
    number          BIGINT NOT NULL,
    identifier      TEXT COLLATE "C" NOT NULL UNIQUE,
    title           TEXT COLLATE "C" NOT NULL CHECK (length(title) BETWEEN 1 AND 500),
    description     TEXT COLLATE "C" NOT NULL DEFAULT '',
    kind            TEXT COLLATE "C" NOT NULL DEFAULT 'task' CHECK (kind IN ('task', 'epic', 'bug', 'review')),
    priority        TEXT COLLATE "C" NOT NULL DEFAULT 'medium' CHECK (priority IN ('low', 'medium', 'high', 'urgent')),
    status          TEXT COLLATE "C" NOT NULL DEFAULT 'todo' CHECK (status IN
                        ('backlog', 'todo', 'in_progress', 'awaiting', 'blocked', 'in_review', 'done', 'canceled')),
    labels_json     TEXT COLLATE "C" NOT NULL DEFAULT '[]',
    assignee_kind   TEXT COLLATE "C",
    assignee_id     TEXT COLLATE "C",
    reporter_kind   TEXT COLLATE "C",
    reporter_id     TEXT COLLATE "C",
    claimed_by_kind TEXT COLLATE "C",
    claimed_by      TEXT COLLATE "C",
    claimed_at      TEXT COLLATE "C",
    heartbeat_at    TEXT COLLATE "C",
    delivered_by    TEXT COLLATE "C",
    delivery_round  BIGINT NOT NULL DEFAULT 1 CHECK (delivery_round >= 1),
    acceptance_mode TEXT COLLATE "C" NOT NULL DEFAULT 'review' CHECK (acceptance_mode IN ('review', 'none')),
    waiver_reason   TEXT COLLATE "C",
    awaiting_reason TEXT COLLATE "C",
    blocked_reason  TEXT COLLATE "C",
    idem            TEXT COLLATE "C",
    meta_json       TEXT COLLATE "C" NOT NULL DEFAULT '{}',
    version         BIGINT NOT NULL DEFAULT 1,
    revision        BIGINT,
    terminal_at     TEXT COLLATE "C",
    archived_at     TEXT COLLATE "C",
    created_at      TEXT COLLATE "C" NOT NULL,
    updated_at      TEXT COLLATE "C" NOT NULL,
    UNIQUE (project_id, number),
    CHECK ((assignee_id IS NULL) = (assignee_kind IS NULL)),
    CHECK ((reporter_id IS NULL) = (reporter_kind IS NULL))
);
CREATE INDEX tasks_by_project_status ON tasks (project_id, status);
CREATE INDEX tasks_by_idem ON tasks (idem) WHERE idem IS NOT NULL;

CREATE TABLE labels (
    project_id   TEXT COLLATE "C" NOT NULL REFERENCES projects (id),
    -- lower() under the C collation folds ASCII only, as SQLite's lower() does.
    name         TEXT COLLATE "C" NOT NULL CHECK (name = lower(trim(name)) AND length(name) BETWEEN 1 AND 64),
    use_count    BIGINT NOT NULL DEFAULT 0 CHECK (use_count >= 0),
    created_at   TEXT COLLATE "C" NOT NULL,
    last_used_at TEXT COLLATE "C" NOT NULL,
    archived_at  TEXT COLLATE "C",
    PRIMARY KEY (project_id, name)
);

CREATE TABLE comments (
    id          TEXT COLLATE "C" PRIMARY KEY,
    task_id     TEXT COLLATE "C" NOT NULL REFERENCES tasks (id),
    kind        TEXT COLLATE "C" NOT NULL CHECK (kind IN ('note', 'question', 'discuss', 'decision', 'confirm', 'change', 'defect')),
    body        TEXT COLLATE "C" NOT NULL CHECK (length(body) >= 1),
    actor_kind  TEXT COLLATE "C" NOT NULL,
    actor_id    TEXT COLLATE "C" NOT NULL,
    round       BIGINT NOT NULL,
    created_at  TEXT COLLATE "C" NOT NULL
);
CREATE INDEX comments_by_task ON comments (task_id, created_at);

CREATE TABLE reports (
    id          TEXT COLLATE "C" PRIMARY KEY,
    task_id     TEXT COLLATE "C" NOT NULL REFERENCES tasks (id),
    round       BIGINT NOT NULL,
    body        TEXT COLLATE "C" NOT NULL CHECK (length(body) >= 1),
    actor_kind  TEXT COLLATE "C" NOT NULL,
    actor_id    TEXT COLLATE "C" NOT NULL,
    created_at  TEXT COLLATE "C" NOT NULL
);
CREATE INDEX reports_by_task ON reports (task_id, round);

CREATE TABLE acceptance_items (
    id          TEXT COLLATE "C" PRIMARY KEY,
    task_id     TEXT COLLATE "C" NOT NULL REFERENCES tasks (id),
    position    BIGINT NOT NULL,
    text        TEXT COLLATE "C" NOT NULL CHECK (length(text) BETWEEN 1 AND 2000),
    created_at  TEXT COLLATE "C" NOT NULL
);
CREATE INDEX acceptance_by_task ON acceptance_items (task_id, position);

CREATE TABLE relations (
    id          TEXT COLLATE "C" PRIMARY KEY,
    type        TEXT COLLATE "C" NOT NULL CHECK (type IN ('blocks', 'related', 'parent', 'review_of')),
    source_id   TEXT COLLATE "C" NOT NULL REFERENCES tasks (id),
    target_id   TEXT COLLATE "C" NOT NULL REFERENCES tasks (id),
    created_at  TEXT COLLATE "C" NOT NULL,
    CHECK (source_id <> target_id),
    UNIQUE (type, source_id, target_id)
);
CREATE INDEX relations_by_target ON relations (target_id, type);
CREATE INDEX relations_by_source ON relations (source_id, type);

CREATE TABLE agent_sessions (
    id          TEXT COLLATE "C" PRIMARY KEY,
    task_id     TEXT COLLATE "C" NOT NULL REFERENCES tasks (id),
    owner_kind  TEXT COLLATE "C" NOT NULL,
    owner_id    TEXT COLLATE "C" NOT NULL,
    seg         BIGINT NOT NULL,
    phase       TEXT COLLATE "C" NOT NULL,
    status      TEXT COLLATE "C" NOT NULL DEFAULT 'open',
    created_at  TEXT COLLATE "C" NOT NULL,
    updated_at  TEXT COLLATE "C" NOT NULL,
    closed_at   TEXT COLLATE "C"
);
CREATE INDEX sessions_by_task ON agent_sessions (task_id);

CREATE TABLE attachments (
    id           TEXT COLLATE "C" PRIMARY KEY,
    task_id      TEXT COLLATE "C" NOT NULL REFERENCES tasks (id),
    filename     TEXT COLLATE "C" NOT NULL CHECK (length(filename) BETWEEN 1 AND 255),
    content_type TEXT COLLATE "C" NOT NULL,
    size         BIGINT NOT NULL CHECK (size BETWEEN 0 AND 8388608),
    sha256       TEXT COLLATE "C" NOT NULL,
    created_at   TEXT COLLATE "C" NOT NULL,
    updated_at   TEXT COLLATE "C" NOT NULL
);
CREATE INDEX attachments_by_task ON attachments (task_id);

-- id: SQLite's INTEGER PRIMARY KEY is the rowid, max(id) + 1 when none is given. Here the
-- revision trigger assigns it the same way under the global_revision lock, so ids, like revisions,
-- grow in commit order (a sequence would hand them out in start order).
CREATE TABLE task_activities (
    id           BIGINT PRIMARY KEY,
    task_id      TEXT COLLATE "C",
    project_id   TEXT COLLATE "C",
    actor_kind   TEXT COLLATE "C" NOT NULL,
    actor_id     TEXT COLLATE "C" NOT NULL,
    event        TEXT COLLATE "C" NOT NULL,
    changes_json TEXT COLLATE "C" NOT NULL DEFAULT '{}',
    revision     BIGINT,
    created_at   TEXT COLLATE "C" NOT NULL
);
CREATE UNIQUE INDEX task_activities_by_revision ON task_activities (revision);
CREATE INDEX task_activities_by_task ON task_activities (task_id, id);

-- ---------------------------------------------------------------------------------------------
-- Revision mechanics. An activity row carries the revision its own insert produces: the writer
-- reads global_revision + 1, and the insert bumps the counter by exactly one.
--
-- SQLite checks in a BEFORE trigger (task_activities_revision_matches) and bumps in an AFTER one
-- (task_activities_bump), row by row. PostgreSQL runs AFTER ROW triggers only when the whole
-- statement is done, so a multi-row INSERT would see a stale counter for its second row; check and
-- bump are therefore one BEFORE ROW step, which is the same per-row sequence. A failed insert
-- aborts the statement, bump included.
CREATE FUNCTION task_activities_revision_matches() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    current_revision BIGINT;
BEGIN
    SELECT revision INTO current_revision FROM global_revision WHERE singleton = 1 FOR UPDATE;
    IF NEW.revision IS NOT NULL AND NEW.revision <> current_revision + 1 THEN
        RAISE EXCEPTION 'ACTIVITY_REVISION_MISMATCH';
    END IF;
    -- task_activities_bump
    UPDATE global_revision SET revision = revision + 1 WHERE singleton = 1;
    IF NEW.id IS NULL THEN
        NEW.id := coalesce((SELECT max(id) FROM task_activities), 0) + 1;
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER task_activities_revision_matches BEFORE INSERT ON task_activities
FOR EACH ROW EXECUTE FUNCTION task_activities_revision_matches();

-- Append-only is the cursor's integrity: a rewritten row would be invisible to every cursor past it.
CREATE FUNCTION task_activities_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'ACTIVITY_APPEND_ONLY';
END;
$$;
CREATE TRIGGER task_activities_no_update BEFORE UPDATE ON task_activities
FOR EACH ROW EXECUTE FUNCTION task_activities_append_only();
CREATE TRIGGER task_activities_no_delete BEFORE DELETE ON task_activities
FOR EACH ROW EXECUTE FUNCTION task_activities_append_only();
-- A row trigger does not see TRUNCATE; refuse it as well, or the log could be emptied in one statement.
CREATE TRIGGER task_activities_no_truncate BEFORE TRUNCATE ON task_activities
FOR EACH STATEMENT EXECUTE FUNCTION task_activities_append_only();

-- Tracked rows carry the revision of their last change (an ETag). A change to anything hanging off
-- a task stamps the task too, so the card's revision moves whenever its brief would.
--
-- SQLite stamps a project or task row from an AFTER trigger that updates the row again; here the
-- BEFORE trigger sets NEW.revision, the same value without a second write. The column lists are
-- SQLite's: only an UPDATE naming one of them stamps.
CREATE FUNCTION stamp_own_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE global_revision SET revision = revision + 1 WHERE singleton = 1 RETURNING revision INTO NEW.revision;
    RETURN NEW;
END;
$$;
CREATE TRIGGER projects_stamp_insert BEFORE INSERT ON projects
FOR EACH ROW EXECUTE FUNCTION stamp_own_row();
CREATE TRIGGER projects_stamp_update BEFORE UPDATE OF
    name, workspace_path, readme, meta_json, settings_json, next_number ON projects
FOR EACH ROW EXECUTE FUNCTION stamp_own_row();
CREATE TRIGGER tasks_stamp_insert BEFORE INSERT ON tasks
FOR EACH ROW EXECUTE FUNCTION stamp_own_row();
CREATE TRIGGER tasks_stamp_update BEFORE UPDATE OF
    title, description, kind, priority, status, labels_json, assignee_kind, assignee_id,
    reporter_kind, reporter_id, claimed_by_kind, claimed_by, claimed_at, heartbeat_at, delivered_by,
    delivery_round, acceptance_mode, waiver_reason, awaiting_reason, blocked_reason, idem, meta_json,
    version, terminal_at, archived_at, updated_at ON tasks
FOR EACH ROW EXECUTE FUNCTION stamp_own_row();

-- A row hanging off a task (comments, reports, acceptance items, sessions, attachments) stamps its task.
CREATE FUNCTION stamp_owning_task() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    stamped BIGINT;
BEGIN
    UPDATE global_revision SET revision = revision + 1 WHERE singleton = 1 RETURNING revision INTO stamped;
    IF TG_OP = 'DELETE' THEN
        UPDATE tasks SET revision = stamped WHERE id = OLD.task_id;
    ELSE
        UPDATE tasks SET revision = stamped WHERE id = NEW.task_id;
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER comments_stamp_insert AFTER INSERT ON comments
FOR EACH ROW EXECUTE FUNCTION stamp_owning_task();
CREATE TRIGGER comments_stamp_update AFTER UPDATE ON comments
FOR EACH ROW EXECUTE FUNCTION stamp_owning_task();
CREATE TRIGGER comments_stamp_delete AFTER DELETE ON comments
FOR EACH ROW EXECUTE FUNCTION stamp_owning_task();
CREATE TRIGGER reports_stamp_insert AFTER INSERT ON reports
FOR EACH ROW EXECUTE FUNCTION stamp_owning_task();
CREATE TRIGGER reports_stamp_update AFTER UPDATE ON reports
FOR EACH ROW EXECUTE FUNCTION stamp_owning_task();
CREATE TRIGGER reports_stamp_delete AFTER DELETE ON reports
FOR EACH ROW EXECUTE FUNCTION stamp_owning_task();
CREATE TRIGGER acceptance_items_stamp_insert AFTER INSERT ON acceptance_items
FOR EACH ROW EXECUTE FUNCTION stamp_owning_task();
CREATE TRIGGER acceptance_items_stamp_update AFTER UPDATE ON acceptance_items
FOR EACH ROW EXECUTE FUNCTION stamp_owning_task();
CREATE TRIGGER acceptance_items_stamp_delete AFTER DELETE ON acceptance_items
FOR EACH ROW EXECUTE FUNCTION stamp_owning_task();
CREATE TRIGGER agent_sessions_stamp_insert AFTER INSERT ON agent_sessions
FOR EACH ROW EXECUTE FUNCTION stamp_owning_task();
CREATE TRIGGER agent_sessions_stamp_update AFTER UPDATE ON agent_sessions
FOR EACH ROW EXECUTE FUNCTION stamp_owning_task();
CREATE TRIGGER agent_sessions_stamp_delete AFTER DELETE ON agent_sessions
FOR EACH ROW EXECUTE FUNCTION stamp_owning_task();
CREATE TRIGGER attachments_stamp_insert AFTER INSERT ON attachments
FOR EACH ROW EXECUTE FUNCTION stamp_owning_task();
CREATE TRIGGER attachments_stamp_update AFTER UPDATE ON attachments
FOR EACH ROW EXECUTE FUNCTION stamp_owning_task();
CREATE TRIGGER attachments_stamp_delete AFTER DELETE ON attachments
FOR EACH ROW EXECUTE FUNCTION stamp_owning_task();

-- A relation stamps both of its tasks.
CREATE FUNCTION stamp_related_tasks() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    stamped BIGINT;
BEGIN
    UPDATE global_revision SET revision = revision + 1 WHERE singleton = 1 RETURNING revision INTO stamped;
    IF TG_OP = 'DELETE' THEN
        UPDATE tasks SET revision = stamped WHERE id IN (OLD.source_id, OLD.target_id);
    ELSE
        UPDATE tasks SET revision = stamped WHERE id IN (NEW.source_id, NEW.target_id);
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER relations_stamp_insert AFTER INSERT ON relations
FOR EACH ROW EXECUTE FUNCTION stamp_related_tasks();
CREATE TRIGGER relations_stamp_delete AFTER DELETE ON relations
FOR EACH ROW EXECUTE FUNCTION stamp_related_tasks();

-- ---------------------------------------------------------------------------------------------
-- Comments and reports are the record of what was said: append-only.
CREATE FUNCTION comments_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'COMMENT_APPEND_ONLY';
END;
$$;
CREATE TRIGGER comments_no_update BEFORE UPDATE ON comments
FOR EACH ROW EXECUTE FUNCTION comments_append_only();
CREATE TRIGGER comments_no_delete BEFORE DELETE ON comments
FOR EACH ROW EXECUTE FUNCTION comments_append_only();
CREATE TRIGGER comments_no_truncate BEFORE TRUNCATE ON comments
FOR EACH STATEMENT EXECUTE FUNCTION comments_append_only();

CREATE FUNCTION reports_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'REPORT_APPEND_ONLY';
END;
$$;
CREATE TRIGGER reports_no_update BEFORE UPDATE ON reports
FOR EACH ROW EXECUTE FUNCTION reports_append_only();
CREATE TRIGGER reports_no_delete BEFORE DELETE ON reports
FOR EACH ROW EXECUTE FUNCTION reports_append_only();
CREATE TRIGGER reports_no_truncate BEFORE TRUNCATE ON reports
FOR EACH STATEMENT EXECUTE FUNCTION reports_append_only();

-- A relation is added or removed, never rewritten.
CREATE FUNCTION relations_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'RELATION_IMMUTABLE';
END;
$$;
CREATE TRIGGER relations_immutable BEFORE UPDATE ON relations
FOR EACH ROW EXECUTE FUNCTION relations_immutable();

-- Status moves follow the graph; a terminal card leaves only through reopen, whose shape is
-- "to todo, next delivery round".
--
-- SQLite's two triggers (tasks_status_graph, tasks_terminal_exit_only_by_reopen) are one function
-- here because SQLite fires the later-created trigger first and PostgreSQL fires by name: a
-- done → in_progress move breaks both rules, and SQLite answers TERMINAL_STATE. The function keeps
-- SQLite's order; later migrations that add task update rules put theirs first, as SQLite would.
CREATE FUNCTION tasks_update_rules() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- tasks_terminal_exit_only_by_reopen
    IF OLD.status IN ('done', 'canceled') AND NEW.status <> OLD.status
       AND NOT (NEW.status = 'todo' AND NEW.delivery_round = OLD.delivery_round + 1) THEN
        RAISE EXCEPTION 'TERMINAL_STATE';
    END IF;
    -- tasks_status_graph
    IF NEW.status <> OLD.status
       AND NOT EXISTS (SELECT 1 FROM status_transitions WHERE from_status = OLD.status AND to_status = NEW.status) THEN
        RAISE EXCEPTION 'INVALID_TRANSITION';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER tasks_update_rules BEFORE UPDATE OF status ON tasks
FOR EACH ROW EXECUTE FUNCTION tasks_update_rules();

-- Parent relations: source is the parent epic, target the child (the row hangs off the target).
CREATE FUNCTION relations_parent_rules() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Another writer's relation must be committed and visible before these reads (see the top).
    PERFORM 1 FROM global_revision WHERE singleton = 1 FOR UPDATE;
    IF (SELECT kind FROM tasks WHERE id = NEW.source_id) IS DISTINCT FROM 'epic' THEN
        RAISE EXCEPTION 'RELATION_INVALID: parent must be an epic';
    END IF;
    IF (SELECT project_id FROM tasks WHERE id = NEW.source_id)
       IS DISTINCT FROM (SELECT project_id FROM tasks WHERE id = NEW.target_id) THEN
        RAISE EXCEPTION 'RELATION_INVALID: parent and child must be in the same project';
    END IF;
    IF EXISTS (
        WITH RECURSIVE ancestors(id) AS (
            SELECT NEW.source_id
            UNION
            SELECT r.source_id FROM relations r JOIN ancestors a ON r.target_id = a.id WHERE r.type = 'parent'
        )
        SELECT 1 FROM ancestors WHERE id = NEW.target_id) THEN
        RAISE EXCEPTION 'RELATION_CYCLE: the child is an ancestor of the parent';
    END IF;
    IF (SELECT count(*) FROM relations WHERE type = 'parent' AND target_id = NEW.target_id) >= 8 THEN
        RAISE EXCEPTION 'RELATION_FAN_IN: a task has at most 8 parents';
    END IF;
    IF (
        WITH RECURSIVE up(id, depth) AS (
            SELECT NEW.source_id, 1
            UNION
            SELECT r.source_id, up.depth + 1 FROM relations r JOIN up ON r.target_id = up.id
             WHERE r.type = 'parent' AND up.depth <= 9
        )
        SELECT max(depth) FROM up)
      + (
        WITH RECURSIVE down(id, depth) AS (
            SELECT NEW.target_id, 1
            UNION
            SELECT r.target_id, down.depth + 1 FROM relations r JOIN down ON r.source_id = down.id
             WHERE r.type = 'parent' AND down.depth <= 9
        )
        SELECT max(depth) FROM down) > 8 THEN
        RAISE EXCEPTION 'RELATION_DEPTH: a parent chain is at most 8 deep';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER relations_parent_rules BEFORE INSERT ON relations
FOR EACH ROW WHEN (NEW.type = 'parent') EXECUTE FUNCTION relations_parent_rules();

-- Acceptance items are immutable; one may be deleted only after an acceptance_pruned row naming it
-- was written (the one case where the audit row precedes the state change). Item ids are unique,
-- so a row naming this item can only come from the prune that is deleting it.
CREATE FUNCTION acceptance_items_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'ACCEPTANCE_IMMUTABLE';
END;
$$;
CREATE TRIGGER acceptance_items_immutable BEFORE UPDATE ON acceptance_items
FOR EACH ROW EXECUTE FUNCTION acceptance_items_immutable();

-- SQLite reads `removed` with json_each, which walks an array's elements or an object's values,
-- and compares json_extract(value, '$.id') with the item id.
CREATE FUNCTION acceptance_items_delete_audited() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (
        SELECT 1
          FROM task_activities a
         CROSS JOIN LATERAL (SELECT a.changes_json::json -> 'removed' AS removed) c
         CROSS JOIN LATERAL (
                SELECT e.value FROM json_array_elements(CASE WHEN json_typeof(c.removed) = 'array' THEN c.removed END) e
                UNION ALL
                SELECT o.value FROM json_each(CASE WHEN json_typeof(c.removed) = 'object' THEN c.removed END) o
             ) r
         WHERE a.task_id = OLD.task_id AND a.event = 'acceptance_pruned'
           AND json_typeof(r.value) = 'object' AND (r.value ->> 'id') = OLD.id) THEN
        RAISE EXCEPTION 'ACCEPTANCE_PRUNE_UNAUDITED';
    END IF;
    RETURN OLD;
END;
$$;
CREATE TRIGGER acceptance_items_delete_audited BEFORE DELETE ON acceptance_items
FOR EACH ROW EXECUTE FUNCTION acceptance_items_delete_audited();
-- TRUNCATE deletes without row triggers: it is an unaudited prune of every item.
CREATE FUNCTION acceptance_items_no_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'ACCEPTANCE_PRUNE_UNAUDITED';
END;
$$;
CREATE TRIGGER acceptance_items_no_truncate BEFORE TRUNCATE ON acceptance_items
FOR EACH STATEMENT EXECUTE FUNCTION acceptance_items_no_truncate();

-- ---------------------------------------------------------------------------------------------
-- PostgreSQL only: what SQLite's board keeps as files in its data dir, here in the database so
-- that every board process serving it sees the same (the token, login codes, browser session
-- revocations, attachment bytes). Each process keeps its own data dir for its local files.
CREATE TABLE board_secrets (
    key        TEXT COLLATE "C" PRIMARY KEY,
    value      TEXT COLLATE "C" NOT NULL,
    updated_at TEXT COLLATE "C" NOT NULL
);

-- Content-addressed like <data_dir>/attachments/<sha256[:2]>/<sha256>: one row per distinct
-- content, shared by every attachments row with that sha256.
CREATE TABLE attachment_blobs (
    sha256     TEXT COLLATE "C" PRIMARY KEY CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    content    BYTEA NOT NULL CHECK (octet_length(content) <= 8388608),
    created_at TEXT COLLATE "C" NOT NULL
);

INSERT INTO schema_version (version, applied_at)
VALUES (1, to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'));
