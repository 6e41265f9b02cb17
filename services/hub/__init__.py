"""The hub: a per-user, per-board NDJSON fan-out of the board's live stream (SPEC §7).

``server`` is the daemon, ``client`` is what ``taskctl`` uses to find, start, follow and stop it.
"""
