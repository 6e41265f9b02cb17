-- Taskloom board schema, generation 3.

-- The acceptance list's own change counter lives on the task. It used to be counted from the
-- activity log, but retention (SPEC §12) may trim old rows and a counter must never go backwards.
-- Not in tasks_stamp_update's column list: the item insert/delete that goes with every bump
-- already stamps the task's revision.
ALTER TABLE tasks ADD COLUMN acceptance_revision INTEGER NOT NULL DEFAULT 0 CHECK (acceptance_revision >= 0);
UPDATE tasks SET acceptance_revision = (
    SELECT count(*) FROM task_activities a
     WHERE a.task_id = tasks.id AND a.event IN ('acceptance_changed', 'acceptance_pruned'));

-- The parent rules hold after the insert too: an epic that has children stays an epic, or they
-- would hang off a parent that is not one.
CREATE TRIGGER tasks_parent_stays_epic BEFORE UPDATE OF kind ON tasks
WHEN OLD.kind = 'epic' AND NEW.kind <> 'epic'
 AND EXISTS (SELECT 1 FROM relations WHERE type = 'parent' AND source_id = OLD.id)
BEGIN
    SELECT RAISE(ABORT, 'RELATION_INVALID: an epic with children must stay an epic');
END;

-- A task never changes project: its identifier, its number and the same-project parent rule all
-- depend on it.
CREATE TRIGGER tasks_project_fixed BEFORE UPDATE OF project_id ON tasks
WHEN NEW.project_id IS NOT OLD.project_id
BEGIN
    SELECT RAISE(ABORT, 'TASK_PROJECT_FIXED');
END;
