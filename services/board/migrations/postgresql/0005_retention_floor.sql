-- Taskloom board schema, generation 5, on PostgreSQL (../0005_retention_floor.sql on SQLite):
-- retention that keeps the cursor contract.
--
-- The activity log stays append-only, with one exception: compaction (services/board/compaction.py)
-- may delete the rows at or below the retention floor, in the transaction that raises the floor.
-- Raising `board_meta.floor` opens a window naming the new floor; a DELETE of an activity row goes
-- through only while that window is open and the row is at or below it; the compaction closes the
-- window before it commits. A DELETE in any other transaction, or of a row above the floor, and
-- every UPDATE, are still refused (ACTIVITY_APPEND_ONLY): no reader above the floor can miss a
-- row, and every reader below it is told so (410 CURSOR_EXPIRED). TRUNCATE stays refused (0001).

CREATE TABLE retention_window (
    singleton BIGINT PRIMARY KEY CHECK (singleton = 1),
    floor     BIGINT NOT NULL,
    rowid     BIGINT GENERATED ALWAYS AS (singleton) STORED  -- an INTEGER PRIMARY KEY is SQLite's rowid
);

-- SQLite's CAST(text AS INTEGER): the leading integer, 0 when there is none; PostgreSQL's cast
-- would raise on such text instead of answering as SQLite's triggers do.
CREATE FUNCTION sqlite_integer(value TEXT) RETURNS BIGINT LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(substring(value FROM '^\s*([+-]?[0-9]+)')::BIGINT, 0)
$$;

DROP TRIGGER IF EXISTS task_activities_no_delete ON task_activities;
CREATE FUNCTION task_activities_delete_at_or_below_floor() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.revision IS NULL
       OR NOT EXISTS (
        SELECT 1 FROM retention_window w
         WHERE OLD.revision <= w.floor
           AND w.floor = (SELECT sqlite_integer(value) FROM board_meta WHERE key = 'floor')) THEN
        RAISE EXCEPTION 'ACTIVITY_APPEND_ONLY';
    END IF;
    RETURN OLD;
END;
$$;
CREATE TRIGGER task_activities_delete_at_or_below_floor BEFORE DELETE ON task_activities
FOR EACH ROW EXECUTE FUNCTION task_activities_delete_at_or_below_floor();

-- The floor only rises: lowering it would promise rows that are gone.
CREATE FUNCTION board_meta_floor_only_rises() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.key = 'floor' AND sqlite_integer(NEW.value) < sqlite_integer(OLD.value) THEN
        RAISE EXCEPTION 'FLOOR_LOWERED';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER board_meta_floor_only_rises BEFORE UPDATE OF value ON board_meta
FOR EACH ROW EXECUTE FUNCTION board_meta_floor_only_rises();

CREATE FUNCTION board_meta_floor_opens_window() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.key = 'floor' AND sqlite_integer(NEW.value) > sqlite_integer(OLD.value) THEN
        DELETE FROM retention_window;
        INSERT INTO retention_window (singleton, floor) VALUES (1, sqlite_integer(NEW.value));
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER board_meta_floor_opens_window AFTER UPDATE OF value ON board_meta
FOR EACH ROW EXECUTE FUNCTION board_meta_floor_opens_window();

-- The floor row is never removed: every reader compares its cursor with it.
CREATE FUNCTION board_meta_floor_kept() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.key = 'floor' THEN
        RAISE EXCEPTION 'FLOOR_LOWERED';
    END IF;
    RETURN OLD;
END;
$$;
CREATE TRIGGER board_meta_floor_kept BEFORE DELETE ON board_meta
FOR EACH ROW EXECUTE FUNCTION board_meta_floor_kept();
-- TRUNCATE would remove it without row triggers.
CREATE FUNCTION board_meta_no_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'FLOOR_LOWERED';
END;
$$;
CREATE TRIGGER board_meta_no_truncate BEFORE TRUNCATE ON board_meta
FOR EACH STATEMENT EXECUTE FUNCTION board_meta_no_truncate();

INSERT INTO schema_version (version, applied_at)
VALUES (5, to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'));
