"""``fleet token create``: a new bearer token, printed once, its hash added to the tokens file.

Theory of operation: the token is 256 random bits (:func:`fleet.api.tokens.new_token`);
only its SHA-256 goes into the tokens file (``--tokens-file`` or
``FLEET_TOKENS_FILE``), which is validated before and after the change and
replaced atomically, readable by its owner only at every moment
(:func:`fleet.api.tokens.write_tokens`: a new 0600 file of unpredictable name
beside it, renamed onto it; no symlink is followed).  A running ``fleet serve``
reads the file again when it changes.  The token itself is printed on
stdout and nowhere else: it cannot be shown again.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any


def add_parser(sub: Any) -> None:
    """Add ``token`` to the ``fleet`` subcommands."""
    p = sub.add_parser("token", help="manage bearer tokens (the tokens file)")
    what = p.add_subparsers(dest="action", required=True, metavar="ACTION", help="what to do")
    c = what.add_parser(
        "create",
        help="create a token: print it once, store its hash",
        description="Create a bearer token: print it once on stdout and add its SHA-256 to "
        "the tokens file.",
    )
    c.add_argument("name", metavar="NAME", help="who holds the token (the audit log names it)")
    c.add_argument("--role", choices=("admin", "team"), required=True, help="admin or team")
    c.add_argument(
        "--queue",
        action="append",
        default=[],
        metavar="QUEUE",
        help="a leaf queue a team token is bound to; repeatable",
    )
    c.add_argument(
        "--tokens-file",
        metavar="FILE",
        help="the tokens file (default: $FLEET_TOKENS_FILE); created when missing",
    )
    c.set_defaults(handler=create)


def create(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from fleet.api import tokens

    where = args.tokens_file or os.environ.get("FLEET_TOKENS_FILE")
    if not where:
        print(
            "error: name the tokens file with --tokens-file or FLEET_TOKENS_FILE", file=sys.stderr
        )
        return 1
    path = Path(where)
    try:
        current = tokens.read_tokens(path)
        token = tokens.new_token()
        entry = tokens.TokenEntry(
            name=args.name, role=args.role, queues=args.queue, sha256=tokens.hash_token(token)
        )
        updated = tokens.TokensFile(tokens=[*current.tokens, entry])
        tokens.parse_tokens(updated.model_dump_json(), str(path))  # the same checks as serve
        tokens.write_tokens(path, updated)
    except tokens.TokensFileError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except ValidationError as e:
        for error in e.errors():
            where_ = ".".join(str(p) for p in error["loc"])
            print(f"error: {where_}: {error['msg']}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"error: {path}: {e.strerror}", file=sys.stderr)
        return 1
    print(token)
    print(f"token {args.name} ({args.role}) added to {path}; it is shown only now", file=sys.stderr)
    return 0
