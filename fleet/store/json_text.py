"""How the store writes and reads its JSON columns: orjson, exact for every value.

Theory of operation: job documents, core records, placements and audit
entries are JSON columns, written and read for every submission and every
admission, so the codec is on the service's hot path; orjson does both
several times faster than the standard library.  Two of its rules differ
from ``json``'s, and the store keeps the standard library's results: a value
orjson cannot write (an integer beyond 64 bits, a mapping key that is not a
string) is written by ``json`` instead, and text holding a number of 19 or
more digits in a row (orjson would read a very long integer as a float) is
read by ``json``.  Either way a value reads back as it was written.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

#: 19 digits in a row: the shortest text of an integer beyond 64 bits (and some
#: harmless longer numbers, read the slower way too).
_LONG_NUMBER = re.compile(r"[0-9]{19}")


def dumps(value: Any) -> str:
    """``value`` as JSON text (the engines' ``json_serializer``)."""
    try:
        return orjson.dumps(value).decode("utf-8")
    except orjson.JSONEncodeError:
        return json.dumps(value)


def loads(text: str | bytes) -> Any:
    """The value of JSON ``text`` (the engines' ``json_deserializer``)."""
    if isinstance(text, bytes | bytearray):
        text = text.decode("utf-8")
    if _LONG_NUMBER.search(text):
        return json.loads(text)
    return orjson.loads(text)
