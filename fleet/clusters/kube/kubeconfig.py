"""Which kubeconfig files Fleet reads, and what it refuses in them.

Theory of operation: a member's ``spec.kubeconfig.path`` names a file in the
kubeconfig directory (``--kubeconfig-dir``, :class:`KubeconfigPolicy`).
:func:`confine` resolves the path — a relative one against the directory,
symbolic links followed — and refuses it unless the file it resolves to lies
inside the resolved directory; nothing is opened before that.  :func:`read`
then reads and parses the file and refuses every user entry that gets its
credentials by running a program or asking an identity provider (``exec``,
``auth-provider``) unless the policy allows them (``--allow-kubeconfig-exec``):
the Kubernetes client library runs such a plugin as soon as it loads the
config, so this check comes before the library ever sees the file.  There is
one implementation for every caller: the cluster route (a 422 naming
``spec.kubeconfig.path``), the first start from ``--clusters`` (no start),
and each member's connection (:func:`fleet.clusters.kube.client.connect`,
also when stored members are restored after a restart: the member then stays
not ready).

A refusal is a :class:`KubeconfigError`: ``str()`` tells the administrator
why (in a 422 or a start-up error), :attr:`KubeconfigError.public` is a fixed
phrase for the member's health message.  A file that cannot be read or
parsed is :class:`Unreadable`, whose text is always :data:`UNREADABLE`; the
details (the path, the error) go to the server log only, and never any of
the file's content (a YAML error's own text quotes the line it stopped at,
so only its position is logged).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

log = logging.getLogger("fleet.clusters.kube")

#: The only thing a caller learns about a kubeconfig that cannot be read or parsed.
UNREADABLE: Final = "the kubeconfig could not be read; see the server log"
#: The fixed health message of a member whose kubeconfig lies outside the directory.
OUTSIDE: Final = "the kubeconfig lies outside the kubeconfig directory"
#: The fixed health message of a member whose kubeconfig runs a credential plugin.
PLUGIN: Final = (
    "the kubeconfig gets credentials from a plugin (exec or auth-provider), "
    "which this server does not run"
)
#: User keys whose credentials come from running a program or an identity provider.
PLUGIN_KEYS: Final = ("exec", "auth-provider")


@dataclass(frozen=True, slots=True)
class KubeconfigPolicy:
    """Where kubeconfigs must lie, and whether their credential plugins may run."""

    directory: Path
    allow_exec: bool = False


class KubeconfigError(Exception):
    """A kubeconfig Fleet does not use; ``str()`` says why, ``public`` is a fixed phrase."""

    public: str = UNREADABLE


class OutsideDirectory(KubeconfigError):
    """The path resolves to a file outside the kubeconfig directory."""

    public = OUTSIDE


class CredentialPlugin(KubeconfigError):
    """A user entry runs a credential plugin and the policy does not allow it."""

    public = PLUGIN


class Unreadable(KubeconfigError):
    """The file cannot be read or parsed (the log says why)."""

    def __init__(self) -> None:
        super().__init__(UNREADABLE)


def confine(path: str | Path, policy: KubeconfigPolicy) -> Path:
    """The resolved file ``path`` names (relative: in the directory), which must lie in it."""
    directory = policy.directory.resolve()
    given = Path(path)
    resolved = (directory / given).resolve()  # an absolute ``given`` replaces the directory
    if resolved == directory or not resolved.is_relative_to(directory):
        raise OutsideDirectory(
            f"resolves to a file outside the kubeconfig directory {str(directory)!r} "
            "(--kubeconfig-dir); put the kubeconfig there (a relative path is taken from "
            "that directory)"
        )
    return resolved


def read(path: str | Path, policy: KubeconfigPolicy, member: str) -> tuple[Path, dict[str, Any]]:
    """The resolved path and the parsed kubeconfig of member ``member``, checked.

    Raises :class:`OutsideDirectory`, :class:`Unreadable` or :class:`CredentialPlugin`.
    """
    resolved = confine(path, policy)
    try:
        text = resolved.read_text(encoding="utf-8")
        document = yaml.safe_load(text)
    except yaml.MarkedYAMLError as e:  # its text quotes the file: only the position is logged
        mark = e.problem_mark or e.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        log.warning("member %s: kubeconfig %s is not YAML%s", member, resolved, where)
        raise Unreadable from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        log.warning("member %s: kubeconfig %s cannot be read: %s", member, resolved, _safe_error(e))
        raise Unreadable from None
    if not isinstance(document, dict):
        log.warning(
            "member %s: kubeconfig %s is not a mapping but a %s",
            member,
            resolved,
            type(document).__name__,
        )
        raise Unreadable
    if not policy.allow_exec:
        refused = plugin_users(document)
        if refused:
            raise CredentialPlugin(
                f"the kubeconfig's user {', '.join(refused)} gets credentials from a plugin, "
                "which this server runs only with --allow-kubeconfig-exec"
            )
    return resolved, document


def plugin_users(document: dict[str, Any]) -> list[str]:
    """``users[i] 'name' (exec)`` for every user entry with a credential plugin."""
    users = document.get("users")
    found: list[str] = []
    if not isinstance(users, list):
        return found
    for index, entry in enumerate(users):
        user = entry.get("user") if isinstance(entry, dict) else None
        if not isinstance(user, dict):
            continue
        keys = [key for key in PLUGIN_KEYS if user.get(key) is not None]
        if keys:
            name = entry.get("name")
            named = f" {name[:60]!r}" if isinstance(name, str) else ""
            found.append(f"users[{index}]{named} ({' and '.join(keys)})")
    return found


def _safe_error(error: BaseException) -> str:
    """An I/O or decoding error without anything read from the file."""
    if isinstance(error, UnicodeDecodeError):
        return f"not UTF-8 (byte {error.start})"
    if isinstance(error, OSError):
        return error.strerror or type(error).__name__
    return type(error).__name__
