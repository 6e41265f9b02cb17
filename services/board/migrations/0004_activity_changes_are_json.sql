-- Every activity row's changes must be a JSON object: a reader that meets a broken row could only
-- skip it or stall, so the row is refused when written instead.
CREATE TRIGGER task_activities_changes_are_json BEFORE INSERT ON task_activities
WHEN NOT json_valid(NEW.changes_json) OR json_type(NEW.changes_json) IS NOT 'object'
BEGIN
    SELECT RAISE(ABORT, 'ACTIVITY_CHANGES_NOT_JSON');
END;
