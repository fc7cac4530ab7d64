"""Workers: RQ-style queue scripts, Python tasks and cron schedules, on the Conveyor client.

Owns: queue directories and their message states on disk (queuedir), script processes and
the RQ status-pipe protocol (script, runner), `dup` and relay to other clusters (relay),
first-claim-wins markers (claims) under cron ticks, blocking params and idempotency keys,
schedules (cron), Python tasks (tasks, taskworker, supervisor) and the `conveyor worker` /
`conveyor queue` commands (cli, service).

Must not touch: the node's or core's internals, persistence or protocol modules. Everything
here goes through `conveyor.client`, so it works against one node or a cluster alike.
"""

from conveyor.worker.tasks import App, Task

__all__ = ["App", "Task"]
