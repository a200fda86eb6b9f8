"""A scripted handler (its outcome per attempt) and a drain that counts where messages ended."""

from __future__ import annotations

from typing import Any

import runtime


def handler(plan: dict[int, list[str]] | list[str], seen: list[tuple[int, int | None]]):
    """A handler returning outcomes by delivery: plan[i] is the outcome of delivery i+1."""

    async def handle(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
        seen.append((message.id, ctx.attempt))
        steps = plan if isinstance(plan, list) else plan[message.payload["n"]]
        step = steps[min(len([s for s in seen if s[0] == message.id]) - 1, len(steps) - 1)]
        if step == "raise":
            raise RuntimeError("handler failed")
        if step.startswith("retry_after"):
            return runtime.retry_after(float(step.split(":")[1]))
        if step.startswith("custom:"):
            return runtime.custom(step.split(":")[1])
        return getattr(runtime, step)()

    return handle


async def drain(qt, handle, **kw: Any) -> dict[str, int]:
    kw.setdefault("concurrency", 1)
    kw.setdefault("retry_policy", runtime.Immediate())  # these tests count immediate retries
    return await runtime.Consumer(qt.url, qt.queue, handle, **kw).drain()
