-- Taskloom board schema, generation 1.
-- Every invariant a raw writer could walk past lives here as a trigger, not only in Python.

CREATE TABLE global_revision (
    singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
    revision  INTEGER NOT NULL
) STRICT;
INSERT INTO global_revision (singleton, revision) VALUES (1, 0);

-- board_id, retention floor and settings; board_id is filled by the store when it creates the file.
CREATE TABLE board_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) STRICT;
INSERT INTO board_meta (key, value) VALUES ('floor', '0');

-- The status graph (SPEC §4.3). The Python table in services/board/domain.py must equal it.
CREATE TABLE status_transitions (
    from_status TEXT NOT NULL,
    to_status   TEXT NOT NULL,
    PRIMARY KEY (from_status, to_status)
) STRICT, WITHOUT ROWID;
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
    id             TEXT PRIMARY KEY CHECK (id GLOB '[a-z0-9]*' AND id NOT GLOB '*[^a-z0-9-]*' AND length(id) <= 32),
    name           TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    prefix         TEXT NOT NULL UNIQUE,
    workspace_path TEXT UNIQUE CHECK (workspace_path IS NULL OR substr(workspace_path, 1, 1) = '/'),
    readme         TEXT NOT NULL DEFAULT '',
    meta_json      TEXT NOT NULL DEFAULT '{}',
    settings_json  TEXT NOT NULL DEFAULT '{}',
    next_number    INTEGER NOT NULL DEFAULT 1,
    revision       INTEGER,
    created_at     TEXT NOT NULL,
    updated_at     TEXT NOT NULL
) STRICT;

-- The assignee/reporter dictionary. Counters move with the task event that named them.
CREATE TABLE actors (
    kind          TEXT NOT NULL,
    id            TEXT NOT NULL,
    use_count     INTEGER NOT NULL DEFAULT 0,
    first_seen_at TEXT NOT NULL,
    last_seen_at  TEXT NOT NULL,
    PRIMARY KEY (kind, id)
) STRICT, WITHOUT ROWID;

CREATE TABLE tasks (
    id              TEXT PRIMARY KEY,
    project_id      TEXT NOT NULL REFERENCES projects (id),
    number          INTEGER NOT NULL,
    identifier      TEXT NOT NULL UNIQUE,
    title           TEXT NOT NULL CHECK (length(title) BETWEEN 1 AND 500),
    description     TEXT NOT NULL DEFAULT '',
    kind            TEXT NOT NULL DEFAULT 'task' CHECK (kind IN ('task', 'epic', 'bug', 'review')),
    priority        TEXT NOT NULL DEFAULT 'medium' CHECK (priority IN ('low', 'medium', 'high', 'urgent')),
    status          TEXT NOT NULL DEFAULT 'todo' CHECK (status IN
                        ('backlog', 'todo', 'in_progress', 'awaiting', 'blocked', 'in_review', 'done', 'canceled')),
    labels_json     TEXT NOT NULL DEFAULT '[]',
    assignee_kind   TEXT,
    assignee_id     TEXT,
    reporter_kind   TEXT,
    reporter_id     TEXT,
    claimed_by_kind TEXT,
    claimed_by      TEXT,
    claimed_at      TEXT,
    heartbeat_at    TEXT,
    delivered_by    TEXT,
    delivery_round  INTEGER NOT NULL DEFAULT 1 CHECK (delivery_round >= 1),
    acceptance_mode TEXT NOT NULL DEFAULT 'review' CHECK (acceptance_mode IN ('review', 'none')),
    waiver_reason   TEXT,
    awaiting_reason TEXT,
    blocked_reason  TEXT,
    idem            TEXT,
    meta_json       TEXT NOT NULL DEFAULT '{}',
    version         INTEGER NOT NULL DEFAULT 1,
    revision        INTEGER,
    terminal_at     TEXT,
    archived_at     TEXT,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL,
    UNIQUE (project_id, number),
    CHECK ((assignee_id IS NULL) = (assignee_kind IS NULL)),
    CHECK ((reporter_id IS NULL) = (reporter_kind IS NULL))
) STRICT;
CREATE INDEX tasks_by_project_status ON tasks (project_id, status);
CREATE INDEX tasks_by_idem ON tasks (idem) WHERE idem IS NOT NULL;

