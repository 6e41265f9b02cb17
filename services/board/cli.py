"""``taskd``: run the board."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import click
import structlog
from aiohttp import web

from shared.paths import data_dir as default_data_dir
from shared.paths import runtime_dir

from . import auth
from .app import CREDENTIALS, STORE, BoardSettings, configure_logging, create_app
from .httpserver import BoardRunner
from .pointer import remove_pointer_if_mine, write_pointer
from .store import SchemaTooNew

#: The signals that stop the board gracefully; a second one forces exit.
HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM)

log = structlog.get_logger("taskd")


async def serve(settings: BoardSettings) -> None:
    app = create_app(settings)
    runner = BoardRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, settings.host, settings.port, reuse_address=True)
    await site.start()
    server = site._server
    port = server.sockets[0].getsockname()[1] if server and server.sockets else settings.port
    host = settings.host if ":" not in settings.host else f"[{settings.host}]"
    url = f"http://{host}:{port}"
    meta = await app[STORE].query(lambda conn: conn.execute("SELECT value FROM board_meta WHERE key = 'board_id'").fetchone()[0])
    runtime = runtime_dir(os.environ, Path.home())
    write_pointer(
        runtime,
        {
            "url": url,
            "pid": os.getpid(),
            "board_id": meta,
            "data_dir": str(settings.data_dir),
            "token_file": str(settings.token_path),
        },
    )
    code = app[CREDENTIALS].new_login_code()
    log.info("board_listening", url=url, data_dir=str(settings.data_dir), board_id=meta)
    click.echo(f"Taskloom board on {url}  (data: {settings.data_dir})", err=True)
    click.echo(f"Open the board: {url}/login?code={code}", err=True)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals_seen = 0

    def on_signal() -> None:
        nonlocal signals_seen
        signals_seen += 1
        if signals_seen > 1:
            os._exit(130)
        stop.set()

    for sig in HANDLED_SIGNALS:
        loop.add_signal_handler(sig, on_signal)
    try:
        await stop.wait()
    finally:
        log.info("board_stopping")
        remove_pointer_if_mine(runtime, os.getpid())
        await runner.cleanup()
        log.info("board_stopped")


@click.group(context_settings={"auto_envvar_prefix": "TASKLOOM", "help_option_names": ["-h", "--help"]})
def main() -> None:
    """Taskloom board: HTTP API, web UI and live event stream over one SQLite file."""


@main.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (loopback by default).")
@click.option("--port", default=7431, show_default=True, type=click.IntRange(0, 65535), help="0 picks a free port.")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), help="Where board.sqlite and the token live.")
@click.option("--allow-host", multiple=True, help="Extra Host header name to accept (DNS-rebinding guard).")
@click.option("--ping-interval", default=15.0, show_default=True, type=click.FloatRange(min=0.01), help="Seconds between SSE pings.")
@click.option("--max-streams", default=1024, show_default=True, type=click.IntRange(min=1))
@click.option("--stream-lifetime", type=click.FloatRange(min=0.01), help="End each SSE stream after this many seconds.")
@click.option("--session-idle", default=auth.SESSION_IDLE_SECONDS, show_default=True, type=click.FloatRange(min=1),
              help="Seconds a browser session may go unused before the board refuses it.")
@click.option("--session-max-age", default=auth.SESSION_ABSOLUTE_SECONDS, show_default=True,
              type=click.FloatRange(min=1), help="Seconds after its login that any browser session ends.")
def serve_command(
    host: str,
    port: int,
    data_dir: Path | None,
    allow_host: tuple[str, ...],
    ping_interval: float,
    max_streams: int,
    stream_lifetime: float | None,
    session_idle: float,
    session_max_age: float,
) -> None:
    """Run the board until SIGINT or SIGTERM."""
    configure_logging(json=not sys.stderr.isatty())
    directory = (data_dir or default_data_dir(os.environ, Path.home(), platform=sys.platform)).absolute()
    settings = BoardSettings(
        data_dir=directory,
        host=host,
        port=port,
        allowed_hosts=allow_host,
        ping_interval=ping_interval,
        max_streams=max_streams,
        stream_lifetime=stream_lifetime,
        session_idle_seconds=session_idle,
        session_absolute_seconds=session_max_age,
    )
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    try:
        asyncio.run(serve(settings))
    except SchemaTooNew as exc:
        raise click.ClickException(str(exc)) from exc


if __name__ == "__main__":
    main()
