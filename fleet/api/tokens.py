"""Bearer tokens: the tokens file, its hashes, and who holds a token.

Theory of operation (``docs/design/api-and-access.md``; the checks are in
:mod:`fleet.api.auth`):

* **Tokens** live in the YAML file named by ``--tokens-file``: a list of
  ``{name, role, queues, sha256}``.  Only the SHA-256 of a token is stored
  (a token is 32 random bytes, so a plain hash cannot be reversed by
  guessing); the service hashes what a request presents and looks the hash
  up.  The file is read again when it changes, so ``fleet token create``
  takes effect without a restart; a file that became unreadable keeps the
  tokens last read (and says so in the log).  A file others may write is
  warned about in the log when it is first read and whenever it changes
  (mode included): whoever writes it can add an admin token.
  :func:`write_tokens` never leaves the file, or the text on its way,
  readable by others, and follows no symlink planted beside it (its writer,
  :func:`write_private`, also writes the CLI's config file, which may hold tokens).
* **Roles**: ``admin`` may do everything; ``team`` is bound to leaf queues
  and may submit and cancel only there (the handlers check the queues with
  :meth:`Caller.may_act_in`).  Each route's declaration (:mod:`fleet.api.routing`)
  names the least role it needs (:data:`~fleet.api.routing.Access`): ``open``
  (health, the document), ``read`` (any valid token), ``team``, ``admin``.
* **No tokens configured**: every caller is the admin
  :data:`NO_TOKENS_CALLER` (the settings refuse to bind anything but
  loopback then, and the service says so in its log at start).
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import logging
import os
import secrets
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Final, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

log = logging.getLogger("fleet.api.tokens")

Role = Literal["admin", "team"]
#: How a new token starts (``fleet token create``), so a leaked one is easy to grep for.
TOKEN_PREFIX: Final = "fleet_"


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is asking: a token's name, its role and (for a team token) its queues."""

    name: str
    role: Role
    queues: frozenset[str] = frozenset()

    @property
    def admin(self) -> bool:
        return self.role == "admin"

    def may_act_in(self, queue: str) -> bool:
        """Whether this caller may submit or cancel jobs of leaf ``queue``."""
        return self.admin or queue in self.queues


#: The caller when no tokens are configured: everyone is the admin.
NO_TOKENS_CALLER: Final = Caller("anonymous (no tokens configured)", "admin")


# The tokens file --------------------------------------------------------------------------

TokenName = Annotated[
    str, StringConstraints(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9][A-Za-z0-9._@-]*$")
]
QueueName = Annotated[str, StringConstraints(min_length=1, max_length=253)]


class TokenEntry(BaseModel):
    """One token of the tokens file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: TokenName = Field(description="Who holds the token; the audit log names it.")
    role: Role = Field(description="admin: everything; team: its queues only.")
    queues: list[QueueName] = Field(
        default_factory=list, description="The leaf queues a team token is bound to."
    )
    sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")] = Field(
        description="SHA-256 of the token, lower-case hex."
    )


class TokensFile(BaseModel):
    """The tokens file: ``tokens: [...]``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tokens: list[TokenEntry] = Field(default_factory=list)


class TokensFileError(ValueError):
    """The tokens file cannot be used; the message names the file and every problem."""


