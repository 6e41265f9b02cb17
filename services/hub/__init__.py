"""The hub: a per-user, per-board NDJSON fan-out of the board's live stream (SPEC §7).

``server`` is the daemon, ``registrations`` keeps card briefs fresh for it (SPEC §7.4), and
``client`` is what ``taskctl`` uses to find, start, follow, watch through and stop it.
"""