CREATE TABLE labels (
    project_id   TEXT NOT NULL REFERENCES projects (id),
    name         TEXT NOT NULL CHECK (name = lower(trim(name)) AND length(name) BETWEEN 1 AND 64),
    use_count    INTEGER NOT NULL DEFAULT 0 CHECK (use_count >= 0),
    created_at   TEXT NOT NULL,
    last_used_at TEXT NOT NULL,
    archived_at  TEXT,
    PRIMARY KEY (project_id, name)
) STRICT, WITHOUT ROWID;

CREATE TABLE comments (
    id          TEXT PRIMARY KEY,
    task_id     TEXT NOT NULL REFERENCES tasks (id),
    kind        TEXT NOT NULL CHECK (kind IN ('note', 'question', 'discuss', 'decision', 'confirm', 'change', 'defect')),
    body        TEXT NOT NULL CHECK (length(body) >= 1),
    actor_kind  TEXT NOT NULL,
    actor_id    TEXT NOT NULL,
    round       INTEGER NOT NULL,
    created_at  TEXT NOT NULL
) STRICT;
CREATE INDEX comments_by_task ON comments (task_id, created_at);

CREATE TABLE reports (
    id          TEXT PRIMARY KEY,
    task_id     TEXT NOT NULL REFERENCES tasks (id),
    round       INTEGER NOT NULL,
    body        TEXT NOT NULL CHECK (length(body) >= 1),
    actor_kind  TEXT NOT NULL,
    actor_id    TEXT NOT NULL,
    created_at  TEXT NOT NULL
) STRICT;
CREATE INDEX reports_by_task ON reports (task_id, round);

CREATE TABLE acceptance_items (
    id          TEXT PRIMARY KEY,
    task_id     TEXT NOT NULL REFERENCES tasks (id),
    position    INTEGER NOT NULL,
    text        TEXT NOT NULL CHECK (length(text) BETWEEN 1 AND 2000),
    created_at  TEXT NOT NULL
) STRICT;
CREATE INDEX acceptance_by_task ON acceptance_items (task_id, position);

CREATE TABLE relations (
    id          TEXT PRIMARY KEY,
    type        TEXT NOT NULL CHECK (type IN ('blocks', 'related', 'parent', 'review_of')),
    source_id   TEXT NOT NULL REFERENCES tasks (id),
    target_id   TEXT NOT NULL REFERENCES tasks (id),
    created_at  TEXT NOT NULL,
    CHECK (source_id <> target_id),
    UNIQUE (type, source_id, target_id)
) STRICT;
CREATE INDEX relations_by_target ON relations (target_id, type);
CREATE INDEX relations_by_source ON relations (source_id, type);

CREATE TABLE agent_sessions (
    id          TEXT PRIMARY KEY,
    task_id     TEXT NOT NULL REFERENCES tasks (id),
    owner_kind  TEXT NOT NULL,
    owner_id    TEXT NOT NULL,
    seg         INTEGER NOT NULL,
    phase       TEXT NOT NULL,
    status      TEXT NOT NULL DEFAULT 'open',
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    closed_at   TEXT
) STRICT;
CREATE INDEX sessions_by_task ON agent_sessions (task_id);

CREATE TABLE attachments (
    id           TEXT PRIMARY KEY,
    task_id      TEXT NOT NULL REFERENCES tasks (id),
    filename     TEXT NOT NULL CHECK (length(filename) BETWEEN 1 AND 255),
    content_type TEXT NOT NULL,
    size         INTEGER NOT NULL CHECK (size BETWEEN 0 AND 8388608),
    sha256       TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    updated_at   TEXT NOT NULL
) STRICT;
CREATE INDEX attachments_by_task ON attachments (task_id);

CREATE TABLE task_activities (
    id           INTEGER PRIMARY KEY,
    task_id      TEXT,
    project_id   TEXT,
    actor_kind   TEXT NOT NULL,
    actor_id     TEXT NOT NULL,
    event        TEXT NOT NULL,
    changes_json TEXT NOT NULL DEFAULT '{}',
    revision     INTEGER,
    created_at   TEXT NOT NULL
) STRICT;
CREATE UNIQUE INDEX task_activities_by_revision ON task_activities (revision);
CREATE INDEX task_activities_by_task ON task_activities (task_id, id);

