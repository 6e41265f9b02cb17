"""The seal of the board processes' notifications (``services/board/notification_seal.py``): the
server's HMAC of a payload it computes is the one Python computes, and a payload changed in any
way, or sealed with another key, does not open."""

from __future__ import annotations

import secrets

import psycopg
import pytest
from psycopg import sql

from services.board.notification_seal import SEAL_BYTES, NotificationSeal

PAYLOADS = ["", "12", "9223372036854775807 ab12cd 7 [[8, \"task_updated\", null, null, \"id: 8\\n\\n\"]]", "ünï 🚀 'quoted' \\"]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_the_servers_seal_is_the_one_python_makes(postgres_url: str, payload: str) -> None:
    seal = NotificationSeal(secrets.token_bytes(32))
    statement = sql.SQL("SELECT {} FROM (SELECT {} AS payload) AS note").format(
        seal.sql(sql.Identifier("note", "payload")), sql.Literal(payload),
    )
    with psycopg.connect(postgres_url) as conn:
        (sealed,) = conn.execute(statement).fetchone() or ("",)
    assert sealed == seal.seal(payload) and len(sealed) == SEAL_BYTES + len(payload)
    assert seal.open(sealed) == payload


def test_a_changed_payload_or_another_key_does_not_open() -> None:
    seal = NotificationSeal(secrets.token_bytes(32))
    sealed = seal.seal("41 origin 40 []")
    mac, _, payload = sealed.partition(" ")
    for forged in (f"{mac} 42 origin 40 []", payload, f"{'0' * 64} {payload}", f"{mac.upper()} {payload}", "",
                   NotificationSeal(secrets.token_bytes(32)).seal(payload)):
        assert seal.open(forged) is None, forged
    with pytest.raises(ValueError):
        NotificationSeal(b"short")
