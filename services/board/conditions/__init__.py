"""Conditions: what the board notices about its own state (docs/conditions.md, SPEC §12).

``rules`` holds the one dependency/ready rule every surface uses; ``config`` reads and validates a
project's condition settings; ``instant`` judges the conditions a command's own transaction
leaves behind; ``timer`` fires the temporal ones at the moment of crossing; ``marks`` keeps the
``condition_marks`` rows that make both restart-safe; ``persist`` writes the rows of the types a
project keeps as facts; ``signals`` is the id-less live lane.
"""
