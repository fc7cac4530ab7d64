"""The blocking client's connections: discovery, failover, routing to a job's node and
the exchange of one call or one ADDJOB batch (the machinery under `Client`, whose module
says how discovery and failover behave). Public methods belong in `conveyor.client.sync`.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable
from typing import TypeVar

import redis
from redis.backoff import NoBackoff
from redis.connection import Connection
from redis.retry import Retry

from conveyor.client import _batch, _routing
from conveyor.client import _commands as cmd
from conveyor.client._address import Address, format_address
from conveyor.client._base import BaseClient, check_redis_options
from conveyor.client._commands import Call, JobRef
from conveyor.client.errors import (
    ConnectionError,
    ConveyorError,
    ReplyError,
    TooManyConnectionsError,
    error_from_redis,
    reply_error_from_redis,
)
from conveyor.client.job import Hello

T = TypeVar("T")
A = TypeVar("A")  # what an exchange sends: a call, or a batch


class SyncTransport(BaseClient):
    """Connections of one `Client`: the current node, the peers acked directly, and the calls."""

    def _init_io(self) -> None:
        check_redis_options(redis.Redis, self._redis_options)
        self._redis: redis.Redis | None = None
        self._lock = threading.RLock()
        # Other nodes spoken to directly: the makers of jobs being acked (_routing.py).
        self._peers: dict[Address, redis.Redis] = {}
        # Clients given up while other threads may still have commands in flight on them:
        # each connection is closed as it comes back (see `_retire`).
        self._retired: weakref.WeakSet[redis.Redis] = weakref.WeakSet()

    def _new_redis(self, address: Address) -> redis.Redis:
        kwargs = self._redis_kwargs(address)
        kwargs.setdefault("retry", Retry(NoBackoff(), 0))
        return redis.Redis(**kwargs)

    def _connection(self) -> redis.Redis:
        current = self._redis
        if current is not None:
            return current
        with self._lock:
            if self._closed:
                raise ConveyorError("the client is closed")
            if self._redis is None:
                self._redis = self._discover()
            return self._redis

    def _discover(self) -> redis.Redis:
        """A connection to the first candidate that answers HELLO (or to a better node it
        names). A node answering with an error (-LOADING, a refused password) is passed
        over like an unreachable one; if no node will do, the last such error is raised."""
        failures: list[ConnectionError] = []
        refused: ReplyError | None = None
        for address in self._candidates():
            try:
                client, reply = self._hello_on(address)
            except ConnectionError as exc:
                failures.append(exc)
                continue
            except ReplyError as exc:
                refused = exc
                continue
            client, reply, address = self._better(client, reply, address)
            self._address, self._prefer = address, None
            self._set_hello(reply)
            return client
        if refused is not None:
            raise refused
        raise self._unreachable(failures)

    def _better(
        self, client: redis.Redis, reply: Hello, address: Address
    ) -> tuple[redis.Redis, Hello, Address]:
        """The node HELLO ranks better than `address`, if it answers; else `address`."""
        better = _routing.better_node(reply, address)
        if better is None:
            return client, reply, address
        try:
            moved, moved_reply = self._hello_on(better)
        except (ConnectionError, ReplyError):
            return client, reply, address  # the one that answered will do
        except BaseException:  # interrupted, cancelled: nobody will close it otherwise
            client.close()
            raise
        client.close()  # nobody else has it yet
        return moved, moved_reply, better

    def _move(self, to: Address | None) -> None:
        """Leave the current node: for `to`, or (None) for any other, this one last."""
        with self._lock:
            client, self._redis = self._redis, None
            if to is None and self._address is not None:
                self._avoid.add(self._address)
            self._prefer = to
        if client is not None:
            self._retire(client)

    def _run_routed(self, call: Call[T], refs: Iterable[JobRef]) -> T:
        """A command about jobs, sent to the node that made them when HELLO listed it
        (safe to send again where the client is if that node cannot be reached)."""
        target = self._route(refs)
        if target is None:
            return self._run(call)
        with self._lock:
            if self._closed:  # else a peer connection would be opened that nobody closes
                raise ConveyorError("the client is closed")
            peer = self._peers.get(target)
            if peer is None:
                peer = self._peers[target] = self._new_redis(target)
        try:
            reply = self._exchange(peer, call, target)
        except TooManyConnectionsError:
            raise  # the peer did not fail: its pool is full
        except ConnectionError:
            with self._lock:
                if self._peers.get(target) is peer:
                    del self._peers[target]
                refresh = self._peer_failed(target)
            self._retire(peer)
            reply = self._run(call)
            if refresh:
                self._refresh_hello()
            return reply
        self._peer_health.answered(target)
        return reply

    def _ask_hello(self) -> Hello:
        """HELLO on the current node; what it says replaces the nodes known."""
        client = self._connection()
        address = self._address or self._configured[0]
        try:
            hello = self._exchange(client, cmd.hello(address[0]), address)
        except TooManyConnectionsError:
            raise
        except ConnectionError:
            self._drop(client)
            raise
        self._set_hello(hello)
        return hello

    def _set_hello(self, hello: Hello) -> None:
        """`hello` becomes the nodes known. Peer connections to nodes it no longer lists
        are let go: nothing routes to them any more, and kept they would add up with
        every node that ever left the cluster."""
        with self._lock:
            listed = self._learn_nodes(hello)
            gone = [self._peers.pop(peer) for peer in list(self._peers) if peer not in listed]
        for client in gone:
            self._retire(client)  # an ack in flight on it still gets its reply

    def _refresh_hello(self) -> None:
        # The command itself got its reply: a failure here is for the next one to meet.
        try:
            self._ask_hello()
        except ConveyorError:
            pass

    def _hello_on(self, address: Address) -> tuple[redis.Redis, Hello]:
        """A redis-py client on `address` and the node's HELLO; in RESP2 if the node
        refuses redis-py's RESP3 handshake (a Disque server)."""
        while True:
            client = self._new_redis(address)
            try:
                return client, self._exchange(client, cmd.hello(address[0]), address)
            except ReplyError as exc:
                client.close()
                if not self._resp3_refused(address, exc):
                    raise
            except BaseException:
                client.close()
                raise

    def _drop(self, client: redis.Redis) -> None:
        with self._lock:
            if self._redis is client:
                self._redis = None
        self._retire(client)

    def _retire(self, client: redis.Redis) -> None:
        """Stop using `client` without cutting other threads' commands in flight on it
        (its pool is shared): its idle connections close now, the busy ones as their
        command ends (`_pooled`). The failed connection itself is already closed."""
        self._retired.add(client)
        client.connection_pool.disconnect(inuse_connections=False)

    def _exchange(self, client: redis.Redis, call: Call[T], address: Address) -> T:
        """Send one command on a pooled connection and parse its reply."""
        return call.parse(self._pooled(client, address, self._send_call, call))

    def _send_call(self, connection: Connection, call: Call[T]) -> object:
        connection.send_command(*call.args)
        if call.wait_s is None:
            return connection.read_response()
        return connection.read_response(timeout=self._read_timeout(call.wait_s))

    def _pooled(
        self, client: redis.Redis, address: Address, talk: Callable[[Connection, A], T], what: A
    ) -> T:
        """`talk(connection, what)` on a connection of `client`'s pool, given back after;
        redis-py's errors come out as Conveyor's, naming `address`."""
        pool = client.connection_pool
        try:
            connection = pool.get_connection()
            try:
                return talk(connection, what)
            except (redis.ConnectionError, redis.TimeoutError):
                connection.disconnect()  # this one only: the pool's others may be busy
                raise
            finally:
                pool.release(connection)
                if client in self._retired:
                    # Released after `_retire` closed the idle ones (the order of these two
                    # steps makes one of them catch it).
                    pool.disconnect(inuse_connections=False)
        except redis.RedisError as exc:
            raise error_from_redis(exc, format_address(address)) from exc

    def _run(self, call: Call[T]) -> T:
        return self._on_current(self._exchange, call)

    def _on_current(self, exchange: Callable[[redis.Redis, A, Address], T], what: A) -> T:
        """`exchange` on the current node's connection. A connection lost is dropped, so
        the next command connects again (a node of the list, or a discovered one)."""
        client = self._connection()
        address = self._address or self._configured[0]
        try:
            return exchange(client, what, address)
        except TooManyConnectionsError:
            raise  # the node did not fail: dropped, its busy pool would be replaced, uncapped
        except ConnectionError:
            self._drop(client)
            raise

    def _run_write(self, call: Call[T]) -> T:
        write = _routing.Write(call)
        try:
            return self._on_current(self._exchange_write, write)
        except TooManyConnectionsError:
            raise  # nothing was sent
        except ConnectionError as exc:
            raise _routing.write_failed(exc, write) from exc

    def _exchange_write(self, client: redis.Redis, write: _routing.Write[T], address: Address) -> T:
        return write.call.parse(self._pooled(client, address, self._send_write, write))

    def _send_write(self, connection: Connection, write: _routing.Write[T]) -> object:
        # Connected (the pool connects before handing a connection out): from here on
        # the node may get the command, whole or in part.
        write.sent = True
        return self._send_call(connection, write.call)

    def _exchange_batch(
        self, client: redis.Redis, batch: _batch.AddJobsBatch, address: Address
    ) -> list[str | ReplyError]:
        return self._pooled(client, address, self._send_batch, batch)

    def _send_batch(
        self, connection: Connection, batch: _batch.AddJobsBatch
    ) -> list[str | ReplyError]:
        """Send the batch chunk by chunk, each chunk in one write, and read every reply.
        An error reply is kept in its place and the reading goes on, so the connection
        stays in step with the node."""
        timeout = None if batch.wait_s is None else self._read_timeout(batch.wait_s)
        results: list[str | ReplyError] = []
        append = results.append
        try:
            read = connection.read_response
            for count, packed in batch.chunks():
                connection.send_packed_command([packed])
                for _ in range(count):
                    try:
                        reply = read() if batch.wait_s is None else read(timeout=timeout)
                    except redis.ResponseError as exc:
                        append(reply_error_from_redis(exc))
                    else:
                        append(_batch.reply_id(reply))
        except BaseException:
            # Interrupted between two replies (Ctrl-C): replies are still on their way
            # and would be read by the next command. redis-py closes the connection
            # itself for the failures inside read_response and send_packed_command.
            connection.disconnect()
            raise
        return results

    def _run_batch(self, batch: _batch.AddJobsBatch) -> list[str | ReplyError]:
        return self._on_current(self._exchange_batch, batch)