-- ---------------------------------------------------------------------------------------------
-- Revision mechanics. An activity row carries the revision its own insert produces: the writer
-- reads global_revision + 1, and this trigger bumps the counter by exactly one.
CREATE TRIGGER task_activities_revision_matches BEFORE INSERT ON task_activities
WHEN NEW.revision IS NOT NULL AND NEW.revision <> (SELECT revision + 1 FROM global_revision WHERE singleton = 1)
BEGIN
    SELECT RAISE(ABORT, 'ACTIVITY_REVISION_MISMATCH');
END;
CREATE TRIGGER task_activities_bump AFTER INSERT ON task_activities
BEGIN
    UPDATE global_revision SET revision = revision + 1 WHERE singleton = 1;
END;

-- Append-only is the cursor's integrity: a rewritten row would be invisible to every cursor past it.
CREATE TRIGGER task_activities_no_update BEFORE UPDATE ON task_activities
BEGIN
    SELECT RAISE(ABORT, 'ACTIVITY_APPEND_ONLY');
END;
CREATE TRIGGER task_activities_no_delete BEFORE DELETE ON task_activities
BEGIN
    SELECT RAISE(ABORT, 'ACTIVITY_APPEND_ONLY');
END;

-- Tracked rows carry the revision of their last change (an ETag). A change to anything hanging off
-- a task stamps the task too, so the card's revision moves whenever its brief would.
CREATE TRIGGER projects_stamp_insert AFTER INSERT ON projects
BEGIN
    UPDATE global_revision SET revision = revision + 1 WHERE singleton = 1;
    UPDATE projects SET revision = (SELECT revision FROM global_revision) WHERE id = NEW.id;
END;
CREATE TRIGGER projects_stamp_update AFTER UPDATE OF
    name, workspace_path, readme, meta_json, settings_json, next_number ON projects
BEGIN
    UPDATE global_revision SET revision = revision + 1 WHERE singleton = 1;
    UPDATE projects SET revision = (SELECT revision FROM global_revision) WHERE id = NEW.id;
END;

CREATE TRIGGER tasks_stamp_insert AFTER INSERT ON tasks
BEGIN
    UPDATE global_revision SET revision = revision + 1 WHERE singleton = 1;
    UPDATE tasks SET revision = (SELECT revision FROM global_revision) WHERE id = NEW.id;
END;
CREATE TRIGGER tasks_stamp_update AFTER UPDATE OF
    title, description, kind, priority, status, labels_json, assignee_kind, assignee_id,
    reporter_kind, reporter_id, claimed_by_kind, claimed_by, claimed_at, heartbeat_at, delivered_by,
    delivery_round, acceptance_mode, waiver_reason, awaiting_reason, blocked_reason, idem, meta_json,
    version, terminal_at, archived_at, updated_at ON tasks
BEGIN
    UPDATE global_revision SET revision = revision + 1 WHERE singleton = 1;
    UPDATE tasks SET revision = (SELECT revision FROM global_revision) WHERE id = NEW.id;
END;
CREATE TRIGGER comments_stamp_insert AFTER INSERT ON comments
BEGIN
    UPDATE global_revision SET revision = revision + 1 WHERE singleton = 1;
    UPDATE tasks SET revision = (SELECT revision FROM global_revision) WHERE id = NEW.task_id;
END;
CREATE TRIGGER comments_stamp_update AFTER UPDATE ON comments
BEGIN
    UPDATE global_revision SET revision = revision + 1 WHERE singleton = 1;
    UPDATE tasks SET revision = (SELECT revision FROM global_revision) WHERE id = NEW.task_id;
END;
CREATE TRIGGER comments_stamp_delete AFTER DELETE ON comments
BEGIN
    UPDATE global_revision SET revision = revision + 1 WHERE singleton = 1;
    UPDATE tasks SET revision = (SELECT revision FROM global_revision) WHERE id = OLD.task_id;
END;
CREATE TRIGGER reports_stamp_insert AFTER INSERT ON reports
BEGIN
    UPDATE global_revision SET revision = revision + 1 WHERE singleton = 1;
    UPDATE tasks SET revision = (SELECT revision FROM global_revision) WHERE id = NEW.task_id;
