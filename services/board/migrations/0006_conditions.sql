-- Conditions (docs/conditions.md): when a card entered its status, and the marks of conditions
-- that hold (instant) or have fired (temporal).

-- status_since: the moment the card entered its current status; every status change goes
-- through one helper (commands/common.py set_status), which stamps it. Existing cards start
-- from their last update, the closest the old schema can tell.
ALTER TABLE tasks ADD COLUMN status_since TEXT;
UPDATE tasks SET status_since = updated_at WHERE status_since IS NULL;

-- One row per condition that holds now (wip_exceeded, lane_drained, card_blocked) or has fired
-- for the current episode of its card (status_timeout, card_idle, claim_stale). Every row is
-- derivable from state: ``episode`` names the state the condition was judged on (the status
-- entered at, the last activity, the heartbeat), so after a restart a mark whose episode still
-- matches means "already fired", and one whose episode has moved on is stale and dropped.
CREATE TABLE condition_marks (
    type         TEXT NOT NULL,
    project_id   TEXT NOT NULL,
    -- the card's id, or the status column for a column's condition
    subject      TEXT NOT NULL,
    task_id      TEXT,
    episode      TEXT NOT NULL,
    changes_json TEXT NOT NULL,
    since        TEXT NOT NULL,
    PRIMARY KEY (type, project_id, subject)
) STRICT;
CREATE INDEX condition_marks_by_task ON condition_marks (task_id);
-- The ready queue (conditions/rules.py) walks todo cards one priority at a time in creation
-- order, board-wide or in one project; the column conditions count one status of a project.
-- archived_at sits before priority: "live cards of a status" is an equality prefix for both the
-- queue (then priority, then rowid order) and the column count, which the index alone answers.
CREATE INDEX tasks_ready_queue ON tasks (status, archived_at, priority);
CREATE INDEX tasks_ready_queue_by_project ON tasks (project_id, status, archived_at, priority);
-- The dependency rule's lookup, "open blockers of this card": type and target together, covering
-- the source, so the planner walks only that card's relations (not every relation of the type).
CREATE INDEX relations_by_type_target ON relations (type, target_id, source_id);
