"""``fleet config``: the CLI's config file of contexts, and where a command sends its requests.

Theory of operation: the config file (``$FLEET_CONFIG``, else
``$XDG_CONFIG_HOME/fleet/config.yaml``, else ``~/.config/fleet/config.yaml``)
is YAML in kubectl's shape::

    current-context: prod
    contexts:
    - name: prod
      server: https://fleet.example.com
      token-file: ~/.fleet/prod-token      # or token: fleet_...

A missing file holds no context.  :func:`resolve` decides, for every command
that talks to a server (``apply``, ``get``, ``describe``, ``delete``,
``edit``, ``simulate --from-live``), the server and the token, field by field,
from the first of these that gives one: the flags (``--server``,
``--token``, then the context of ``--context``), the environment
(``FLEET_SERVER``, ``FLEET_TOKEN``, then the context of ``FLEET_CONTEXT``),
the file's current context, and the default server
:data:`DEFAULT_SERVER` (no token).  One context is used: ``--context``'s,
else ``FLEET_CONTEXT``'s, else the current one.  A context's token goes only to that
context's own server: when the server comes from elsewhere (``--server``
given beside a context), the context's token is not sent to it.  A server
written without a scheme (``127.0.0.1:18090``) means ``http://``
(:func:`normalize_server`); a server that is not an http(s) address, an
unknown context or an unreadable token file is a :class:`ConfigError`, whose
message is one plain line.  A ``token-file`` is read when used; a relative
one is taken from the config file's directory, ``~`` is expanded.

``fleet config view`` prints the file with every token shown as
``REDACTED``; ``get-contexts`` lists them (``*`` marks the current one);
``current-context`` prints its name; ``use-context NAME`` and ``set-context
NAME --server S [--token T | --token-file F]`` change the file, which is
written readable by its owner only and replaced atomically
(:func:`fleet.api.tokens.write_private`, the tokens file's writer).
"""

from __future__ import annotations

import argparse
import os
import sys
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, NamedTuple

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

DEFAULT_SERVER: Final = "http://127.0.0.1:8080"
REDACTED: Final = "REDACTED"


class ConfigError(ValueError):
    """The config file, a context or a server address cannot be used (one plain line)."""


class Context(BaseModel):
    """A named server with the token to send it (inline or in a file)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str = Field(min_length=1)
    server: str | None = None
    token: str | None = None
    token_file: str | None = Field(default=None, alias="token-file")


class Config(BaseModel):
    """The config file: its contexts and the current one."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    current_context: str | None = Field(default=None, alias="current-context")
    contexts: list[Context] = Field(default_factory=list)

    def context(self, name: str) -> Context | None:
        return next((c for c in self.contexts if c.name == name), None)


class Target(NamedTuple):
    """Where a command sends its requests, and the bearer token (None: none)."""

    url: str
    token: str | None


def config_path(env: Mapping[str, str] | None = None) -> Path:
    """The config file's path (``$FLEET_CONFIG``, else the XDG config directory's)."""
    env = os.environ if env is None else env
    if env.get("FLEET_CONFIG"):
        return Path(env["FLEET_CONFIG"]).expanduser()
    base = env.get("XDG_CONFIG_HOME") or str(Path("~/.config").expanduser())
    return Path(base) / "fleet" / "config.yaml"


