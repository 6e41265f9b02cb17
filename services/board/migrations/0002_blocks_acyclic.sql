-- A chain of `blocks` relations must never close on itself: a cycle would block every card on it
-- forever. The command refuses it with a clear message; this trigger holds for every writer.
CREATE TRIGGER relations_blocks_acyclic BEFORE INSERT ON relations
WHEN NEW.type = 'blocks' AND NEW.source_id <> NEW.target_id
BEGIN
    SELECT RAISE(ABORT, 'RELATION_CYCLE: the target already blocks the source')
     WHERE EXISTS (
        WITH RECURSIVE blocked_by_target(id) AS (
            SELECT NEW.target_id
            UNION
            SELECT r.target_id FROM relations r JOIN blocked_by_target b ON r.source_id = b.id WHERE r.type = 'blocks'
        )
        SELECT 1 FROM blocked_by_target WHERE id = NEW.source_id);
END;
