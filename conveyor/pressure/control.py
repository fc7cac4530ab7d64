"""Lua scripts of the operations off the put/get fast path: reads.

They replace MULTI/EXEC batches with the same commands, for two reasons:

- Redis over `maxmemory` (policy noeviction) refuses every MULTI, even one that only reads,
  so an operator could not even look at a full Redis (`stats`, `length`, `closed`). A
  script is refused only at its first write that may grow memory: `read` never writes.
- Redis errors inside a batch reached the caller annotated by redis-py, differently by the
  sync and the asyncio client. A script traps them and answers {"ERROR", "CMD key: error"},
  so both clients report the same precise text.

A script runs atomically, so its effects are those of one possible interleaving of the
batches it replaces: other clients cannot tell the difference (see `scripts`).
"""

from __future__ import annotations

from typing import Any

from redis.exceptions import ResponseError

from conveyor.pressure.scripts import ERROR, encoded
from conveyor.pressure.steps import Eval, LuaScript, Step, to_text

# What `read` may send: nothing that writes, so it runs over maxmemory and on replicas.
Read = tuple[str, str]  # (GET | LLEN | EXISTS, key)
_READS = ("GET", "LLEN", "EXISTS")

_CALL = """
-- redis.call that names the failing command and key, as an error inside a MULTI did.
local function call(command, key, ...)
  local reply = redis.pcall(command, key, ...)
  if type(reply) == 'table' and reply.err then
    error({err = command .. ' ' .. key .. ': ' .. reply.err})
  end
  return reply
end
"""

# KEYS: the keys to read.  ARGV: the read for each (GET, LLEN or EXISTS).
_READ = """
local replies = {'OK'}
for i, key in ipairs(KEYS) do
  local command = ARGV[i]
  if command ~= 'GET' and command ~= 'LLEN' and command ~= 'EXISTS' then
    return {'ERROR', 'not a read: ' .. command}
  end
  local ok, reply = pcall(call, command, key)
  if not ok then return {'ERROR', reply.err or tostring(reply)} end
  replies[i + 1] = reply  -- false (a missing string) becomes a nil reply
end
return replies
"""

READ = LuaScript("pressure-read", _CALL + _READ)


def read(*reads: Read) -> Step[list[Any]]:
    """The replies to `reads`, read atomically; a Redis error names the command and key."""
    for command, _ in reads:
        assert command in _READS, f"{command} is not a read"
    (reply,) = yield Eval(
        READ, encoded(*(key for _, key in reads)), tuple(command for command, _ in reads)
    )
    raise_error(reply)
    return list(reply[1:])


def raise_error(reply: list[Any]) -> None:
    """Raise the Redis error an {"ERROR", message} reply carries (the driver names the server)."""
    if reply[0] == ERROR:
        raise ResponseError(to_text(reply[1]))
