-- Taskloom board schema, generation 4, on PostgreSQL (../0004_activity_changes_are_json.sql on SQLite).

-- Every activity row's changes must be a JSON object: a reader that meets a broken row could only
-- skip it or stall, so the row is refused when written instead.
--
-- Read as `json`, not `jsonb`: json checks the RFC 8259 grammar as SQLite's json_valid() does,
-- while jsonb would also refuse the valid escape \u0000. (PostgreSQL 15 has no non-throwing
-- validity test; the block's subtransaction writes nothing, so it takes no transaction id.)
CREATE FUNCTION task_activities_changes_are_json() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    shape TEXT;
BEGIN
    BEGIN
        shape := json_typeof(NEW.changes_json::json);
    EXCEPTION WHEN invalid_text_representation THEN
        shape := NULL;
    END;
    IF shape IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'ACTIVITY_CHANGES_NOT_JSON';
    END IF;
    RETURN NEW;
END;
$$;
-- SQLite fires this newer trigger before the revision check; by name it fires first here too
-- ('task_activities_changes_…' < 'task_activities_revision_…').
CREATE TRIGGER task_activities_changes_are_json BEFORE INSERT ON task_activities
FOR EACH ROW EXECUTE FUNCTION task_activities_changes_are_json();

INSERT INTO schema_version (version, applied_at)
VALUES (4, to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'));
