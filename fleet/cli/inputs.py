"""Reading the command line's input files: size limit first, then UTF-8 text.

Theory of operation: every file the ``fleet`` command reads goes through
:func:`read_input`.  A file larger than the limit (``--max-input-size``,
default :data:`DEFAULT_MAX_INPUT_SIZE`) is refused before it is parsed, and
before it is read when its size is known up front; for pipes and devices at
most one byte more than the limit is read.  Every refusal is an
:class:`InputError` whose message names the file and says why in one line:
missing, a directory, permission denied, too large (its size and the limit),
or not UTF-8.  :func:`parse_size` reads the option's value (``8MiB``,
``512KiB``, ``1000000``).
"""

from __future__ import annotations

import argparse
import os
import re
from typing import Final

from fleet.core.digits import parse_digits

#: Largest input file the command line parses unless ``--max-input-size`` says otherwise.
DEFAULT_MAX_INPUT_SIZE: Final = 8 * 1024 * 1024

_UNITS: Final = {
    "": 1,
    "b": 1,
    **dict.fromkeys(("k", "kib"), 1024),
    **dict.fromkeys(("m", "mib"), 1024**2),
    **dict.fromkeys(("g", "gib"), 1024**3),
}
_SIZE_RE: Final = re.compile(r"\s*([0-9]+)\s*([a-z]*)\s*")


class InputError(Exception):
    """An input file that cannot be used: ``str()`` is ``"PATH: why"``."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def parse_size(text: str) -> int:
    """Bytes in a size: a whole number, optionally with B, KiB, MiB or GiB (K, M, G)."""
    match = _SIZE_RE.fullmatch(text.lower())
    number = None if match is None else parse_digits(match.group(1))
    if match is None or number is None or match.group(2) not in _UNITS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a size: a whole number of bytes, or with KiB, MiB or GiB"
        )
    size = number * _UNITS[match.group(2)]
    if size < 1:
        raise argparse.ArgumentTypeError("the size must be at least 1 byte")
    return size


def describe_size(size: int) -> str:
    """``8,388,608 bytes (8.0 MiB)``: exact, then readable."""
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= factor:
            return f"{size:,} bytes ({size / factor:.1f} {unit})"
    return f"{size:,} bytes"


def _too_large(path: str, size: str, limit: int) -> InputError:
    return InputError(
        path,
        f"the file has {size}, above the input size limit of {describe_size(limit)}; "
        "refused before parsing (raise the limit with --max-input-size)",
    )


def read_input(path: str, max_size: int = DEFAULT_MAX_INPUT_SIZE) -> str:
    """The text of the file at ``path``, refused (InputError) above ``max_size`` bytes."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > max_size:
                raise _too_large(path, describe_size(size), max_size)
            data = f.read(max_size + 1)
    except FileNotFoundError:
        raise InputError(path, "no such file") from None
    except IsADirectoryError:
        raise InputError(path, "is a directory, not a file") from None
    except PermissionError:
        raise InputError(path, "permission denied") from None
    except OSError as e:
        raise InputError(path, e.strerror or str(e)) from None
    if len(data) > max_size:  # a pipe or a device: its size was not known up front
        raise _too_large(path, f"more than {describe_size(max_size)}", max_size)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        byte = e.object[e.start]
        raise InputError(path, f"not UTF-8 text (byte 0x{byte:02x} at offset {e.start})") from None
