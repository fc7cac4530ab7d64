"""INFO: the sections Disque prints, in its `field:value\\r\\n` format."""

from __future__ import annotations

import os
import platform
import resource
import sys
import time
from typing import TYPE_CHECKING

from conveyor import __version__, compiled

if TYPE_CHECKING:
    from conveyor.node.aof import AofDriver
    from conveyor.node.context import NodeContext as Server
    from conveyor.persistence.loader import LoadStats

DEFAULT_SECTIONS = (
    "server", "clients", "memory", "jobs", "queues", "persistence", "eventlog", "stats", "cpu",
)  # fmt: skip
ALL_SECTIONS = (*DEFAULT_SECTIONS, "commandstats")


def _human(size: int) -> str:
    for unit, scale in (("G", 1024**3), ("M", 1024**2), ("K", 1024)):
        if size >= scale:
            return f"{size / scale:.2f}{unit}"
    return f"{size}B"


def _server(server: Server) -> dict[str, object]:
    uptime = (server.now - server.started_ms) // 1000
    return {
        "disque_version": __version__,
        "conveyor_version": __version__,
        "disque_git_sha1": "00000000",
        "disque_git_dirty": 0,
        "disque_build_id": "conveyor",
        "os": f"{platform.system()} {platform.release()} {platform.machine()}",
        "arch_bits": 64 if sys.maxsize > 2**32 else 32,
        "multiplexing_api": "asyncio",
        "python_version": platform.python_version(),
        # The Cython-built modules (conveyor/compiled.py) loaded, of how many: "3/3".
        "compiled_modules": compiled.summary(),
        "gcc_version": "0.0.0",
        "process_id": os.getpid(),
        "run_id": server.run_id,
        "tcp_port": server.config["port"],
        "uptime_in_seconds": uptime,
        "uptime_in_days": uptime // 86400,
        "hz": server.config["hz"],
        "executable": os.path.abspath(sys.argv[0]),
        "config_file": str(server.config.file.resolve()) if server.config.file else "",
        "node_id": server.node_id,
    }


def _clients(server: Server) -> dict[str, object]:
    biggest_in, biggest_out = server.client_buffer_peaks()
    return {
        "connected_clients": len(server.clients),
        "client_longest_output_list": 0,
        "client_biggest_input_buf": biggest_in,
        # Redis 7's names; the largest buffers now (Redis: over the last few seconds).
        "client_recent_max_input_buffer": biggest_in,
        "client_recent_max_output_buffer": biggest_out,
        "blocked_clients": server.core.blocked_clients,
    }


def _memory(server: Server) -> dict[str, object]:
    from conveyor.node.stats import rss_bytes

    used = server.used_memory()
    rss = rss_bytes()
    maxmemory = server.config["maxmemory"]
    return {
        "used_memory": used,
        "used_memory_human": _human(used),
        "used_memory_rss": rss,
        "used_memory_peak": server.peak_memory,
        "used_memory_peak_human": _human(server.peak_memory),
        "used_memory_jobs": server.core.memory_estimate(),
        # Clients' unfinished requests and unsent replies (part of used_memory).
        "used_memory_clients": server.core.client_bytes,
        "mem_clients_normal": server.core.client_bytes,
        "maxmemory": maxmemory,
        "maxmemory_human": _human(maxmemory),
        "maxmemory_policy": server.config["maxmemory-policy"],
        "mem_fragmentation_ratio": f"{rss / used:.2f}" if used else "0.00",
        "mem_allocator": "pymalloc",
    }


def _jobs(server: Server) -> dict[str, object]:
    core = server.core
    return {
        "registered_jobs": len(core.jobs),
        "expired_jobs": core.expired_jobs,
        "evicted_jobs": core.evicted_jobs,
        "dead_lettered_jobs": core.dead_lettered_jobs,
        "delivered_jobs": core.delivered_jobs,
        "acked_jobs": core.acked_jobs,
        "nacked_jobs": core.nacked_jobs,
        "requeued_jobs": core.requeued_jobs,
    }


def _queues(server: Server) -> dict[str, object]:
    return {"registered_queues": len(server.core.queues)}


def _persistence(server: Server) -> dict[str, object]:
    aof = server.aof
    rewrite = aof.rewrite
    fields: dict[str, object] = {
        "loading": int(aof.loading),
        "aof_enabled": int(aof.live is not None or aof.rewrite_becomes_live),
        "aof_state": _aof_state(aof),
        "aof_rewrite_in_progress": int(rewrite is not None),
        "aof_rewrite_scheduled": int(aof.rewrite_scheduled),
        "aof_last_rewrite_time_sec": aof.last_rewrite_time_s,
        "aof_current_rewrite_time_sec": (
            int(time.time()) - aof.rewrite_started_s if rewrite is not None else -1
        ),
        "aof_last_bgrewrite_status": "ok" if aof.last_bgrewrite_ok else "err",
        "aof_last_write_status": "err" if aof.failed else "ok",
    }
    if aof.live is not None:
        fields.update(
            aof_current_size=aof.live.size,
            aof_base_size=aof.base_size,
            aof_pending_rewrite=int(aof.rewrite_scheduled),
            aof_buffer_length=aof.live.pending_bytes,
            aof_rewrite_buffer_length=rewrite.file.pending_bytes if rewrite else 0,
            aof_pending_bio_fsync=int(aof.sync_inflight),
            aof_delayed_fsync=aof.delayed_fsync,
        )
    if aof.loading and aof.load_stats is not None:
        fields.update(_loading(aof.loading_start_s, aof.load_stats))
    return fields


