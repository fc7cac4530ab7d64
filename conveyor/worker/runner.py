"""Runs one RQ-style queue: `num_workers` slots, each taking a message from the node and
running the queue script for it, then settling the job (ACK, NACK DELAY, or err).

Owns: the slots' loop, one message's path (envelope, blocking/coalesce locks, relay keys,
attachments, the script's environment, its status lines) and its settling into a state
directory. Not here: the process and its pipes (script), the batched ACKJOBs (acker), the
state directories on disk (queuedir)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

from conveyor.client import Client, ConveyorError, Job
from conveyor.worker import attachments, claims
from conveyor.worker.acker import Acker
from conveyor.worker.envelope import Envelope, EnvelopeError, bad_body_doc
from conveyor.worker.queuedir import MessageStore, QueueConfig
from conveyor.worker.registry import Latency
from conveyor.worker.relay import RelayError, dup_message
from conveyor.worker.script import (
    ScriptHooks,
    ScriptResult,
    build_command,
    kill_stale,
    run_script,
    signal_group,
)
from conveyor.worker.webhooks import WebhookSender

log = logging.getLogger("conveyor.worker")
_VERSION = version("conveyor")
_BLOCKED_PAUSE_S = 0.25  # a slot whose message is blocked waits this long before the next
_FETCH_RETRY_S = 10  # a message whose attachment could not be fetched runs again after this


@dataclass
class Running:
    """One message being run: its job, envelope, directory and coalesced duplicates."""

    job: Job
    envelope: Envelope
    path: Path
    dups: list[Job] = field(default_factory=list)
    last_beat: float = 0.0
    pid: int | None = None  # the script's process (and process-group) id
    since: float = field(default_factory=time.time)


class QueueRunner:
    def __init__(
        self, config: QueueConfig, client: Client, stop: threading.Event,
        webhooks: WebhookSender | None = None, latency: Latency | None = None,
    ) -> None:  # fmt: skip
        self.config = config
        self.client = client
        self.stop = stop
        self.quiet = threading.Event()  # set: take no new messages, finish the running ones
        # set: the worker's grace period is over; runs still going are ended and put back
        self.interrupted = threading.Event()
        self.webhooks = webhooks
        self.latency = latency or Latency()
        self.active: dict[str, Running] = {}  # job id -> what runs now (the workers page)
        self.outcomes: dict[str, int] = {}  # settled messages by state, since the start
        self._outcomes_lock = threading.Lock()  # slots settle at once; no count may be lost
        self.store = MessageStore(config.directory)
        self.owner = f"{os.uname().nodename}:{os.getpid()}"
        self._threads: list[threading.Thread] = []
        # The environment every run starts from, built once: RQ_* names are the worker's.
        self._base_env = {k: v for k, v in os.environ.items() if not k.startswith("RQ_")}
        self._base_env.update({k: v for k, v in config.env_vars.items() if not k.startswith("RQ_")})
        # Settled messages are acknowledged by one thread, many per ACKJOB (acker).
        self._acker = Acker(client, config.name)

    # -- slots -----------------------------------------------------------------------------
    def start(self) -> None:
        self._acker.start()
        for slot in range(self.config.num_workers):
            thread = threading.Thread(
                target=self._slot_loop, name=f"{self.config.name}-{slot}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def join(self, timeout: float) -> None:
        """Wait for the slots to end (the worker stops), at most `timeout` seconds."""
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def interrupt(self) -> list[int]:
        """The grace period is over: TERM the process group of every run still going (its
        slot puts the message back in the queue); the groups, for a KILL later."""
        self.interrupted.set()
        groups = [r.pid for r in list(self.active.values()) if r.pid is not None]
        for pgid in groups:
            signal_group(pgid, signal.SIGTERM)
        return groups

    def close(self, timeout: float) -> None:
        """The acker sends what it holds, then ends."""
        self._acker.close(timeout)

    def _slot_loop(self) -> None:
        while not self.stop.is_set():
            if self.quiet.is_set():
                self.stop.wait(0.5)
                continue
            try:
                jobs = self.client.get_jobs(
                    self.config.name, count=1, timeout_ms=500, with_counters=True
                )
            except ConveyorError as exc:
                log.warning("%s: GETJOB failed: %s", self.config.name, exc)
                self.stop.wait(1.0)
                continue
            if jobs and (self.quiet.is_set() or self.stop.is_set()):
                # Fetched by a GETJOB that was already waiting when the worker was asked to
                # go quiet or stop: back in the queue now, for another worker.
                with contextlib.suppress(ConveyorError):
                    self.client.enqueue(*(job.id for job in jobs))
                continue
            for job in jobs:
                try:
                    if not self.process(job):
                        self.stop.wait(_BLOCKED_PAUSE_S)
                except ConveyorError as exc:
                    # The job stays active on the node and comes back after its RETRY.
                    log.warning("%s: %s: node error: %s", self.config.name, job.id, exc)
                except Exception:  # a full disk, a vanished directory: keep the slot alive
                    log.exception(
                        "%s: %s: failed; it returns after RETRY", self.config.name, job.id
                    )
                    self.stop.wait(1.0)

    # -- one message -----------------------------------------------------------------------
    def process(self, job: Job) -> bool:
        """Run `job`'s message; False when it was put back because its params are busy."""
        try:
            envelope = Envelope.from_json(job.body)
        except EnvelopeError as exc:
            path = self.store.enter_run(job.id, bad_body_doc(job.id, job.body))
            self.store.move(path, "err", f"not a message envelope: {exc}")
            self.client.ack(job.id)
            return True
        if envelope.due_at is not None and not job.nacks and not job.additional_deliveries:
            # Add-to-deliver latency, of first deliveries only: from when the message was
            # due (added, plus its delay) to now.
            self.latency.observe(time.time() - envelope.due_at)
        lock = self._lock(envelope)
        if lock == "":
            self.client.enqueue(job.id)
            return False
        try:
            self._process_locked(job, envelope)
        finally:
            self.active.pop(job.id, None)
            if lock:
                claims.release(self.client, lock)
        return True

    def _lock(self, envelope: Envelope) -> str | None:
        """The lock marker for blocking (and coalesce) params; None if none needed, "" if
        another run holds it. Leased for the timeout so a dead holder cannot block forever."""
        numbers = self.config.blocking_params or self.config.coalesce_params
        if not numbers:
            return None
        key = [self.config.name, *(envelope.param(n) for n in numbers)]
        queue = claims.claim_queue("lock", *key)
        ttl = int(self.config.timeout) + 30
        return claims.try_claim(self.client, queue, self.owner, ttl) or ""

    def _process_locked(self, job: Job, envelope: Envelope) -> None:
        meta = {"id": job.id, "queue": self.config.name, "envelope": _envelope_doc(envelope)}
        # Back after a NACK, or an ENQUEUE by a stopping worker: it may be waiting in que/.
        resent = bool(job.nacks or job.additional_deliveries)
        path = self.store.enter_run(job.id, meta, resent=resent)
        running = Running(job, envelope, path)
        self.active[job.id] = running
        if envelope.idempotency_key and not self.first_delivery(envelope, job.id):
            self.store.move(path, "done", f"duplicate relay of {envelope.origin}; not run")
            self.client.ack(job.id)
            return
        try:
            attachments.write_all(envelope.attachments, path / "attach")
        except EnvelopeError as exc:
            self._settle(running, ScriptResult("err", str(exc)))
            return
        except attachments.FetchError as exc:
            text = f"{exc}; fetched again in {_FETCH_RETRY_S}s"
            self._settle(running, ScriptResult("resend", text, None, _FETCH_RETRY_S))
            return
        running.dups = self._coalesce(envelope)
        kill_stale(self.store.stale_pid(path))
        result = self._run(running)
        if result.state == "err" and self.interrupted.is_set():
            self._put_back_interrupted(running)
            return
        self._settle(running, result)

    def _put_back_interrupted(self, running: Running) -> None:
        """A run ended by the worker's stop is no failure of the message: back in the queue
        (ENQUEUE, no retry spent), to run again at once, here or on another worker."""
        self.store.move(running.path, "que", "put back: the worker stopped before the script ended")
        self.client.enqueue(running.job.id, *(d.id for d in running.dups))
        log.info("%s %s -> put back: the worker stopped", self.config.name, running.job.id)

    def first_delivery(self, envelope: Envelope, job_id: str) -> bool:
        """Whether this job is the first (or only) one carrying its relay key: it claims the
        key in its own name, so a re-delivery of the same job (a resend, a dead worker) is
        still the first."""
        queue = claims.claim_queue("idem", envelope.idempotency_key)
        if claims.try_claim(self.client, queue, job_id, 7 * 86400) is not None:
            return True
        return claims.claim_holder(self.client, queue) == job_id

    def _coalesce(self, envelope: Envelope) -> list[Job]:
        """Queued messages with the same coalesce params, taken out to ride on this run."""
        numbers = self.config.coalesce_params
        if not numbers:
            return []
        key = [envelope.param(n) for n in numbers]
        taken = []
        for other in self.client.qpeek(self.config.name, 1000):
            try:
                params = Envelope.from_json(other.body)
            except EnvelopeError:
                continue
            # DEQUEUE answers 1 only to the one worker that took the job out of the queue.
            if [params.param(n) for n in numbers] == key and self.client.dequeue(other.id):
                taken.append(other)
        return taken

    def _run(self, running: Running) -> ScriptResult:
        config = self.config
        real_script = os.path.realpath(config.script)
        if not config.exec_prefix.strip() and not os.access(real_script, os.X_OK):
            return ScriptResult("err", f"queue script {real_script} is missing or not executable")
        hooks = ScriptHooks(
            on_run=lambda text: self._on_run(running, text),
            on_dup=lambda text: self._on_dup(running, text),
            heartbeat=lambda: self._heartbeat(running),
            heartbeat_every=max(0.5, config.retry / 3),
        )
        env = self._environment(running, real_script)
        command = build_command(config.exec_prefix, real_script)
        job_dir, log_path = running.path / "job", running.path / "stdio.log"
        return run_script(
            command,
            job_dir,
            log_path,
            env,
            config.timeout,
            hooks,
            lambda pid: self._started(running, pid),
            config.log_limits,
        )

    def _environment(self, running: Running, real_script: str) -> dict[str, str]:
        config, job, envelope = self.config, running.job, running.envelope
        address = self.client.address or "127.0.0.1:7711"
        full_id = f"conveyor://{address}/{config.name}/{job.id}"
        env = dict(self._base_env)
        env.update(
            RQ_VER=_VERSION,
            RQ_SCRIPT=config.script,
            RQ_REALSCRIPT=real_script,
            RQ_HOST=f"conveyor://{address}/",
            RQ_PORT=address.rsplit(":", 1)[-1],
            RQ_DEST=f"conveyor://{address}/{config.name}",
            RQ_DEST_QUEUE=config.name,
            RQ_MSG_ID=job.id,
            RQ_FULL_MSG_ID=full_id,
            RQ_ORIG_MSG_ID=envelope.origin or full_id,
            RQ_MSG_DIR=str(running.path / "job"),
            RQ_COUNT=str(envelope.count + (job.nacks or 0)),
            RQ_FORCE_REMOTE="1" if envelope.force_remote else "",
            RQ_ENV=config.env,
            **{f"RQ_PARAM{n}": envelope.param(n) for n in (1, 2, 3, 4)},
        )
        return env

    # -- status lines ----------------------------------------------------------------------
    def _started(self, running: Running, pid: int) -> None:
        running.pid = pid
        self.store.set_status(running.path, "run", "running", pid=pid)
        if self.interrupted.is_set():  # started as the grace period ran out: not missed
            signal_group(pid, signal.SIGTERM)

    def _on_run(self, running: Running, text: str) -> None:
        # The pid stays in status.json while it runs: a later worker kills a stale run by it.
        self.store.set_status(running.path, "run", text, pid=running.pid)
        # `run` also tells the node the script is alive, at most once a second.
        if time.monotonic() - running.last_beat >= 1.0:
            self._heartbeat(running)

    def _heartbeat(self, running: Running) -> None:
        running.last_beat = time.monotonic()
        for job in [running.job, *running.dups]:
            with contextlib.suppress(ConveyorError):
                self.client.working(job.id)

    def _on_dup(self, running: Running, text: str) -> str:
        try:
            new_id = dup_message(self, running.job, running.envelope, text)
        except RelayError as exc:
            return f"fail {exc}"
        except ConveyorError as exc:
            return f"fail node error: {exc}"
        return f"ok {new_id}" if self.config.dup_reply_id else "ok"

    # -- outcome ---------------------------------------------------------------------------
    def _settle(self, running: Running, result: ScriptResult) -> None:
        job, path, count = (
            running.job,
            running.path,
            running.envelope.count + (running.job.nacks or 0),
        )
        extra = {"exit": result.exit_code}
        if result.state == "resend" and count + 1 >= running.envelope.max_count:
            result = ScriptResult("err", f"hit the max resend count ({running.envelope.max_count})")
        if result.state == "resend":
            self.store.move(
                path, "que", f"resend in {result.resend_delay}s: {result.text}", **extra
            )
            self.client.nack(job.id, delay=result.resend_delay)
            self._put_back(running.dups)
        elif result.state in ("done", "relayed"):
            self.store.move(path, result.state, result.text, **extra)
            for dup in running.dups:
                dup_path = self.store.enter_run(dup.id, {"id": dup.id, "queue": self.config.name})
                self.store.move(dup_path, result.state, f"coalesced into {job.id}")
            self._acker.ack(job.id, *(d.id for d in running.dups))
        else:
            self.store.move(path, "err", result.text, **extra)
            self._acker.ack(job.id)
            self._put_back(running.dups)
        with self._outcomes_lock:
            self.outcomes[result.state] = self.outcomes.get(result.state, 0) + 1
        if result.state != "resend" and running.envelope.webhook:
            self._notify(running, result)
        log.info("%s %s -> %s: %s", self.config.name, job.id, result.state, result.text)

    def _notify(self, running: Running, result: ScriptResult) -> None:
        """The webhook the message asked for: its final state, sent in the background."""
        if self.webhooks is None:
            return
        address = self.client.address or ""
        payload = {
            "id": running.job.id,
            "queue": self.config.name,
            "state": result.state,
            "status": result.text,
            "exit": result.exit_code,
            "params": running.envelope.params,
            "full_id": f"conveyor://{address}/{self.config.name}/{running.job.id}",
            "host": os.uname().nodename,
            "finished": time.time(),
        }
        self.webhooks.submit(running.envelope.webhook, payload, self.store, running.job.id)

    def status(self) -> dict[str, Any]:
        """This queue's part of the worker's record (conveyor.worker.registry)."""
        running = [
            {"id": r.job.id, "since": r.since, "pid": r.pid} for r in list(self.active.values())
        ]
        return {
            "name": self.config.name,
            "directory": str(self.config.directory),
            "slots": self.config.num_workers,
            "busy": len(running),
            "running": running,
            "acks_pending": self._acker.pending(),
            "outcomes": self._outcome_counts(),
        }

    def _outcome_counts(self) -> dict[str, int]:
        with self._outcomes_lock:
            return dict(self.outcomes)

    def _put_back(self, dups: list[Job]) -> None:
        if dups:
            self.client.enqueue(*(d.id for d in dups))


def _envelope_doc(envelope: Envelope) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(envelope.to_json())
    return doc