def load(path: Path) -> Config:
    """The config at ``path``; a missing file holds no context."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Config()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"config file {path} cannot be read: {e}") from None
    try:
        data = yaml.safe_load(text)
        return Config.model_validate(data or {})
    except yaml.YAMLError:
        raise ConfigError(f"config file {path} is not YAML") from None
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(file)'}: {err['msg']}"
            for err in e.errors()
        )
        raise ConfigError(f"config file {path}: {problems}") from None


def save(path: Path, config: Config) -> None:
    """Write ``config`` to ``path``: 0600, atomically, its directory made when missing."""
    from fleet.api.tokens import write_private

    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    data = config.model_dump(by_alias=True, exclude_none=True)
    write_private(path, yaml.safe_dump(data, sort_keys=False))


def normalize_server(value: str, where: str = "--server") -> str:
    """``value`` as a base URL: ``http://`` when no scheme is written, no trailing slash.

    :class:`ConfigError` (naming ``where``) when it is not an http(s) address
    with a host and, if written, a valid port.
    """
    text = value.strip()
    if "://" not in text:
        text = "http://" + text
    parts = urllib.parse.urlsplit(text)
    problem = ""
    if parts.scheme.lower() not in ("http", "https"):
        problem = f"the scheme {parts.scheme!r} is not http or https"
    elif not parts.hostname:
        problem = "it names no host"
    else:
        try:
            parts.port  # noqa: B018 - raises on a port that is not one
        except ValueError:
            problem = "its port is not a number from 0 to 65535"
    if problem or parts.query or parts.fragment:
        problem = problem or "a server address has no query or fragment"
        raise ConfigError(
            f"{where} {value!r} is not a server address ({problem}); "
            "write it as http://HOST:PORT or HOST:PORT"
        )
    return text.rstrip("/")


def _context_token(context: Context, path: Path) -> str | None:
    if context.token:
        return context.token
    if not context.token_file:
        return None
    file = Path(context.token_file).expanduser()
    if not file.is_absolute():
        file = path.parent / file
    try:
        token = file.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(
            f"the token file {file} of context {context.name} cannot be read: "
            f"{getattr(e, 'strerror', None) or e}"
        ) from None
    return token or None


def _same_server(context: Context, base: str) -> bool:
    where = f"the server of context {context.name}"
    return bool(context.server) and normalize_server(context.server or "", where) == base


def resolve(
    server: str | None = None,
    token: str | None = None,
    context: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Target:
    """The server and token a command uses: flags, then the environment, then the
    current context, then :data:`DEFAULT_SERVER` (see the module's docstring)."""
    env = os.environ if env is None else env
    path = config_path(env)
    # The one context used: --context, else FLEET_CONTEXT, else the current one.
    config = load(path)
    flag = "--context" if context else "FLEET_CONTEXT" if env.get("FLEET_CONTEXT") else ""
    name = context or env.get("FLEET_CONTEXT") or config.current_context
    chosen: Context | None = None
    if name:
        chosen = config.context(name)
        if chosen is None:
            raise ConfigError(
                f"{flag} {name!r}: no such context in {path}"
                if flag
                else f"the current context {name!r} of {path} is not one of its contexts "
                "(fleet config use-context NAME)"
            )
    # Candidates, first wins: the flags, the environment, each followed by the context
    # when that is where the context was named; the current context last.
    rank = 0 if flag == "--context" else 1 if flag else 2
    servers: list[tuple[str, str | None, Context | None]] = [
        ("--server", server, None),
        ("FLEET_SERVER", env.get("FLEET_SERVER"), None),
    ]
    tokens: list[tuple[str | None, Context | None]] = [
        (token, None),
        (env.get("FLEET_TOKEN"), None),
    ]
    if chosen is not None:
        servers.insert(
            min(rank + 1, 2),
            (f"the server of context {chosen.name}", chosen.server, chosen),
        )
        tokens.insert(min(rank + 1, 2), (None, chosen))
    source, url, owner = next(
        ((s, u, c) for s, u, c in servers if u), ("the default server", DEFAULT_SERVER, None)
    )
    assert url is not None
    base = normalize_server(url, source)
    chosen_token: str | None = None
    for value, ctx in tokens:
        # A context's token goes to its own server only.
        if ctx is not None and (ctx is owner or _same_server(ctx, base)):
            value = _context_token(ctx, path)
        if value:
            chosen_token = value
            break
    return Target(base, chosen_token)


def server_options() -> argparse.ArgumentParser:
    """The options of every command that talks to a server (an argparse parent)."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--server",
        help="Fleet server address, http(s)://HOST:PORT or HOST:PORT (default: "
        f"$FLEET_SERVER, else the context's server, else {DEFAULT_SERVER})",
    )
    parent.add_argument(
        "--token",
        help="bearer token to send (default: $FLEET_TOKEN, else the context's token; none "
        "when none is set)",
    )
    parent.add_argument(
        "--context",
        metavar="NAME",
        help="the context of the config file to use (default: $FLEET_CONTEXT, else its "
        "current context; fleet config --help)",
    )
    return parent


# fleet config ------------------------------------------------------------------------------


def _redacted(config: Config) -> dict[str, Any]:
    data = config.model_dump(by_alias=True, exclude_none=True)
    for context in data.get("contexts", []):
        if "token" in context:
            context["token"] = REDACTED
    return data


def _view(args: argparse.Namespace) -> int:
    path = config_path()
    print(yaml.safe_dump(_redacted(load(path)), sort_keys=False), end="")
    return 0


def _get_contexts(args: argparse.Namespace) -> int:
    from fleet.service.columns import table

    config = load(config_path())
    rows = [
        (
            "*" if c.name == config.current_context else "",
            c.name,
            c.server or "-",
            "token-file" if c.token_file else "token" if c.token else "none",
        )
        for c in config.contexts
    ]
    print(table(("CURRENT", "NAME", "SERVER", "AUTH"), rows))
    return 0


def _current_context(args: argparse.Namespace) -> int:
    path = config_path()
    config = load(path)
    if not config.current_context:
        raise ConfigError(f"no current context in {path} (fleet config use-context NAME)")
    print(config.current_context)
    return 0


def _use_context(args: argparse.Namespace) -> int:
    path = config_path()
    config = load(path)
    if config.context(args.name) is None:
        known = ", ".join(c.name for c in config.contexts) or "none"
        raise ConfigError(f"no context {args.name!r} in {path} (contexts: {known})")
    config.current_context = args.name
    save(path, config)
    print(f"switched to context {args.name}")
    return 0


def _set_context(args: argparse.Namespace) -> int:
    path = config_path()
    config = load(path)
    context = config.context(args.name)
    if context is None:
        if args.server is None:
            raise ConfigError(f"context {args.name!r} is new: give its --server")
        context = Context(name=args.name)
        config.contexts.append(context)
    if args.server is not None:
        context.server = normalize_server(args.server)
    if args.token is not None:
        context.token, context.token_file = args.token, None
    if args.token_file is not None:
        context.token, context.token_file = None, args.token_file
    made_current = not config.current_context
    if made_current:
        config.current_context = args.name
    save(path, config)
    print(
        f"context {args.name} set in {path}" + ("; it is the current one" if made_current else "")
    )
    return 0


def _guard(handler: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        try:
            code: int = handler(args)
        except ConfigError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        except OSError as e:
            print(f"error: {getattr(e, 'filename', '')}: {e.strerror}", file=sys.stderr)
            return 1
        return code

    return run


def add_parser(sub: Any) -> None:
    """Add ``config`` to the ``fleet`` subcommands."""
    p = sub.add_parser(
        "config",
        help="servers and tokens by name (contexts), kubectl style",
        description="Read or change the config file of contexts: $FLEET_CONFIG, else "
        "~/.config/fleet/config.yaml. A command's server and token come from its flags, "
        "then FLEET_SERVER/FLEET_TOKEN/FLEET_CONTEXT, then the current context.",
        epilog="example: fleet config set-context prod --server fleet.example.com:8080 "
        "--token-file ~/.fleet/prod-token && fleet config use-context prod",
    )
    what = p.add_subparsers(dest="action", required=True, metavar="ACTION", help="what to do")
    v = what.add_parser("view", help="print the config file (tokens shown as REDACTED)")
    v.set_defaults(handler=_guard(_view))
    g = what.add_parser("get-contexts", help="list the contexts (* marks the current one)")
    g.set_defaults(handler=_guard(_get_contexts))
    c = what.add_parser("current-context", help="print the current context's name")
    c.set_defaults(handler=_guard(_current_context))
    u = what.add_parser("use-context", help="make NAME the current context")
    u.add_argument("name", metavar="NAME", help="a context of the file")
    u.set_defaults(handler=_guard(_use_context))
    s = what.add_parser(
        "set-context",
        help="add a context or change one",
        description="Add context NAME or change its fields; the first context set becomes "
        "the current one.",
    )
    s.add_argument("name", metavar="NAME", help="the context's name")
    s.add_argument("--server", help="its server, http(s)://HOST:PORT or HOST:PORT")
    token = s.add_mutually_exclusive_group()
    token.add_argument("--token", help="its bearer token, stored in the file (0600)")
    token.add_argument(
        "--token-file",
        metavar="FILE",
        help="a file holding its bearer token, read when used (relative: from the "
        "config file's directory)",
    )
    s.set_defaults(handler=_guard(_set_context))
