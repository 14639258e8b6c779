"""``fleet token create|list|revoke``: bearer tokens of the tokens file.

Theory of operation: the token is 256 random bits (:func:`fleet.api.tokens.new_token`);
only its SHA-256 goes into the tokens file (``--tokens-file`` or
``FLEET_TOKENS_FILE``), which is validated before and after the change and
replaced atomically, readable by its owner only at every moment
(:func:`fleet.api.tokens.write_tokens`: a new 0600 file of unpredictable name
beside it, renamed onto it; no symlink is followed).  A running ``fleet serve``
reads the file again when it changes.  The token itself is printed on
stdout and nowhere else: it cannot be shown again.  ``fleet token list``
prints each token's name, role and queues (its hash only with
``--show-hashes``); ``fleet token revoke NAME`` removes the token from the
file with the same atomic 0600 write (an unknown name is an error, exit 1).
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
    ls = what.add_parser(
        "list",
        help="list the tokens: names, roles and queues (no hashes unless asked)",
        description="List the tokens of the tokens file: each one's name, role and queues.",
    )
    ls.add_argument("--show-hashes", action="store_true", help="also print each token's SHA-256")
    ls.add_argument(
        "--tokens-file", metavar="FILE", help="the tokens file (default: $FLEET_TOKENS_FILE)"
    )
    ls.set_defaults(handler=list_tokens)
    r = what.add_parser(
        "revoke",
        help="remove a token from the tokens file",
        description="Remove the token NAME from the tokens file; a running fleet serve "
        "refuses it as soon as it reads the file again.",
    )
    r.add_argument("name", metavar="NAME", help="the token's name (fleet token list)")
    r.add_argument(
        "--tokens-file", metavar="FILE", help="the tokens file (default: $FLEET_TOKENS_FILE)"
    )
    r.set_defaults(handler=revoke)


def _tokens_path(args: argparse.Namespace) -> Path | None:
    where = args.tokens_file or os.environ.get("FLEET_TOKENS_FILE")
    if not where:
        print(
            "error: name the tokens file with --tokens-file or FLEET_TOKENS_FILE", file=sys.stderr
        )
        return None
    return Path(where)


def list_tokens(args: argparse.Namespace) -> int:
    from fleet.api import tokens
    from fleet.service.columns import table

    path = _tokens_path(args)
    if path is None:
        return 1
    if not path.exists():
        print(f"error: {path}: no such file", file=sys.stderr)
        return 1
    try:
        current = tokens.read_tokens(path)
    except tokens.TokensFileError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    headers = ("NAME", "ROLE", "QUEUES") + (("SHA256",) if args.show_hashes else ())
    rows = [
        (t.name, t.role, ",".join(t.queues) or "-") + ((t.sha256,) if args.show_hashes else ())
        for t in current.tokens
    ]
    print(table(headers, rows))
    return 0


def revoke(args: argparse.Namespace) -> int:
    from fleet.api import tokens

    path = _tokens_path(args)
    if path is None:
        return 1
    try:
        current = tokens.read_tokens(path)
        kept = [t for t in current.tokens if t.name != args.name]
        if len(kept) == len(current.tokens):
            names = ", ".join(t.name for t in current.tokens) or "none"
            print(f"error: no token {args.name!r} in {path} (tokens: {names})", file=sys.stderr)
            return 1
        tokens.write_tokens(path, tokens.TokensFile(tokens=kept))
    except tokens.TokensFileError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"error: {path}: {e.strerror}", file=sys.stderr)
        return 1
    print(f"token {args.name} revoked: removed from {path}")
    return 0


def create(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from fleet.api import tokens

    path = _tokens_path(args)
    if path is None:
        return 1
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