def _aof_state(aof: AofDriver) -> str:
    if aof.live is not None:
        return "on"
    return "wait_rewrite" if aof.rewrite_becomes_live else "off"


def _loading(started_s: int, stats: LoadStats) -> dict[str, object]:
    """Redis' loading_* fields, while the AOF loads at start."""
    elapsed = max(int(time.time()) - started_s, 0)
    remaining = stats.total_bytes - stats.loaded_bytes
    return {
        "loading_start_time": started_s,
        "loading_total_bytes": stats.total_bytes,
        "loading_loaded_bytes": stats.loaded_bytes,
        "loading_loaded_perc": f"{100 * stats.loaded_bytes / max(stats.total_bytes, 1):.2f}",
        "loading_eta_seconds": (
            elapsed * remaining // stats.loaded_bytes if elapsed and stats.loaded_bytes else 1
        ),
    }


def _eventlog(server: Server) -> dict[str, object]:
    event_log = server.event_log
    counters = server.event_log_counters
    return {
        "event_log_enabled": int(event_log is not None),
        # The file this hour's events go to.
        "event_log_file": str(event_log.path_for(server.now)) if event_log else "",
        "event_log_events": counters.events,
        "event_log_bytes": counters.bytes,
        "event_log_dropped": counters.dropped,
        "event_log_buffered": event_log.buffered() if event_log else 0,
    }


def _stats(server: Server) -> dict[str, object]:
    stats = server.stats
    processed = server.commands_processed()
    now = server.now
    elapsed_ms = now - stats.sample_ms
    if stats.sample_ms and elapsed_ms > 0:
        ops = (processed - stats.sample_commands) * 1000 // elapsed_ms
        in_kbps = (stats.net_input_bytes - stats.sample_input) / elapsed_ms / 1.024
        out_kbps = (stats.net_output_bytes - stats.sample_output) / elapsed_ms / 1.024
    else:
        ops, in_kbps, out_kbps = 0, 0.0, 0.0
    # INFO itself samples, so the rates cover the time since the previous INFO.
    stats.sample_ms = now
    stats.sample_commands = processed
    stats.sample_input = stats.net_input_bytes
    stats.sample_output = stats.net_output_bytes
    return {
        "total_connections_received": stats.connections_received,
        "total_commands_processed": processed,
        "instantaneous_ops_per_sec": ops,
        "total_net_input_bytes": stats.net_input_bytes,
        "total_net_output_bytes": stats.net_output_bytes,
        "instantaneous_input_kbps": f"{in_kbps:.2f}",
        "instantaneous_output_kbps": f"{out_kbps:.2f}",
        "rejected_connections": stats.rejected_connections,
        # Clients closed for going over their query / output buffer limit.
        "client_query_buffer_limit_disconnections": (
            stats.client_query_buffer_limit_disconnections
        ),
        "client_output_buffer_limit_disconnections": (
            stats.client_output_buffer_limit_disconnections
        ),
        # Failed AUTH and HELLO ... AUTH attempts (Redis 7's name; docs/security.md).
        "acl_access_denied_auth": stats.acl_access_denied_auth,
        "latest_fork_usec": 0,
    }


def _cpu(server: Server) -> dict[str, object]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "used_cpu_sys": f"{own.ru_stime:.2f}",
        "used_cpu_user": f"{own.ru_utime:.2f}",
        "used_cpu_sys_children": f"{children.ru_stime:.2f}",
        "used_cpu_user_children": f"{children.ru_utime:.2f}",
    }


def _commandstats(server: Server) -> dict[str, object]:
    fields: dict[str, object] = {}
    seen = set()
    for command in server.commands.values():
        if command.name in seen or not command.calls:
            continue
        seen.add(command.name)
        usec = command.nanoseconds // 1000
        fields[f"cmdstat_{command.name.decode()}"] = (
            f"calls={command.calls},usec={usec},usec_per_call={usec / command.calls:.2f}"
        )
    return fields


_SECTIONS = {
    "server": ("Server", _server),
    "clients": ("Clients", _clients),
    "memory": ("Memory", _memory),
    "jobs": ("Jobs", _jobs),
    "queues": ("Queues", _queues),
    "persistence": ("Persistence", _persistence),
    "eventlog": ("Eventlog", _eventlog),
    "stats": ("Stats", _stats),
    "cpu": ("CPU", _cpu),
    "commandstats": ("Commandstats", _commandstats),
}


def render(server: Server, section: str) -> str:
    if section in ("default", ""):
        names: tuple[str, ...] = DEFAULT_SECTIONS
    elif section in ("all", "everything"):
        names = ALL_SECTIONS
    elif section in _SECTIONS:
        names = (section,)
    else:
        return ""
    blocks = []
    for name in names:
        title, build = _SECTIONS[name]
        lines = [f"# {title}"] + [f"{key}:{value}" for key, value in build(server).items()]
        blocks.append("\r\n".join(lines) + "\r\n")
    return "\r\n".join(blocks)
