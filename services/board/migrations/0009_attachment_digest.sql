-- Taskloom board schema, generation 9: an attachment's sha256 is a digest, never anything else.
--
-- The digest names the blob's file under <data_dir>/attachments (sha256[:2]/sha256). Any other
-- text written by a raw session (an absolute path, `../..`) would name a file outside the board,
-- which a read of the attachment would serve and its removal would unlink. The board's own code
-- refuses such a row too (commands/attachments.blob_path), and a restore refuses a backup holding
-- one; this keeps every writer from storing it.
CREATE TRIGGER attachments_sha256_is_a_digest_insert BEFORE INSERT ON attachments
WHEN length(NEW.sha256) <> 64 OR NEW.sha256 GLOB '*[^0-9a-f]*'
BEGIN
    SELECT RAISE(ABORT, 'ATTACHMENT_DIGEST');
END;
CREATE TRIGGER attachments_sha256_is_a_digest_update BEFORE UPDATE OF sha256 ON attachments
WHEN length(NEW.sha256) <> 64 OR NEW.sha256 GLOB '*[^0-9a-f]*'
BEGIN
    SELECT RAISE(ABORT, 'ATTACHMENT_DIGEST');
END;
