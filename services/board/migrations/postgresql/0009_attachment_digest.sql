-- Taskloom board schema, generation 9, on PostgreSQL (../0009_attachment_digest.sql on SQLite):
-- an attachment's sha256 is a digest, never anything else.
--
-- Here the blobs live in attachment_blobs, whose key is checked; the attachments row is held to
-- the same rule, with SQLite's text, so a raw session meets the same refusal on either engine.
CREATE FUNCTION attachments_sha256_is_a_digest() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'ATTACHMENT_DIGEST';
END;
$$;
CREATE TRIGGER attachments_sha256_is_a_digest_insert BEFORE INSERT ON attachments
FOR EACH ROW WHEN (NEW.sha256 !~ '^[0-9a-f]{64}$') EXECUTE FUNCTION attachments_sha256_is_a_digest();
CREATE TRIGGER attachments_sha256_is_a_digest_update BEFORE UPDATE OF sha256 ON attachments
FOR EACH ROW WHEN (NEW.sha256 !~ '^[0-9a-f]{64}$') EXECUTE FUNCTION attachments_sha256_is_a_digest();

INSERT INTO schema_version (version, applied_at)
VALUES (9, to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'));
