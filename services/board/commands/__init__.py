"""Domain commands. Each is ``fn(tx, ...)``: validate, write, append its activity rows.

Run one through ``store.command(fn, actor, ...)``; a refusal raises ``TaskloomError`` and the
transaction rolls back, so a refused command writes nothing.
"""
