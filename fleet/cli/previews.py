"""Dry runs in plain words: what a change would set, and whom it would touch.

Theory of operation: ``fleet edit quota NODE --dry-run`` reads the tree in
force (``GET /api/v1/quota-tree``) before the server answers the dry run of
the patch; :func:`node_changes` writes, for every field the patch names, the
node's value before and after (``max nvidia.com/gpu: 32 -> 16``; a resource
the patch removes, or one not written before, is ``(none)`` in a min and
``unlimited`` in a max), each resource as the patch names it: the patch itself says what
changes, the tree only what it changes from.  :func:`affected` lists what
the server's answer (:class:`fleet.api.admin_schemas.TreeChange`) says the
change does to jobs: nodes left over a limit with the running jobs that keep
them over, jobs moved to another queue, jobs failed for want of a leaf; or
``no running job affected``.  :func:`print_edit` prints both under a
heading that says nothing was changed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

NONE = "(none)"
UNLIMITED = "unlimited"


def find_node(node: Mapping[str, Any] | None, name: str) -> Mapping[str, Any] | None:
    """The node called ``name`` in the tree under ``node`` (depth first), or None."""
    if not isinstance(node, Mapping):
        return None
    if node.get("name") == name:
        return node
    for child in node.get("children") or []:
        found = find_node(child, name)
        if found is not None:
            return found
    return None


def _show(value: object) -> str:
    if value is None:
        return NONE
    if isinstance(value, Sequence) and not isinstance(value, str):
        return ", ".join(str(v) for v in value) or NONE
    return str(value)


def _resources(values: object) -> str:
    if not isinstance(values, Mapping) or not values:
        return NONE
    return ", ".join(f"{k}={v}" for k, v in values.items())


def node_changes(before: Mapping[str, Any] | None, patch: Mapping[str, Any]) -> list[str]:
    """``FIELD [RESOURCE]: BEFORE -> AFTER`` for every field of ``patch`` (a merge patch)."""
    node = before or {}
    lines: list[str] = []
    for field, value in patch.items():
        old = node.get(field)
        if field in ("min", "max") and isinstance(value, Mapping):
            held = old if isinstance(old, Mapping) else {}
            absent = UNLIMITED if field == "max" else NONE  # a max names what it limits
            for resource, amount in value.items():
                was = held.get(resource)
                lines.append(
                    _line(
                        f"{field} {resource}",
                        absent if was is None else str(was),
                        absent if amount is None else str(amount),
                    )
                )
        elif field == "max" and value is None:
            lines.append(_line("max", _resources(old), UNLIMITED))
        elif field == "min" and value is None:
            lines.append(_line("min", _resources(old), NONE))
        else:
            lines.append(_line(field, _show(old), _show(value)))
    return lines


def _line(what: str, before: str, after: str) -> str:
    if before == after:
        return f"{what}: {before} (unchanged)"
    return f"{what}: {before} -> {after}"


def affected(change: Mapping[str, Any]) -> list[str]:
    """What the change does to jobs, one line each; ``no running job affected`` if nothing."""
    lines: list[str] = []
    for over in change.get("overLimit", []):
        jobs = ", ".join(over["reclaimable"]) or "-"
        lines.append(
            f"{over['node']} would be over its {over['limit']} on {over['resource']} "
            f"({over['used']} used, {over['allowed']} allowed); reclaimable first: {jobs}"
        )
    for moved in change.get("moved", []):
        lines.append(
            f"job {moved['job']} would move from {moved['fromQueue']} to {moved['toQueue']}"
        )
    for failed in change.get("failed", []):
        lines.append(f"job {failed['job']} would fail: {failed['reason']}")
    return lines or ["no running job affected"]


def print_edit(
    name: str, tree: Mapping[str, Any], patch: Mapping[str, Any], change: Mapping[str, Any]
) -> None:
    """The dry run of a patch of node ``name``: its fields before and after, what it affects."""
    spec = tree.get("spec") if isinstance(tree, Mapping) else None
    root = spec.get("root") if isinstance(spec, Mapping) else None
    print(f"quota node {name}: dry run, nothing changed; the change would set")
    for line in node_changes(find_node(root, name), patch):
        print(f"  {line}")
    print("and would affect")
    for line in affected(change):
        print(f"  {line}")
    for warning in change.get("warnings", []):
        print(f"warning: {warning}")
