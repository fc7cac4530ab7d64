"""Lua scripts of the operations off the put/get fast path: reads and close.

They replace MULTI/EXEC batches with the same commands, for two reasons:

- Redis over `maxmemory` (policy noeviction) refuses every MULTI, even one that only reads,
  so an operator could not even look at a full Redis (`stats`, `length`, `closed`) nor
  close a queue so that its consumers finish. A script is refused only at its first write
  that may grow memory: `read` never writes, and `close` writes first with a no-op PERSIST
  (see `scripts`), so it runs to its end.
- Redis errors inside a batch reached the caller annotated by redis-py, differently by the
  sync and the asyncio client. A script traps them and answers {"ERROR", "CMD key: error"},
  so both clients report the same precise text.

A script runs atomically, so its effects are those of one possible interleaving of the
batches it replaces: other clients cannot tell the difference (see `scripts`).
"""

from __future__ import annotations

from typing import Any

from redis.exceptions import ResponseError

from conveyor.pressure.errors import QueueClosed
from conveyor.pressure.keys import QueueKeys
from conveyor.pressure.scripts import CLOSED, ERROR, PRELUDE, check, encoded
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

# KEYS: :bound :closed :producer_free :producer.  ARGV: stage ("take" or "held"), uid.
_CLOSE = """
local stage, uid = ARGV[1], ARGV[2]
local held = stage ~= 'take'   -- we hold the producer token

local function close()
  -- Written first, so that Redis over maxmemory runs the whole script (see `writing`): a
  -- close adds two small markers, and is what lets consumers finish a queue at the limit.
  writing(KEYS[3])
  if stage == 'take' then
    -- [GET :bound, EXISTS :closed, RPOP :producer_free]
    local bound = call('GET', KEYS[1])
    local closed = call('EXISTS', KEYS[2])
    held = call('RPOP', KEYS[3]) ~= false  -- as the batch did; given back below
    if not bound then return {'MISSING'} end
    if closed == 1 then return {'CLOSED'} end
    if not held then return {'BUSY'} end
  end
  -- [SET :producer uid, GET :bound, LLEN :closed]
  call('SET', KEYS[4], uid)
  if not call('GET', KEYS[1]) then return {'MISSING'} end
  if call('LLEN', KEYS[2]) > 0 then return {'CLOSED'} end
  -- {LPUSH :closed 0 0, token :producer_free}
  call('LPUSH', KEYS[2], 0, 0)
  return {'OK'}
end

local ok, reply = pcall(close)
if not ok then reply = {'ERROR', message(reply)} end
if held then token(KEYS[3]) end
if failed and reply[1] ~= 'ERROR' then reply = {'ERROR', failed} end
return reply
"""

READ = LuaScript("pressure-read", _CALL + _READ)
CLOSE = LuaScript("pressure-close", PRELUDE + _CALL + _CLOSE)


def read(*reads: Read) -> Step[list[Any]]:
    """The replies to `reads`, read atomically; a Redis error names the command and key."""
    for command, _ in reads:
        assert command in _READS, f"{command} is not a read"
    (reply,) = yield Eval(
        READ, encoded(*(key for _, key in reads)), tuple(command for command, _ in reads)
    )
    raise_error(reply)
    return list(reply[1:])


def close_call(keys: QueueKeys, stage: str, uid: str) -> Eval:
    return Eval(
        CLOSE, encoded(keys.bound, keys.closed, keys.producer_free, keys.producer), (stage, uid)
    )


def check_close(keys: QueueKeys, reply: list[Any]) -> None:
    """Raise the error a close script's reply stands for (OK and BUSY pass)."""
    if reply[0] == CLOSED:  # the rules: closing a closed queue "is an error"
        raise QueueClosed(f"queue {keys.name!r} is already closed")
    check(keys, reply)


def raise_error(reply: list[Any]) -> None:
    """Raise the Redis error an {"ERROR", message} reply carries (the driver names the server)."""
    if reply[0] == ERROR:
        raise ResponseError(to_text(reply[1]))
