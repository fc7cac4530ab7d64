"""Help for `conveyor cli`: the syntax and a one-line summary of every Disque command."""

from __future__ import annotations

from dataclasses import dataclass

GROUPS = ("jobs", "queues", "server", "cluster")


@dataclass(frozen=True, slots=True)
class CommandHelp:
    name: str
    syntax: str
    summary: str
    group: str


def _h(name: str, syntax: str, summary: str, group: str) -> CommandHelp:
    return CommandHelp(name, syntax, summary, group)


COMMANDS: dict[str, CommandHelp] = {
    entry.name: entry
    for entry in (
        # jobs
        _h(
            "ADDJOB",
            "queue body ms-timeout [REPLICATE count] [DELAY sec] [RETRY sec] [TTL sec] "
            "[MAXLEN count] [ASYNC]",
            "Add a job to a queue; replies with the job ID.",
            "jobs",
        ),
        _h(
            "GETJOB",
            "[NOHANG] [TIMEOUT ms-timeout] [COUNT count] [WITHCOUNTERS] FROM queue1 [queue2 ...]",
            "Fetch jobs from the first non-empty queues, blocking until one arrives.",
            "jobs",
        ),
        _h("ACKJOB", "jobid1 [jobid2 ...]", "Acknowledge jobs: they were processed.", "jobs"),
        _h(
            "FASTACK",
            "jobid1 [jobid2 ...]",
            "Acknowledge jobs with a best-effort, one-message delete.",
            "jobs",
        ),
        _h(
            "WORKING",
            "jobid",
            "Tell the cluster the job is still being worked on; replies with its RETRY.",
            "jobs",
        ),
        _h(
            "NACK",
            "jobid1 [jobid2 ...] [DELAY sec]",
            "Put jobs back in their queue now (or after DELAY), counting a failed delivery.",
            "jobs",
        ),
        _h(
            "ENQUEUE",
            "jobid1 [jobid2 ...]",
            "Put active jobs back in their queue.",
            "jobs",
        ),
        _h("DEQUEUE", "jobid1 [jobid2 ...]", "Take queued jobs out of their queue.", "jobs"),
        _h("DELJOB", "jobid1 [jobid2 ...]", "Delete jobs from this node only.", "jobs"),
        _h("SHOW", "jobid", "Describe a job: state, queue, counters, times, body.", "jobs"),
        _h(
            "JSCAN",
            "[cursor] [COUNT count] [BUSYLOOP] [QUEUE queue] [STATE state1 STATE state2 ...] "
            "[REPLY all|id]",
            "Iterate over the jobs of the node, filtered by queue and state.",
            "jobs",
        ),
        _h("LOADJOB", "serialized-job", "Load a job (used only when replaying the AOF).", "jobs"),
        # queues
        _h("QLEN", "queue", "The number of jobs queued in a queue.", "queues"),
        _h(
            "QPEEK",
            "queue count",
            "Show the oldest jobs of a queue (newest first if count is negative).",
            "queues",
        ),
        _h("QSTAT", "queue", "Describe a queue: length, age, rates, pause state.", "queues"),
        _h(
            "QSCAN",
            "[cursor] [COUNT count] [BUSYLOOP] [MINLEN len] [MAXLEN len] [IMPORTRATE rate]",
            "Iterate over the queues of the node.",
            "queues",
        ),
        _h(
            "PAUSE",
            "queue option1 [option2 ...] (in, out, all, none, state, bcast)",
            "Pause a queue for input and/or output, or show its pause state.",
            "queues",
        ),
        # server
        _h("AUTH", "password", "Authenticate to the node.", "server"),
        _h("PING", "[message]", "Ping the node.", "server"),
        _h("ECHO", "message", "Echo the message back.", "server"),
        _h("QUIT", "", "Close the connection.", "server"),
        _h("TIME", "", "The node's time: unix seconds and microseconds.", "server"),
        _h(
            "INFO",
            "[section]",
            "Information and statistics (server, clients, memory, jobs, queues, ...).",
            "server",
        ),
        _h(
            "HELLO",
            "",
            "Protocol version, this node's ID and the known nodes with their priorities.",
            "server",
        ),
        _h(
            "CONFIG",
            "GET pattern | SET name value | RESETSTAT | REWRITE",
            "Read or change the configuration.",
            "server",
        ),
        _h(
            "DEBUG",
            "FLUSHALL | SLEEP sec | LOADAOF | ERROR msg | RESTART | OOM | ...",
            "Debugging commands.",
            "server",
        ),
        _h("SHUTDOWN", "[REWRITE-AOF]", "Stop the node.", "server"),
        _h("MONITOR", "", "Stream every command the node receives.", "server"),
        _h(
            "CLIENT",
            "LIST | KILL addr | SETNAME name | GETNAME | PAUSE ms",
            "Inspect and manage client connections.",
            "server",
        ),
        _h("SLOWLOG", "GET [n] | LEN | RESET", "The log of slow commands.", "server"),
        _h(
            "LATENCY",
            "LATEST | HISTORY event | RESET [event ...] | DOCTOR",
            "Latency monitoring.",
            "server",
        ),
        _h("COMMAND", "", "Describe every command of the node.", "server"),
        _h("BGREWRITEAOF", "", "Rewrite the append-only file in the background.", "server"),
        # cluster
        _h(
            "CLUSTER",
            "MEET ip port | NODES | MYID | INFO | FORGET id | RESET [SOFT|HARD] | "
            "LEAVING [yes|no] | SAVECONFIG",
            "Cluster membership and state.",
            "cluster",
        ),
    )
}


def command_help(name: str) -> str | None:
    """`help NAME`: syntax, summary and group, laid out like redis-cli's help."""
    entry = COMMANDS.get(name.upper())
    if entry is None:
        return None
    syntax = f"{entry.name} {entry.syntax}".rstrip()
    return f"\n  {syntax}\n  summary: {entry.summary}\n  group: {entry.group}\n"


def group_help(group: str) -> str | None:
    """`help @jobs`: every command of a group."""
    group = group.lower()
    if group not in GROUPS:
        return None
    lines = [""]
    for entry in COMMANDS.values():
        if entry.group == group:
            lines.append(f"  {entry.name} {entry.syntax}".rstrip())
            lines.append(f"  summary: {entry.summary}")
            lines.append("")
    return "\n".join(lines)


def general_help() -> str:
    names = sorted(COMMANDS)
    rows = [", ".join(names[index : index + 8]) for index in range(0, len(names), 8)]
    return (
        "conveyor cli: type a command and its arguments, as with redis-cli.\n"
        'Quote arguments with spaces: ADDJOB q "hello world" 0\n'
        "\n"
        '  "help COMMAND" for help on a command, e.g. help ADDJOB\n'
        '  "help @GROUP" for the commands of a group: ' + ", ".join(f"@{g}" for g in GROUPS) + "\n"
        '  "quit" or "exit" (or Ctrl-D) to leave\n'
        "\n"
        "Commands:\n  " + ",\n  ".join(rows)
    )
