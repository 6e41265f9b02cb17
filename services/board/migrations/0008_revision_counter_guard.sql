-- Taskloom board schema, generation 8: the revision counter only rises and is never removed.
--
-- Every revision comes from global_revision's one row. A raw session that lowered it would make
-- every later write collide with a revision already in the log (the board answering 409 to all of
-- them), and one that deleted it would leave the board unable to write at all. Every change the
-- board makes raises it: a bump by one, or a restore moving it past a lost future (backup.py).
CREATE TRIGGER global_revision_only_rises BEFORE UPDATE OF revision ON global_revision
WHEN NEW.revision <= OLD.revision
BEGIN
    SELECT RAISE(ABORT, 'REVISION_LOWERED');
END;
CREATE TRIGGER global_revision_kept BEFORE DELETE ON global_revision
BEGIN
    SELECT RAISE(ABORT, 'REVISION_LOWERED');
END;
-- INSERT OR REPLACE would delete the row without firing a delete trigger: a second row is refused
-- before the conflict is resolved.
CREATE TRIGGER global_revision_single BEFORE INSERT ON global_revision
WHEN EXISTS (SELECT 1 FROM global_revision)
BEGIN
    SELECT RAISE(ABORT, 'REVISION_LOWERED');
END;
