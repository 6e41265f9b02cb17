"""Every test here runs once per engine: ``board`` is an open store with project ``demo``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from services.board.commands import projects
from services.board.store import Actor, WriterStore
from tests.store.engines import ENGINES, Raw, open_store, raw_client
from tests.support.postgres import Cluster, drop_database, fresh_database


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def database_url(engine: str, request: pytest.FixtureRequest) -> Iterator[str | None]:
    if engine == "sqlite":
        yield None
        return
    cluster: Cluster = request.getfixturevalue("pg_cluster")
    url = fresh_database(cluster)
    try:
        yield url
    finally:
        drop_database(cluster, url)


@pytest.fixture
def board(engine: str, tmp_path: Path, database_url: str | None) -> Iterator[WriterStore]:
    store = open_store(engine, tmp_path, database_url)
    store.open()
    try:
        store.run_command(projects.create_project, Actor("human", "ann"), id="demo", name="Demo")
        yield store
    finally:
        store.close()


@pytest.fixture
def raw(board: WriterStore) -> Iterator[Raw]:
    with raw_client(board) as client:
        yield client
