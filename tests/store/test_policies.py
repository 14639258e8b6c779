"""Standing PropagationPolicies in the store: migration 0007 and its functions, both databases."""

from __future__ import annotations

import json

from sqlalchemy import inspect

from fleet.store import configuration
from fleet.store.database import Session, downgrade, open_database, upgrade


def policy(name: str, api_version: str = "policy.karmada.io/v1alpha1", priority: int = 0) -> str:
    return json.dumps(
        {
            "apiVersion": api_version,
            "kind": "PropagationPolicy",
            "metadata": {"name": name, "namespace": "team-a"},
            "spec": {
                "priority": priority,
                "resourceSelectors": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob"}],
            },
        }
    )


async def put(
    session: Session, namespace: str, name: str, document: str, time: float, author: str = ""
) -> None:
    """Store one policy (``put_policies`` stores any number in one statement)."""
    api_version = json.loads(document)["apiVersion"]
    values = configuration.PolicyValues(namespace, name, api_version, document, author)
    await configuration.put_policies(session, [values], time)


async def test_policies_are_stored_replaced_and_deleted(database_url: str) -> None:
    db = await open_database(database_url)
    try:
        async with db.write() as session:
            await put(session, "team-a", "b", policy("b"), 10.0, "alice")
            await put(session, "team-a", "a", policy("a"), 11.0, "bob")
            await put(session, "default", "z", policy("z"), 12.0)
        async with db.write() as session:
            ack = "policy.one.alibabacloud.com/v1alpha1"
            replaced = policy("b", ack, priority=3)
            await put(session, "team-a", "b", replaced, 20.0, "carol")
        async with db.read() as session:
            rows = await configuration.stored_policies(session)
        assert [(r.namespace, r.name) for r in rows] == [
            ("default", "z"),
            ("team-a", "a"),
            ("team-a", "b"),
        ]
        b = rows[2]
        assert (b.api_version, b.created_at, b.updated_at, b.author) == (ack, 10.0, 20.0, "carol")
        assert json.loads(b.document)["spec"]["priority"] == 3
        assert rows[0].author == ""
        async with db.write() as session:
            assert await configuration.delete_policy(session, "team-a", "a") is True
            assert await configuration.delete_policy(session, "team-a", "a") is False
            assert await configuration.delete_policy(session, "team-b", "b") is False
        async with db.read() as session:
            rows = await configuration.stored_policies(session)
        assert [(r.namespace, r.name) for r in rows] == [("default", "z"), ("team-a", "b")]
    finally:
        await db.close()


async def test_migration_0007_adds_the_policies_and_where_a_jobs_policy_came_from(
    database_url: str,
) -> None:
    def schema(sync: object) -> tuple[set[str], set[str]]:
        found = inspect(sync)
        return set(found.get_table_names()), {c["name"] for c in found.get_columns("jobs")}

    db = await open_database(database_url)
    try:
        async with db.writer.connect() as conn:
            tables, columns = await conn.run_sync(schema)
        assert "policies" in tables and "policy_source" in columns
        async with db.write() as session:
            await put(session, "team-a", "p", policy("p"), 1.0)
        await downgrade(db, "0006")
        async with db.writer.connect() as conn:
            tables, columns = await conn.run_sync(schema)
        assert "policies" not in tables and "policy_source" not in columns
        assert "training_runtimes" in tables
        await upgrade(db)
        async with db.read() as session:
            assert await configuration.stored_policies(session) == []
    finally:
        await db.close()


async def test_many_policies_are_stored_by_one_call(database_url: str) -> None:
    db = await open_database(database_url)
    try:
        karmada = "policy.karmada.io/v1alpha1"
        async with db.write() as session:
            await put(session, "team-a", "p1", policy("p1"), 1.0, "alice")
        values = [
            configuration.PolicyValues(
                "team-a", f"p{i}", karmada, policy(f"p{i}", priority=i), "bob"
            )
            for i in range(1, 4)
        ]
        async with db.write() as session:
            await configuration.put_policies(session, values, 2.0)
        async with db.read() as session:
            rows = await configuration.stored_policies(session)
        assert [(r.name, r.created_at, r.updated_at, r.author) for r in rows] == [
            ("p1", 1.0, 2.0, "bob"),
            ("p2", 2.0, 2.0, "bob"),
            ("p3", 2.0, 2.0, "bob"),
        ]
        assert [json.loads(r.document)["spec"]["priority"] for r in rows] == [1, 2, 3]
    finally:
        await db.close()
