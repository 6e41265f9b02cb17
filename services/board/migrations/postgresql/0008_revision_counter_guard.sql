-- Taskloom board schema, generation 8, on PostgreSQL (../0008_revision_counter_guard.sql on
-- SQLite): the revision counter only rises and is never removed.
--
-- Every revision comes from global_revision's one row. A raw session that lowered it would make
-- every later write collide with a revision already in the log (the board answering 409 to all of
-- them), and one that deleted or truncated it would leave the board unable to write at all. Every
-- change the board makes raises it: a bump by one, or a restore moving it past a lost future.
-- The update trigger's WHEN is judged without calling the function: the bumps every command
-- makes cost no PL/pgSQL call. (INSERT … ON CONFLICT DO UPDATE fires the update trigger; a plain
-- second row is refused by the primary key's CHECK.)
CREATE FUNCTION global_revision_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'REVISION_LOWERED';
END;
$$;
CREATE TRIGGER global_revision_only_rises BEFORE UPDATE OF revision ON global_revision
FOR EACH ROW WHEN (NEW.revision <= OLD.revision) EXECUTE FUNCTION global_revision_guard();
CREATE TRIGGER global_revision_kept BEFORE DELETE ON global_revision
FOR EACH ROW EXECUTE FUNCTION global_revision_guard();
CREATE TRIGGER global_revision_no_truncate BEFORE TRUNCATE ON global_revision
FOR EACH STATEMENT EXECUTE FUNCTION global_revision_guard();

INSERT INTO schema_version (version, applied_at)
VALUES (8, to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'));
