"""The specification's reference command sequences, transcribed literally onto redis-py.

This is the "other implementation" of the interop tests, so it deliberately shares no code
with `conveyor.pressure`. Only the reference pseudo-code's documented typos are fixed (see
docs/pressure.md, "Deviations"):

- T1 stats keys are `:stats:produced_messages` etc. (the code drops `stats:`);
- T2 `RPOP key 0` / `RPOP key other 0` are `RPOP key` (RPOP takes one key, no timeout);
- T3 `BRPOP key` without a timeout is `BRPOP key 0`;
- T4 `LPUSH :not_full` without a value pushes 0;
- T5 a `raise` after a role was taken gives the role back first (the rules demand it for
  errors; the code would strand the token);
- T6 the non-blocking get raises QueueEmpty instead of returning nil (the rules say error).

Everything else, including the unconditional :not_full push after a get, is as written.
"""

from __future__ import annotations

import redis


class SpecError(Exception):
    pass


class QueueAlreadyExistsError(SpecError):
    pass


class QueueDoesNotExistError(SpecError):
    pass


class QueueClosedError(SpecError):
    pass


class QueueInUseError(SpecError):
    pass


class QueueFullError(SpecError):
    pass


class QueueEmptyError(SpecError):
    pass


class SpecClient:
    """One pressure client speaking raw Redis commands; `uid` is its identifying value."""

    def __init__(self, r: redis.Redis, prefix: str, name: str, uid: str) -> None:
        self.r = r
        self.q = f"{prefix}:{name}"
        self.uid = uid

    def k(self, suffix: str) -> str:
        return f"{self.q}:{suffix}"

    def create(self, bound: int) -> None:
        result = self.r.execute_command("SETNX", self.k("bound"), bound)
        if not result:
            raise QueueAlreadyExistsError
        self.r.execute_command("LPUSH", self.k("producer_free"), 1)
        self.r.execute_command("LPUSH", self.k("consumer_free"), 1)
        self.r.execute_command("LPUSH", self.k("not_full"), 1)

    def put(self, data: bytes) -> None:
        if not self.r.execute_command("EXISTS", self.k("bound")):
            raise QueueDoesNotExistError
        self.r.execute_command("BRPOP", self.k("producer_free"), 0)  # T3
        try:  # T5
            self.r.execute_command("SET", self.k("producer"), self.uid)
            if self.r.execute_command("EXISTS", self.k("closed")):
                raise QueueClosedError
            self.r.execute_command("BRPOP", self.k("not_full"), 0)  # T3
            length = self.r.execute_command("LPUSH", self.q, data)
            bound = int(self.r.execute_command("GET", self.k("bound")))
            if bound == 0 or length < bound:
                self.r.execute_command("LPUSH", self.k("not_full"), 0)  # T4
                self.r.execute_command("LTRIM", self.k("not_full"), 0, 0)
            self.r.execute_command("INCR", self.k("stats:produced_messages"))  # T1
            self.r.execute_command("INCRBY", self.k("stats:produced_bytes"), len(data))  # T1
        finally:
            self.r.execute_command("LPUSH", self.k("producer_free"), 0)

    def put_nowait(self, data: bytes) -> None:
        if not self.r.execute_command("EXISTS", self.k("bound")):
            raise QueueDoesNotExistError
        if self.r.execute_command("RPOP", self.k("producer_free")) is None:
            raise QueueInUseError
        try:  # T5
            self.r.execute_command("SET", self.k("producer"), self.uid)
            if self.r.execute_command("EXISTS", self.k("closed")):
                raise QueueClosedError
            if self.r.execute_command("RPOP", self.k("not_full")) is None:
                raise QueueFullError
            length = self.r.execute_command("LPUSH", self.q, data)
            bound = int(self.r.execute_command("GET", self.k("bound")))
            if bound == 0 or length < bound:
                self.r.execute_command("LPUSH", self.k("not_full"), 0)  # T4
                self.r.execute_command("LTRIM", self.k("not_full"), 0, 0)
            self.r.execute_command("INCR", self.k("stats:produced_messages"))  # T1
            self.r.execute_command("INCRBY", self.k("stats:produced_bytes"), len(data))  # T1
        finally:
            self.r.execute_command("LPUSH", self.k("producer_free"), 0)

    def get(self) -> bytes:
        if not self.r.execute_command("EXISTS", self.k("bound")):
            raise QueueDoesNotExistError
        self.r.execute_command("BRPOP", self.k("consumer_free"), 0)
        try:  # T5
            self.r.execute_command("SET", self.k("consumer"), self.uid)
            if self.r.execute_command("EXISTS", self.k("closed")):
                if self.r.execute_command("LLEN", self.q) == 0:
                    raise QueueClosedError
                res = self.r.execute_command("BRPOP", self.q, 0)
            else:
                res = self.r.execute_command("BRPOP", self.q, self.k("closed"), 0)
                if res[0] == self.k("closed").encode():
                    raise QueueClosedError
            self.r.execute_command("LPUSH", self.k("not_full"), 0)
            self.r.execute_command("LTRIM", self.k("not_full"), 0, 0)
            self.r.execute_command("INCR", self.k("stats:consumed_messages"))  # T1
            self.r.execute_command("INCRBY", self.k("stats:consumed_bytes"), len(res[1]))  # T1
            return bytes(res[1])
        finally:
            self.r.execute_command("LPUSH", self.k("consumer_free"), 0)

    def get_nowait(self) -> bytes:
        if not self.r.execute_command("EXISTS", self.k("bound")):
            raise QueueDoesNotExistError
        if self.r.execute_command("RPOP", self.k("consumer_free")) is None:  # T2
            raise QueueInUseError
        try:  # T5
            self.r.execute_command("SET", self.k("consumer"), self.uid)
            if self.r.execute_command("EXISTS", self.k("closed")):
                if self.r.execute_command("LLEN", self.q) == 0:
                    raise QueueClosedError
                res = self.r.execute_command("RPOP", self.q)  # T2
            else:
                res = self.r.execute_command("RPOP", self.q)  # T2
            self.r.execute_command("LPUSH", self.k("not_full"), 0)
            self.r.execute_command("LTRIM", self.k("not_full"), 0, 0)
            if res is None:
                raise QueueEmptyError  # T6
            self.r.execute_command("INCR", self.k("stats:consumed_messages"))  # T1
            self.r.execute_command("INCRBY", self.k("stats:consumed_bytes"), len(res))  # T1
            return bytes(res)
        finally:
            self.r.execute_command("LPUSH", self.k("consumer_free"), 0)

    def close(self) -> None:
        if not self.r.execute_command("EXISTS", self.k("bound")):
            raise QueueDoesNotExistError
        self.r.execute_command("BRPOP", self.k("producer_free"), 0)  # T3
        try:  # T5
            self.r.execute_command("SET", self.k("producer"), self.uid)
            if self.r.execute_command("EXISTS", self.k("closed")):
                raise QueueClosedError
            self.r.execute_command("LPUSH", self.k("closed"), 0, 0)
        finally:
            self.r.execute_command("LPUSH", self.k("producer_free"), 0)

    def delete(self) -> None:
        if not self.r.execute_command("EXISTS", self.k("bound")):
            raise QueueDoesNotExistError
        self.r.execute_command("DEL", self.k("bound"))
        self.r.execute_command("LPUSH", self.k("not_full"), 0)
        self.r.execute_command("LPUSH", self.k("closed"), 0, 0)
        self.r.execute_command("BRPOP", self.k("producer_free"), 0)
        self.r.execute_command("DEL", self.k("producer"))
        self.r.execute_command("DEL", self.k("producer_free"))
        self.r.execute_command("BRPOP", self.k("consumer_free"), 0)
        self.r.execute_command("DEL", self.k("consumer"))
        self.r.execute_command("DEL", self.k("consumer_free"))
        self.r.execute_command("DEL", self.k("not_full"))
        self.r.execute_command("DEL", self.k("closed"))
        self.r.execute_command("DEL", self.k("stats:produced_messages"))
        self.r.execute_command("DEL", self.k("stats:produced_bytes"))
        self.r.execute_command("DEL", self.k("stats:consumed_messages"))
        self.r.execute_command("DEL", self.k("stats:consumed_bytes"))
        self.r.execute_command("DEL", self.q)
