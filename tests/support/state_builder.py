"""A board built by a seeded random script through the real API: every kind of card state.

Projects, epics with children, blocks, comments, acceptance items, claims, reports and
deliveries, approvals and done cards, canceled and archived cards (the tombstones), sessions,
labels, and attachments with random bytes. The same seed builds the same board shape.
"""

from __future__ import annotations

import random
from typing import Any

from .board import API, REPORT, BoardClient


async def _ok(reply: Any, *statuses: int) -> Any:
    assert reply.status in (statuses or (200, 201)), (reply.status, reply.body)
    return reply.body


async def build_random_board(client: BoardClient, seed: int, *, projects: int = 2, tasks: int = 10) -> dict[str, int]:
    """Build the board; returns how many of each thing the script made."""
    rng = random.Random(seed)
    worker = client.as_actor("claude", f"worker-{seed}")
    made = {"tasks": 0, "relations": 0, "comments": 0, "reports": 0, "attachments": 0, "archived": 0}
    for p in range(projects):
        project = f"p{seed % 97}x{p}"
        await _ok(await client.post(f"{API}/projects", {"id": project, "name": f"Project {p}",
                                                          "meta": {"seed": seed, "n": p}}), 201)
        created: list[dict[str, Any]] = []
        for n in range(rng.randint(tasks // 2, tasks)):
            kind = rng.choice(["task", "task", "epic", "bug", "review"])
            labels = rng.sample(["ui", "api", "docs", "infra", "bug-bash"], rng.randint(0, 3))
            task = await _ok(await client.post(f"{API}/tasks", {
                "project": project, "title": f"Card {n} of {project} ✓", "kind": kind, "labels": labels,
                "priority": rng.choice(["low", "medium", "high", "urgent"]),
                "description": "words " * rng.randint(0, 30), "meta": {"n": n, "nested": {"x": [1, 2.5, None]}},
                "status": rng.choice(["backlog", "todo"]),
                **({"assignee_kind": "claude", "assignee_id": f"worker-{seed}"} if rng.random() < 0.3 else {}),
            }), 201)
            created.append(task)
            made["tasks"] += 1
        epics = [t for t in created if t["kind"] == "epic"]
        others = [t for t in created if t["kind"] != "epic"]
        for child in others:
            if epics and rng.random() < 0.5:
                parent = rng.choice(epics)
                await _ok(await client.post(f"{API}/tasks/{parent['id']}/relations",
                                            {"type": "parent", "target": child["id"]}), 201)
                made["relations"] += 1
        for task in created:
            for _ in range(rng.randint(0, 3)):
                await _ok(await client.post(f"{API}/tasks/{task['id']}/comments",
                                            {"body": f"note {rng.random()}", "kind": rng.choice(["note", "discuss"])}), 201)
                made["comments"] += 1
            if rng.random() < 0.4:
                await _ok(await client.post(f"{API}/tasks/{task['id']}/acceptance",
                                            {"items": [f"criterion {i}" for i in range(rng.randint(1, 3))]}))
            if rng.random() < 0.3:
                data = rng.randbytes(rng.randint(0, 3000))
                await _ok(await client.request("POST", f"{API}/tasks/{task['id']}/attachments?filename=f{rng.randint(0, 9)}.bin",
                                               data=data, headers={"Content-Type": "application/octet-stream"}), 201)
                made["attachments"] += 1
        archived: set[str] = set()
        for task in others:
            if task["status"] != "todo":
                continue
            fate = rng.random()
            if fate < 0.25:
                await _ok(await worker.post(f"{API}/tasks/{task['id']}/claim"))
                await _ok(await worker.post(f"{API}/tasks/{task['id']}/sessions", {"seg": 0, "phase": "coding"}))
                await _ok(await worker.post(f"{API}/tasks/{task['id']}/deliver", {"body": REPORT}))
                made["reports"] += 1
                if rng.random() < 0.5:
                    await _ok(await client.post(f"{API}/tasks/{task['id']}/comments",
                                                {"body": "Looks right, approved.", "kind": "confirm"}), 201)
                    await _ok(await client.post(f"{API}/tasks/{task['id']}/move", {"to": "done"}))
                    if rng.random() < 0.5:
                        await _ok(await client.post(f"{API}/tasks/{task['id']}/archive"))
                        made["archived"] += 1
                        archived.add(task["id"])
            elif fate < 0.4:
                await _ok(await client.post(f"{API}/tasks/{task['id']}/move",
                                            {"to": "canceled", "reason": "no longer needed here"}))
                await _ok(await client.post(f"{API}/tasks/{task['id']}/archive"))
                made["archived"] += 1
                archived.add(task["id"])
        # Blocks and related links last: a blocked card could not be claimed above (DEPENDENCY_OPEN).
        linkable = [task for task in created if task["id"] not in archived]
        for _ in range(rng.randint(0, len(linkable))):
            source, target = rng.sample(linkable, 2)
            reply = await client.post(f"{API}/tasks/{source['id']}/relations",
                                      {"type": rng.choice(["blocks", "related"]), "target": target["id"]})
            assert reply.status in (201, 409), reply.body  # a cycle or a repeat is refused; fine
            made["relations"] += reply.status == 201
    await _every_kind_at_least_once(client, worker, project, made)
    return made


async def _every_kind_at_least_once(client: BoardClient, worker: BoardClient, project: str, made: dict[str, int]) -> None:
    """Whatever the dice said, the board holds an archived card, an attachment and a report."""
    if not made["archived"]:
        task = await _ok(await client.post(f"{API}/tasks", {"project": project, "title": "Tombstone"}), 201)
        await _ok(await client.post(f"{API}/tasks/{task['id']}/move", {"to": "canceled", "reason": "kept as tombstone"}))
        await _ok(await client.post(f"{API}/tasks/{task['id']}/archive"))
        made["tasks"] += 1
        made["archived"] += 1
    if not made["attachments"] or not made["reports"]:
        task = await _ok(await client.post(f"{API}/tasks", {"project": project, "title": "Delivered with a file"}), 201)
        made["tasks"] += 1
        await _ok(await client.request("POST", f"{API}/tasks/{task['id']}/attachments?filename=log.txt",
                                       data=b"build log\n", headers={"Content-Type": "text/plain"}), 201)
        made["attachments"] += 1
        await _ok(await worker.post(f"{API}/tasks/{task['id']}/claim"))
        await _ok(await worker.post(f"{API}/tasks/{task['id']}/deliver", {"body": REPORT}))
        made["reports"] += 1