END;
CREATE TRIGGER reports_stamp_update AFTER UPDATE ON reports
BEGIN
    UPDATE global_revision SET revision = revision + 1 WHERE singleton = 1;
    UPDATE tasks SET revision = (SELECT revision FROM global_revision) WHERE id = NEW.task_id;
END;
CREATE TRIGGER reports_stamp_delete AFTER DELETE ON reports
BEGIN
    UPDATE global_revision SET revision = revision + 1 WHERE singleton = 1;
    UPDATE tasks SET revision = (SELECT revision FROM global_revision) WHERE id = OLD.task_id;
END;
CREATE TRIGGER acceptance_items_stamp_insert AFTER INSERT ON acceptance_items
BEGIN
    UPDATE global_revision SET revision = revision + 1 WHERE singleton = 1;
    UPDATE tasks SET revision = (SELECT revision FROM global_revision) WHERE id = NEW.task_id;
END;
CREATE TRIGGER acceptance_items_stamp_update AFTER UPDATE ON acceptance_items
BEGIN
    UPDATE global_revision SET revision = revision + 1 WHERE singleton = 1;
    UPDATE tasks SET revision = (SELECT revision FROM global_revision) WHERE id = NEW.task_id;
END;
CREATE TRIGGER acceptance_items_stamp_delete AFTER DELETE ON acceptance_items
BEGIN
    UPDATE global_revision SET revision = revision + 1 WHERE singleton = 1;
    UPDATE tasks SET revision = (SELECT revision FROM global_revision) WHERE id = OLD.task_id;
END;
CREATE TRIGGER agent_sessions_stamp_insert AFTER INSERT ON agent_sessions
BEGIN
    UPDATE global_revision SET revision = revision + 1 WHERE singleton = 1;
    UPDATE tasks SET revision = (SELECT revision FROM global_revision) WHERE id = NEW.task_id;
END;
CREATE TRIGGER agent_sessions_stamp_update AFTER UPDATE ON agent_sessions
BEGIN
    UPDATE global_revision SET revision = revision + 1 WHERE singleton = 1;
    UPDATE tasks SET revision = (SELECT revision FROM global_revision) WHERE id = NEW.task_id;
END;
CREATE TRIGGER agent_sessions_stamp_delete AFTER DELETE ON agent_sessions
BEGIN
    UPDATE global_revision SET revision = revision + 1 WHERE singleton = 1;
    UPDATE tasks SET revision = (SELECT revision FROM global_revision) WHERE id = OLD.task_id;
END;
CREATE TRIGGER attachments_stamp_insert AFTER INSERT ON attachments
BEGIN
    UPDATE global_revision SET revision = revision + 1 WHERE singleton = 1;
    UPDATE tasks SET revision = (SELECT revision FROM global_revision) WHERE id = NEW.task_id;
END;
CREATE TRIGGER attachments_stamp_update AFTER UPDATE ON attachments
BEGIN
    UPDATE global_revision SET revision = revision + 1 WHERE singleton = 1;
    UPDATE tasks SET revision = (SELECT revision FROM global_revision) WHERE id = NEW.task_id;
END;
CREATE TRIGGER attachments_stamp_delete AFTER DELETE ON attachments
BEGIN
    UPDATE global_revision SET revision = revision + 1 WHERE singleton = 1;
    UPDATE tasks SET revision = (SELECT revision FROM global_revision) WHERE id = OLD.task_id;
END;
CREATE TRIGGER relations_stamp_insert AFTER INSERT ON relations
BEGIN
    UPDATE global_revision SET revision = revision + 1 WHERE singleton = 1;
    UPDATE tasks SET revision = (SELECT revision FROM global_revision) WHERE id IN (NEW.source_id, NEW.target_id);
END;
CREATE TRIGGER relations_stamp_delete AFTER DELETE ON relations
BEGIN
    UPDATE global_revision SET revision = revision + 1 WHERE singleton = 1;
    UPDATE tasks SET revision = (SELECT revision FROM global_revision) WHERE id IN (OLD.source_id, OLD.target_id);
END;

-- ---------------------------------------------------------------------------------------------
-- Comments and reports are the record of what was said: append-only.
CREATE TRIGGER comments_no_update BEFORE UPDATE ON comments
BEGIN
    SELECT RAISE(ABORT, 'COMMENT_APPEND_ONLY');
