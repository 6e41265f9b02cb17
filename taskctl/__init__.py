"""``taskctl``: the one command-line client of a Taskloom board (SPEC §10).

Start-up time matters here: nothing in this package imports the server stack (aiohttp,
structlog, ``services.board.app``) on the paths a person types every minute.
"""
