"""The kubeconfig checks: confined to the directory, no credential plugin unless allowed,
and nothing of an unreadable file's content in an error or the log."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fleet.clusters.kube import client, kubeconfig
from fleet.clusters.kube.kubeconfig import KubeconfigPolicy
from tests.clusters.kubeconfigs import SECRET, config, exec_user


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    d = tmp_path / "kubeconfigs"
    d.mkdir()
    (d / "member.yaml").write_text(config())
    (tmp_path / "outside.yaml").write_text(config())
    return d


# Confinement ------------------------------------------------------------------------------


def _dotdot(d: Path) -> str:
    return str(d / ".." / "outside.yaml")


def _symlink(d: Path) -> str:
    (d / "link.yaml").symlink_to(d.parent / "outside.yaml")
    return str(d / "link.yaml")


def _linked_dir(d: Path) -> str:
    (d / "sub").symlink_to(d.parent)
    return str(d / "sub" / "outside.yaml")


def _relative_dotdot(d: Path) -> str:
    return "../outside.yaml"


def _absolute(d: Path) -> str:
    return "/etc/passwd"


def _the_directory(d: Path) -> str:
    return str(d)


@pytest.mark.parametrize(
    "path",
    [_dotdot, _symlink, _linked_dir, _relative_dotdot, _absolute, _the_directory],
    ids=["dotdot", "symlink-out", "symlinked-dir", "relative-dotdot", "absolute", "the-dir"],
)
def test_a_path_that_resolves_outside_the_directory_is_refused(
    directory: Path, path: Callable[[Path], str]
) -> None:
    with pytest.raises(kubeconfig.OutsideDirectory, match="outside the kubeconfig directory"):
        kubeconfig.confine(path(directory), KubeconfigPolicy(directory))


@pytest.mark.parametrize(
    "path",
    [
        lambda d: str(d / "member.yaml"),
        lambda d: "member.yaml",  # relative: taken from the directory
        lambda d: str(d / "sub" / ".." / "member.yaml"),
    ],
    ids=["absolute", "relative", "dotdot-inside"],
)
def test_a_path_inside_the_directory_is_its_resolved_file(
    directory: Path, path: Callable[[Path], str]
) -> None:
    (directory / "sub").mkdir()
    found = kubeconfig.confine(path(directory), KubeconfigPolicy(directory))
    assert found == (directory / "member.yaml").resolve()


def test_a_symlink_inside_the_directory_to_a_file_inside_it_is_followed(directory: Path) -> None:
    (directory / "alias.yaml").symlink_to(directory / "member.yaml")
    found = kubeconfig.confine("alias.yaml", KubeconfigPolicy(directory))
    assert found == (directory / "member.yaml").resolve()


# Credential plugins -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("user", "named"),
    [
        ({"exec": {"command": "x", "apiVersion": "v"}}, "users[0] 'fleet' (exec)"),
        ({"auth-provider": {"name": "oidc"}}, "users[0] 'fleet' (auth-provider)"),
    ],
    ids=["exec", "auth-provider"],
)
def test_a_user_with_a_credential_plugin_is_refused_unless_allowed(
    directory: Path, user: dict[str, Any], named: str
) -> None:
    (directory / "plugin.yaml").write_text(config(user))
    with pytest.raises(kubeconfig.CredentialPlugin) as refused:
        kubeconfig.read("plugin.yaml", KubeconfigPolicy(directory), "m")
    assert named in str(refused.value) and "--allow-kubeconfig-exec" in str(refused.value)
    assert refused.value.public == kubeconfig.PLUGIN
    allowed = KubeconfigPolicy(directory, allow_exec=True)
    assert kubeconfig.read("plugin.yaml", allowed, "m")[1]["users"][0]["user"] == user


async def test_connect_never_runs_a_refused_plugin_and_runs_an_allowed_one(
    directory: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    (directory / "plugin.yaml").write_text(config(exec_user(marker)))
    with pytest.raises(client.Invalid) as refused:
        await client.connect("m", "plugin.yaml", None, KubeconfigPolicy(directory))
    assert refused.value.message == kubeconfig.PLUGIN
    assert not marker.exists()
    allowed = KubeconfigPolicy(directory, allow_exec=True)
    connected = await client.connect("m", "plugin.yaml", None, allowed)
    await connected.close()
    assert marker.exists()  # the check, not the lack of a plugin, kept it from running


async def test_connect_refuses_a_path_outside_the_directory_without_opening_it(
    directory: Path,
) -> None:
    with pytest.raises(client.Invalid) as refused:
        await client.connect("m", "../outside.yaml", None, KubeconfigPolicy(directory))
    assert refused.value.message == kubeconfig.OUTSIDE


# Unreadable files -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [
        f"users: [{{name: {SECRET}\n  - : ]\n".encode(),  # broken YAML
        f"token: {SECRET}\n".encode() + b"\xff\xfe",  # not UTF-8
        f"- {SECRET}\n".encode(),  # a list
        f"{SECRET} and more words\n".encode(),  # a string
    ],
    ids=["broken-yaml", "not-utf8", "list", "string"],
)
async def test_an_unreadable_kubeconfig_is_one_fixed_message_and_its_content_goes_nowhere(
    directory: Path, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    (directory / "bad.yaml").write_bytes(content)
    with pytest.raises(kubeconfig.Unreadable) as unreadable:
        kubeconfig.read("bad.yaml", KubeconfigPolicy(directory), "m")
    assert str(unreadable.value) == unreadable.value.public == kubeconfig.UNREADABLE
    with pytest.raises(client.Invalid) as invalid:
        await client.connect("m", "bad.yaml", None, KubeconfigPolicy(directory))
    assert invalid.value.message == kubeconfig.UNREADABLE
    assert "bad.yaml" in caplog.text  # the log says which file
    assert SECRET not in caplog.text


async def test_a_mapping_the_client_library_cannot_use_is_a_fixed_message(
    directory: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A password file is a YAML mapping ("root:$6$...:::" is one key): only the library
    # finds it unusable, and it says so in a fixed message with nothing of the file.
    (directory / "shadow").write_text(f"root:$6${SECRET}:19000:0:99999:7:::\n")
    with pytest.raises(client.Invalid) as invalid:
        await client.connect("m", "shadow", None, KubeconfigPolicy(directory))
    assert invalid.value.message == client.UNUSABLE
    assert SECRET not in str(invalid.value) and SECRET not in caplog.text
