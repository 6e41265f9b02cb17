-- Taskloom board schema, generation 3, on PostgreSQL (../0003_acceptance_revision_and_task_guards.sql on SQLite).

-- The acceptance list's own change counter lives on the task. It used to be counted from the
-- activity log, but retention (SPEC §12) may trim old rows and a counter must never go backwards.
-- Not in tasks_stamp_update's column list: the item insert/delete that goes with every bump
-- already stamps the task's revision.
ALTER TABLE tasks ADD COLUMN acceptance_revision BIGINT NOT NULL DEFAULT 0 CHECK (acceptance_revision >= 0);
UPDATE tasks SET acceptance_revision = (
    SELECT count(*) FROM task_activities a
     WHERE a.task_id = tasks.id AND a.event IN ('acceptance_changed', 'acceptance_pruned'));

-- Two more task update rules, SQLite's tasks_parent_stays_epic and tasks_project_fixed. SQLite
-- fires the newest trigger first, so they run before the status rules of 0001, newest first.
CREATE OR REPLACE FUNCTION tasks_update_rules() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- tasks_project_fixed: a task never changes project: its identifier, its number and the
    -- same-project parent rule all depend on it.
    IF NEW.project_id IS DISTINCT FROM OLD.project_id THEN
        RAISE EXCEPTION 'TASK_PROJECT_FIXED';
    END IF;
    -- tasks_parent_stays_epic: the parent rules hold after the insert too: an epic that has
    -- children stays an epic, or they would hang off a parent that is not one.
    IF OLD.kind = 'epic' AND NEW.kind <> 'epic' THEN
        -- Read after any writer adding a child has committed (see the top of 0001).
        PERFORM 1 FROM global_revision WHERE singleton = 1 FOR UPDATE;
        IF EXISTS (SELECT 1 FROM relations WHERE type = 'parent' AND source_id = OLD.id) THEN
            RAISE EXCEPTION 'RELATION_INVALID: an epic with children must stay an epic';
        END IF;
    END IF;
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
DROP TRIGGER IF EXISTS tasks_update_rules ON tasks;
CREATE TRIGGER tasks_update_rules BEFORE UPDATE OF status, kind, project_id ON tasks
FOR EACH ROW EXECUTE FUNCTION tasks_update_rules();

INSERT INTO schema_version (version, applied_at)
VALUES (3, to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'));