END;
CREATE TRIGGER comments_no_delete BEFORE DELETE ON comments
BEGIN
    SELECT RAISE(ABORT, 'COMMENT_APPEND_ONLY');
END;
CREATE TRIGGER reports_no_update BEFORE UPDATE ON reports
BEGIN
    SELECT RAISE(ABORT, 'REPORT_APPEND_ONLY');
END;
CREATE TRIGGER reports_no_delete BEFORE DELETE ON reports
BEGIN
    SELECT RAISE(ABORT, 'REPORT_APPEND_ONLY');
END;

-- A relation is added or removed, never rewritten.
CREATE TRIGGER relations_immutable BEFORE UPDATE ON relations
BEGIN
    SELECT RAISE(ABORT, 'RELATION_IMMUTABLE');
END;

-- Status moves follow the graph; a terminal card leaves only through reopen, whose shape is
-- "to todo, next delivery round".
CREATE TRIGGER tasks_status_graph BEFORE UPDATE OF status ON tasks
WHEN NEW.status <> OLD.status
 AND NOT EXISTS (SELECT 1 FROM status_transitions WHERE from_status = OLD.status AND to_status = NEW.status)
BEGIN
    SELECT RAISE(ABORT, 'INVALID_TRANSITION');
END;
CREATE TRIGGER tasks_terminal_exit_only_by_reopen BEFORE UPDATE OF status ON tasks
WHEN OLD.status IN ('done', 'canceled') AND NEW.status <> OLD.status
 AND NOT (NEW.status = 'todo' AND NEW.delivery_round = OLD.delivery_round + 1)
BEGIN
    SELECT RAISE(ABORT, 'TERMINAL_STATE');
END;

-- Parent relations: source is the parent epic, target the child (the row hangs off the target).
CREATE TRIGGER relations_parent_rules BEFORE INSERT ON relations
WHEN NEW.type = 'parent'
BEGIN
    SELECT RAISE(ABORT, 'RELATION_INVALID: parent must be an epic')
     WHERE (SELECT kind FROM tasks WHERE id = NEW.source_id) IS NOT 'epic';
    SELECT RAISE(ABORT, 'RELATION_INVALID: parent and child must be in the same project')
     WHERE (SELECT project_id FROM tasks WHERE id = NEW.source_id)
        IS NOT (SELECT project_id FROM tasks WHERE id = NEW.target_id);
    SELECT RAISE(ABORT, 'RELATION_CYCLE: the child is an ancestor of the parent')
     WHERE EXISTS (
        WITH RECURSIVE ancestors(id) AS (
            SELECT NEW.source_id
            UNION
            SELECT r.source_id FROM relations r JOIN ancestors a ON r.target_id = a.id WHERE r.type = 'parent'
        )
        SELECT 1 FROM ancestors WHERE id = NEW.target_id);
    SELECT RAISE(ABORT, 'RELATION_FAN_IN: a task has at most 8 parents')
     WHERE (SELECT count(*) FROM relations WHERE type = 'parent' AND target_id = NEW.target_id) >= 8;
    SELECT RAISE(ABORT, 'RELATION_DEPTH: a parent chain is at most 8 deep')
     WHERE (
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
        SELECT max(depth) FROM down) > 8;
END;

-- Acceptance items are immutable; one may be deleted only after an acceptance_pruned row naming it
-- was written (the one case where the audit row precedes the state change). Item ids are unique,
-- so a row naming this item can only come from the prune that is deleting it.
CREATE TRIGGER acceptance_items_immutable BEFORE UPDATE ON acceptance_items
BEGIN
    SELECT RAISE(ABORT, 'ACCEPTANCE_IMMUTABLE');
END;
CREATE TRIGGER acceptance_items_delete_audited BEFORE DELETE ON acceptance_items
WHEN NOT EXISTS (
    SELECT 1
      FROM task_activities a, json_each(a.changes_json, '$.removed') r
     WHERE a.task_id = OLD.task_id AND a.event = 'acceptance_pruned'
       AND json_extract(r.value, '$.id') = OLD.id)
BEGIN
    SELECT RAISE(ABORT, 'ACCEPTANCE_PRUNE_UNAUDITED');
END;
