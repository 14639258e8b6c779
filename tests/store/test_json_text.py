"""JSON columns read back exactly what was written, through orjson or not."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select

from fleet.store import jobs as job_rows
from fleet.store import json_text
from fleet.store.database import open_database
from fleet.store.models import JobRow
from tests.store.test_inline_sqlite import job_row

#: What orjson writes or reads differently from ``json``: integers beyond 64 bits
#: (orjson refuses to write them and reads them as floats), a 19-digit integer that
#: still fits, non-ASCII text, and nesting.
AWKWARD: dict[str, Any] = {
    "kind": "PyTorchJob",
    "spec": {
        "huge": 123456789012345678901234567890,
        "negative": -(2**70),
        "edge": 2**63 - 1,
        "text": "naïve — 日本語",
        "list": [1, 2.5, None, True, {"a": [0]}],
    },
}


def test_the_codec_keeps_every_integer_exact() -> None:
    for value in (AWKWARD, {"n": 10**18}, {"n": 10**19}, [0.1, 1e300, -0.0]):
        text = json_text.dumps(value)
        assert json.loads(text) == value
        back = json_text.loads(text)
        assert back == value
        assert json.dumps(back) == json.dumps(value)  # ints stay ints, floats floats
    assert json_text.loads(json_text.dumps(AWKWARD).encode()) == AWKWARD


def test_keys_that_are_not_strings_are_written_as_json_writes_them() -> None:
    assert json.loads(json_text.dumps({1: "a", None: "b"})) == {"1": "a", "null": "b"}


async def test_a_stored_document_reads_back_as_it_was_written(database_url: str) -> None:
    db = await open_database(database_url)
    try:
        row = job_row("awkward") | {"manifest": AWKWARD, "record": {"n": 2**64}}
        async with db.write() as session:
            (row_id,) = await job_rows.insert_jobs(session, [row])
        async with db.read() as session:
            stored = (await session.execute(select(JobRow).where(JobRow.id == row_id))).scalar_one()
            heads = await job_rows.dispatch_heads(session, [row_id])
        assert stored.manifest == AWKWARD and stored.record == {"n": 2**64}
        assert heads[row_id][1] == AWKWARD
        assert isinstance(heads[row_id][1]["spec"]["huge"], int)
    finally:
        await db.close()
