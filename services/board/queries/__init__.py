"""The board's reads, one module per resource; commands keep the writes and borrow these helpers.

Every function takes a read connection (``store.query(fn, ...)``) or a transaction's connection,
so one call is one snapshot.
"""
