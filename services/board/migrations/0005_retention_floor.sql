-- Taskloom board schema, generation 5: retention that keeps the cursor contract.
--
-- The activity log stays append-only, with one exception: compaction (services/board/compaction.py)
-- may delete the rows at or below the retention floor, in the transaction that raises the floor.
-- Raising `board_meta.floor` opens a window naming the new floor; a DELETE of an activity row goes
-- through only while that window is open and the row is at or below it; the compaction closes the
-- window before it commits. A DELETE in any other transaction, or of a row above the floor, and
-- every UPDATE, are still refused (ACTIVITY_APPEND_ONLY): no reader above the floor can miss a
-- row, and every reader below it is told so (410 CURSOR_EXPIRED).

CREATE TABLE retention_window (
    singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
    floor     INTEGER NOT NULL
) STRICT;

DROP TRIGGER IF EXISTS task_activities_no_delete;
CREATE TRIGGER task_activities_delete_at_or_below_floor BEFORE DELETE ON task_activities
WHEN OLD.revision IS NULL
  OR NOT EXISTS (
    SELECT 1 FROM retention_window w
     WHERE OLD.revision <= w.floor
       AND w.floor = (SELECT CAST(value AS INTEGER) FROM board_meta WHERE key = 'floor'))
BEGIN
    SELECT RAISE(ABORT, 'ACTIVITY_APPEND_ONLY');
END;

-- The floor only rises: lowering it would promise rows that are gone.
CREATE TRIGGER board_meta_floor_only_rises BEFORE UPDATE OF value ON board_meta
WHEN OLD.key = 'floor' AND CAST(NEW.value AS INTEGER) < CAST(OLD.value AS INTEGER)
BEGIN
    SELECT RAISE(ABORT, 'FLOOR_LOWERED');
END;
CREATE TRIGGER board_meta_floor_opens_window AFTER UPDATE OF value ON board_meta
WHEN NEW.key = 'floor' AND CAST(NEW.value AS INTEGER) > CAST(OLD.value AS INTEGER)
BEGIN
    DELETE FROM retention_window;
    INSERT INTO retention_window (singleton, floor) VALUES (1, CAST(NEW.value AS INTEGER));
END;
-- The floor row is never removed: every reader compares its cursor with it.
CREATE TRIGGER board_meta_floor_kept BEFORE DELETE ON board_meta
WHEN OLD.key = 'floor'
BEGIN
    SELECT RAISE(ABORT, 'FLOOR_LOWERED');
END;