def hash_token(token: str) -> str:
    """The SHA-256 of ``token`` as lower-case hex (what the tokens file stores)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    """A new random token (256 bits)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def parse_tokens(text: str, source: str) -> TokensFile:
    """The tokens of a tokens file's text; :class:`TokensFileError` naming every problem."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise TokensFileError(f"{source}: not YAML: {e}") from None
    if data is None:
        data = {}
    try:
        parsed = TokensFile.model_validate(data)
    except ValidationError as e:
        problems = [
            f"{'.'.join(str(p) for p in err['loc']) or '(file)'}: {err['msg']}"
            for err in e.errors()
        ]
        raise TokensFileError(f"{source}: " + "; ".join(problems)) from None
    problems = []
    seen: set[str] = set()
    hashes: set[str] = set()
    for i, entry in enumerate(parsed.tokens):
        where = f"tokens.{i}"
        if entry.name in seen:
            problems.append(f"{where}.name: {entry.name!r} is named twice")
        seen.add(entry.name)
        if entry.sha256 in hashes:
            problems.append(f"{where}.sha256: the same token is listed twice")
        hashes.add(entry.sha256)
        if entry.role == "team" and not entry.queues:
            problems.append(f"{where}.queues: a team token is bound to at least one queue")
        if entry.role == "admin" and entry.queues:
            problems.append(f"{where}.queues: an admin token is bound to no queue")
    if problems:
        raise TokensFileError(f"{source}: " + "; ".join(problems))
    return parsed


def read_tokens(path: Path) -> TokensFile:
    """The tokens of ``path`` (a missing file holds none)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return TokensFile()
    except (OSError, UnicodeDecodeError) as e:
        raise TokensFileError(f"{path}: cannot be read: {e}") from None
    return parse_tokens(text, str(path))


def write_tokens(path: Path, tokens: TokensFile) -> None:
    """Write ``tokens`` to ``path``, readable by its owner only, replacing it atomically.

    The text goes to a new file of an unpredictable name in the same directory,
    created exclusively with mode 0600 and without following a symlink
    (:func:`tempfile.mkstemp`), so no other user can read it at any moment and
    nothing planted in the directory is written through; it is flushed to disk,
    then renamed onto ``path`` (a symlink at ``path`` is replaced, not followed).
    """
    write_private(path, yaml.safe_dump(tokens.model_dump(mode="json"), sort_keys=False))


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` as :func:`write_tokens` does: 0600 from the first byte,
    atomically, following no symlink (the CLI's config file is written so too)."""
    directory = path.parent
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # the rename itself survives a crash
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def warn_if_writable_by_others(path: Path, mode: int) -> None:
    """Log a warning when the tokens file (``mode``: its ``st_mode``) is group- or world-writable.

    Whoever may write the file may add an admin token.  A file others may only
    read is not warned about: it holds names, roles and SHA-256 hashes of
    256-bit random tokens, which cannot be turned back into tokens.
    """
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        who = "everyone" if mode & stat.S_IWOTH else "its group"
        log.warning(
            "tokens file %s is writable by %s (mode %04o): whoever can write it can add an "
            "admin token; make it writable by its owner only (chmod go-w)",
            path,
            who,
            stat.S_IMODE(mode),
        )


class TokenStore:
    """The tokens of the tokens file, read again when the file changes."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._stamp: tuple[int, int, int, int] | None = None
        self._callers: dict[str, Caller] = {}
        if path is not None:
            self._stamp = self._stat()  # before reading: a change after it is read again
            self._load(read_tokens(path))

    @property
    def configured(self) -> bool:
        """Whether tokens are checked at all (a tokens file is named)."""
        return self.path is not None

    def _stat(self) -> tuple[int, int, int, int] | None:
        """What tells a changed file (a new mode too); warns when others may write it."""
        assert self.path is not None
        try:
            st = self.path.stat()
        except OSError:
            return None
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino, st.st_mode)
        if stamp != self._stamp:
            warn_if_writable_by_others(self.path, st.st_mode)
        return stamp

    def _load(self, tokens: TokensFile) -> None:
        self._callers = {
            t.sha256: Caller(t.name, t.role, frozenset(t.queues)) for t in tokens.tokens
        }

    def _refresh(self) -> None:
        if self.path is None:
            return
        stamp = self._stat()
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            self._load(read_tokens(self.path))
        except TokensFileError as e:
            log.error("tokens file changed but cannot be used; keeping the old tokens: %s", e)
        else:
            log.info("tokens file %s read again: %d tokens", self.path, len(self._callers))

    def lookup(self, token: str) -> Caller | None:
        """The caller holding ``token``, or None."""
        self._refresh()
        return self._callers.get(hash_token(token))

    def names(self) -> list[str]:
        self._refresh()
        return sorted(c.name for c in self._callers.values())


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is only reachable from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
