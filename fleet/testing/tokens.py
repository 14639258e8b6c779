"""Bearer tokens for tests and benchmarks: an admin, a team-a and a team-b token.

Theory of operation: :data:`TOKENS` are the secrets by who holds them;
:func:`write_tokens_file` writes the tokens file (``--tokens-file``) that
grants them: ``ops`` is an admin, ``ci-a`` and ``ci-b`` are team tokens of the
queues ``team-a`` and ``team-b``.  :func:`admin_tokens_file` writes a file
with one admin token of the caller's; :func:`bearer` is the header that
presents a token.
"""

from __future__ import annotations

from pathlib import Path

from fleet.api.tokens import TokenEntry, TokensFile, hash_token, write_tokens

TOKENS = {
    "admin": "fleet_admin-secret-token",
    "team-a": "fleet_team-a-secret-token",
    "team-b": "fleet_team-b-secret-token",
}


def write_tokens_file(path: Path) -> Path:
    """The tokens file of :data:`TOKENS` at ``path``."""
    entries = [
        TokenEntry(name="ops", role="admin", sha256=hash_token(TOKENS["admin"])),
        TokenEntry(
            name="ci-a", role="team", queues=["team-a"], sha256=hash_token(TOKENS["team-a"])
        ),
        TokenEntry(
            name="ci-b", role="team", queues=["team-b"], sha256=hash_token(TOKENS["team-b"])
        ),
    ]
    write_tokens(path, TokensFile(tokens=entries))
    return path


def admin_tokens_file(path: Path, token: str, name: str = "admin") -> Path:
    """A tokens file at ``path`` granting ``token`` (named ``name``) the admin role."""
    write_tokens(
        path, TokensFile(tokens=[TokenEntry(name=name, role="admin", sha256=hash_token(token))])
    )
    return path


def bearer(who: str) -> dict[str, str]:
    """The ``Authorization`` header presenting the token of ``who`` (a key of TOKENS)."""
    return {"Authorization": f"Bearer {TOKENS[who]}"}
