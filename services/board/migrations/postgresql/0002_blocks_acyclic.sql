-- Taskloom board schema, generation 2, on PostgreSQL (../0002_blocks_acyclic.sql on SQLite).

-- A chain of `blocks` relations must never close on itself: a cycle would block every card on it
-- forever. The command refuses it with a clear message; this trigger holds for every writer.
CREATE FUNCTION relations_blocks_acyclic() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Two writers adding A blocks B and B blocks A must not both pass: the second reads after the
    -- first has committed (see the top of 0001).
    PERFORM 1 FROM global_revision WHERE singleton = 1 FOR UPDATE;
    IF EXISTS (
        WITH RECURSIVE blocked_by_target(id) AS (
            SELECT NEW.target_id
            UNION
            SELECT r.target_id FROM relations r JOIN blocked_by_target b ON r.source_id = b.id WHERE r.type = 'blocks'
        )
        SELECT 1 FROM blocked_by_target WHERE id = NEW.source_id) THEN
        RAISE EXCEPTION 'RELATION_CYCLE: the target already blocks the source';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER relations_blocks_acyclic BEFORE INSERT ON relations
FOR EACH ROW WHEN (NEW.type = 'blocks' AND NEW.source_id <> NEW.target_id)
EXECUTE FUNCTION relations_blocks_acyclic();

INSERT INTO schema_version (version, applied_at)
VALUES (2, to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'));
