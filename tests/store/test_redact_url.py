"""URLs as they are shown: the password hidden, whatever its characters or place."""

from __future__ import annotations

import pytest

from fleet.store.database import DatabaseError, open_database, redact_url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "postgresql+asyncpg://fleet:hunter2@db:5432/fleet",
            "postgresql+asyncpg://fleet:***@db:5432/fleet",
        ),
        (
            "postgresql+asyncpg://fleet:hun%40ter2@db/fleet",
            "postgresql+asyncpg://fleet:***@db/fleet",
        ),
        ("postgresql+asyncpg://fleet:hun@ter2@db/fleet", "postgresql+asyncpg://fleet:***@db/fleet"),
        ("postgresql+asyncpg://fleet:hun/ter2@db/fleet", "postgresql+asyncpg://fleet:***@db/fleet"),
        (
            "postgresql+asyncpg://fleet@db/fleet?password=hunter2&ssl=require",
            "postgresql+asyncpg://fleet@db/fleet?password=***&ssl=require",
        ),
        ("http://ops:hunter2@10.0.0.7:8080", "http://ops:***@10.0.0.7:8080"),
        ("http://10.0.0.7:8080", "http://10.0.0.7:8080"),
        ("postgresql+asyncpg://fleet@db/fleet", "postgresql+asyncpg://fleet@db/fleet"),
        ("sqlite+aiosqlite:///./fleet.db", "sqlite+aiosqlite:///./fleet.db"),
    ],
    ids=[
        "userinfo",
        "encoded-at",
        "raw-at",
        "slash",
        "query",
        "http",
        "http-plain",
        "no-password",
        "sqlite",
    ],
)
def test_a_shown_url_hides_its_password(url: str, shown: str) -> None:
    assert redact_url(url) == shown


async def test_a_malformed_database_url_is_an_error_without_its_password() -> None:
    with pytest.raises(DatabaseError) as raised:
        await open_database("postgresql+asyncpg://fleet:hunter2@db:notaport/fleet")
    assert "hunter2" not in str(raised.value) and "fleet:***@" in str(raised.value)
