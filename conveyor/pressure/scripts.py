"""The Lua scripts of the put and get fast paths, and how their replies map to errors.

Each script is the command batches the operation used to send one after the other, with the
client's decisions between them moved into Lua, so a put or a get that needs no waiting is
one round trip (EVALSHA) instead of three. A script runs atomically, so its effects are
those of one possible interleaving of the batches it replaces: the same commands on the same
keys with the same values, in the same order. Clients that follow the specification's
command sequences therefore see nothing new. The only liberties leave the data as it was:
where the old code read `:bound` or `:closed` twice, a script reads it once (nothing can
change it in between inside a script); put's `LLEN` before its push becomes the push's own
reply; a token push skips its `LTRIM` when the `LPUSH` made a one-element list.

Scripts cannot block, so where the old sequence waited (for the role, for room, for an
element), the script stops and answers WAIT or BUSY; the client waits with chunked BRPOPs
(see `steps`) and then runs the same script again from a later `stage`:

- put: "take" (no token held) -> "held" (producer role taken by BRPOP) -> "room" (a
  `:not_full` token taken by BRPOP too);
- get: "take" -> "held" -> "item" (the element was popped by BRPOP).

Failures (a key holding the wrong type): the counter and token commands of the last group
run even when one of them fails, as in EXEC; a failing read or pop before them stops the
script. Either way the tokens the script holds go back, and it answers {"ERROR", message}
instead of raising, so that an error *reply* always means Redis refused to run it (see
`steps.run_script`).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from redis.exceptions import ResponseError

from conveyor.pressure.errors import PressureProtocolError, QueueEmpty, QueueFull
from conveyor.pressure.keys import QueueKeys, key_bytes
from conveyor.pressure.steps import (
    WAIT,
    Arg,
    Batch,
    Eval,
    LuaScript,
    Step,
    closed_error,
    missing,
    to_text,
)

# Stages (where in the old sequence the script starts) and the statuses it answers with.
TAKE, HELD, ROOM, ITEM = "take", "held", "room", "item"
OK, BUSY = b"OK", b"BUSY"
MISSING, CLOSED, FULL, EMPTY = b"MISSING", b"CLOSED", b"FULL", b"EMPTY"
BADINT, ERROR = b"BADINT", b"ERROR"

PRELUDE = """
local failed = nil

-- A command of what used to be one MULTI: it runs even if an earlier one failed, and the
-- first failure is reported at the end, as EXEC would.
local function try(...)
  local reply = redis.pcall(...)
  if type(reply) == 'table' and reply.err and not failed then
    failed = reply.err
  end
  return reply
end

-- Over maxmemory Redis refuses a script's first write if it may grow memory (LPUSH), but
-- lets a script that has written finish. Giving back what we took grows nothing, so it
-- first writes nothing with PERSIST (no key of ours has a TTL): the push then goes through,
-- where a refused one would strand the role or the room until `unlock`.
local function writing(key)
  redis.call('PERSIST', key)
end

-- The protocol's token push (steps.push_token): LPUSH key 0, LTRIM key 0 0. The LTRIM is
-- left out when the LPUSH made a one-element list, where it would remove nothing.
local function token(key)
  writing(key)
  local size = try('LPUSH', key, 0)
  if size ~= 1 then
    try('LTRIM', key, 0, 0)
  end
end

-- Python's int() of a :bound value (digits, a sign, blanks around), or nil.
local function integer(raw)
  local digits = string.match(raw, '^%s*([-+]?%d+)%s*$')
  return digits and tonumber(digits)
end

local function message(err)
  if type(err) == 'table' and err.err then
    return err.err
  end
  return tostring(err)
end
"""

# KEYS: :bound :closed :producer_free :producer :not_full list :stats:produced_messages
#       :stats:produced_bytes.  ARGV: stage, uid, data, block ("1"/"0").
_PUT = """
local stage, uid, data, block = ARGV[1], ARGV[2], ARGV[3], ARGV[4] == '1'
local held = stage ~= 'take'   -- we hold the producer token
local room = stage == 'room'   -- we hold a :not_full token (at the end: push one)
local keep = false             -- answer WAIT: the client keeps the role and waits for room

local function put()
  local bound, closed
  if stage == 'take' then
    -- [GET :bound, EXISTS :closed, RPOP :producer_free]
    bound = redis.call('GET', KEYS[1])
    closed = redis.call('EXISTS', KEYS[2])
    if not bound or closed == 1 then
      held = redis.call('RPOP', KEYS[3]) ~= false  -- as the batch did; given back below
      return {bound and 'CLOSED' or 'MISSING'}
    end
    if redis.call('LLEN', KEYS[3]) == 0 then return {'BUSY'} end
    -- The next batch's SET goes before the RPOP: Redis over maxmemory refuses a script
    -- whose first write may grow memory, so the put is refused before it changed
    -- anything, instead of taking the role and pushing its element past the limit.
    redis.call('SET', KEYS[4], uid)
    held = redis.call('RPOP', KEYS[3]) ~= false
  end
  if stage == 'room' then
    -- [GET :bound, LLEN list], after BRPOP :not_full (the LPUSH below answers the length)
    bound = redis.call('GET', KEYS[1])
    if not bound then return {'MISSING'} end
  else
    -- [SET :producer uid, GET :bound, EXISTS :closed, RPOP :not_full, LLEN list]
    if stage == 'held' then
      redis.call('SET', KEYS[4], uid)
      bound = redis.call('GET', KEYS[1])
      closed = redis.call('EXISTS', KEYS[2])
    end
    room = redis.call('RPOP', KEYS[5]) ~= false
    if not bound then return {'MISSING'} end
    if closed == 1 then return {'CLOSED'} end
    if not room then
      keep = block
      return {block and 'WAIT' or 'FULL'}
    end
  end
  local limit = integer(bound)
  if not limit then return {'BADINT', bound} end
  -- [LPUSH list data, INCR, INCRBY, (token :not_full), token :producer_free]. The old
  -- client compared the bound with LLEN + 1 (LLEN read before the push): in a script that
  -- is exactly the length LPUSH answers.
  -- If the push itself fails (the list holds another type) we stop there, giving back the
  -- room and the role, as the old client did when its LLEN failed before this group.
  local size = redis.call('LPUSH', KEYS[6], data)
  try('INCR', KEYS[7])
  try('INCRBY', KEYS[8], #data)
  room = limit == 0 or size < limit
  return {'OK'}
end

local ok, reply = pcall(put)
if not ok then reply = {'ERROR', message(reply)} end
if not keep then
  if room then token(KEYS[5]) end
  if held then token(KEYS[3]) end
end
if failed and reply[1] ~= 'ERROR' then reply = {'ERROR', failed} end
return reply
"""

# KEYS: :bound :consumer_free :consumer :closed list :not_full :stats:consumed_messages
#       :stats:consumed_bytes.  ARGV: stage, uid, block ("1"/"0"), element length ("item").
_GET = """
local stage, uid, block = ARGV[1], ARGV[2], ARGV[3] == '1'
local held = stage ~= 'take'   -- we hold the consumer token
local keep = false             -- answer WAIT: the client keeps the role and waits

local function get()
  local bound, item, length
  -- Written first, so that Redis over maxmemory runs the whole script (see `writing`): a get
  -- only shrinks the queue, and refusing it after a BRPOP served it would lose the element.
  writing(KEYS[2])
  if stage == 'take' then
    -- [GET :bound, RPOP :consumer_free]
    bound = redis.call('GET', KEYS[1])
    held = redis.call('RPOP', KEYS[2]) ~= false
    if not bound then return {'MISSING'} end
    if not held then return {'BUSY'} end
  end
  if stage == 'item' then
    -- [GET :bound, LLEN list], after BRPOP list (LLEN below, when the bound needs it)
    bound = redis.call('GET', KEYS[1])
    length = tonumber(ARGV[4])
  else
    -- [SET :consumer uid, GET :bound, EXISTS :closed, RPOP list, LLEN list]
    redis.call('SET', KEYS[3], uid)
    if stage == 'held' then
      bound = redis.call('GET', KEYS[1])
    end
    item = redis.call('RPOP', KEYS[5])
    if not bound then return {'MISSING'} end
    if not item then
      -- Read-only reads can move within a script: :closed is what it was before the RPOP.
      if redis.call('EXISTS', KEYS[4]) == 1 then return {'CLOSED'} end
      keep = block
      return {block and 'WAIT' or 'EMPTY'}
    end
    length = #item
  end
  -- [INCR, INCRBY, (token :not_full), token :consumer_free]. :bound is gone only when a
  -- delete started after our pop; it removes :not_full anyway.
  try('INCR', KEYS[7])
  try('INCRBY', KEYS[8], length)
  if bound then
    local limit = integer(bound)
    if not limit then return {'BADINT', bound} end
    if limit == 0 or redis.call('LLEN', KEYS[5]) < limit then token(KEYS[6]) end
  end
  if item then return {'OK', item} end
  return {'OK'}
end

local ok, reply = pcall(get)
if not ok then reply = {'ERROR', message(reply)} end
if held and not keep then token(KEYS[2]) end
if failed and reply[1] ~= 'ERROR' then reply = {'ERROR', failed} end
return reply
"""

# KEYS: the lists to push to.  ARGV: for each key, how ("token", "lpush" or "rpush") and
# the value (unused for a token).
_RELEASE = """
for i, key in ipairs(KEYS) do
  local how, value = ARGV[2 * i - 1], ARGV[2 * i]
  if how == 'token' then
    token(key)
  else
    writing(key)
    try(how == 'rpush' and 'RPUSH' or 'LPUSH', key, value)
  end
end
if failed then return {'ERROR', failed} end
return {'OK'}
"""

PUT = LuaScript("pressure-put", PRELUDE + _PUT)
GET = LuaScript("pressure-get", PRELUDE + _GET)
RELEASE = LuaScript("pressure-release", PRELUDE + _RELEASE)

# What a step gives back: (list, how, value), how being "token" (the token push; value
# unused), "lpush" (a close marker) or "rpush" (an element, back at the end it left by).
GiveBack = tuple[str | bytes, str, Arg]


@lru_cache(maxsize=1024)
def _put_keys(keys: QueueKeys) -> tuple[bytes, ...]:
    # Cached: the fast path is one round trip, so building eight key names per call shows.
    return encoded(
        keys.bound,
        keys.closed,
        keys.producer_free,
        keys.producer,
        keys.not_full,
        keys.queue,
        keys.produced_messages,
        keys.produced_bytes,
    )


@lru_cache(maxsize=1024)
def _get_keys(keys: QueueKeys) -> tuple[bytes, ...]:
    return encoded(
        keys.bound,
        keys.consumer_free,
        keys.consumer,
        keys.closed,
        keys.queue,
        keys.not_full,
        keys.consumed_messages,
        keys.consumed_bytes,
    )


def encoded(*names: str | bytes) -> tuple[bytes, ...]:
    """Key names as the bytes Redis gets (see `keys.key_bytes`)."""
    return tuple(key_bytes(name) if isinstance(name, str) else name for name in names)


def put_call(keys: QueueKeys, stage: str, uid: str, data: bytes, block: bool) -> Eval:
    return Eval(PUT, _put_keys(keys), (stage, uid, data, 1 if block else 0))


def get_call(keys: QueueKeys, stage: str, uid: str, block: bool, length: int = 0) -> Eval:
    return Eval(GET, _get_keys(keys), (stage, uid, 1 if block else 0, length))


def release(*items: GiveBack) -> Step[None]:
    """Push back what a step took, in one script: a MULTI of the same pushes would be refused
    over maxmemory (OOM), stranding the role until `unlock`."""
    if not items:
        return
    (reply,) = yield Eval(
        RELEASE,
        encoded(*(key for key, _, _ in items)),
        tuple(arg for _, how, value in items for arg in (how, value)),
    )
    if reply[0] == ERROR:
        raise ResponseError(to_text(reply[1]))


def give_back(batch: Batch, reply: Any) -> Eval | None:
    """What undoes the pop of a BRPOP served after its caller was cancelled (the asyncio
    driver waits for that reply rather than let it vanish with the connection); None
    when there is nothing to undo. The step is then failed as if the BRPOP had taken
    nothing: it owes back only what it held before."""
    if batch.popped is None or reply is None:
        return None
    key, value = reply
    # RPUSH: BRPOP takes from the right, so the element is the next one taken again.
    how = "token" if batch.popped == "token" else "rpush"
    return Eval(RELEASE, (key,), (how, value))


def check(keys: QueueKeys, reply: list[Any]) -> None:
    """Raise the error a failed script's reply stands for (OK, BUSY and WAIT pass)."""
    status = reply[0]
    if status == MISSING:
        raise missing(keys)
    if status == CLOSED:
        raise closed_error(keys)
    if status == FULL:
        raise QueueFull(f"queue {keys.name!r} is full")
    if status == EMPTY:
        raise QueueEmpty(f"queue {keys.name!r} is empty")
    if status == BADINT:
        raise PressureProtocolError(f"key {keys.bound!r} holds {reply[1]!r}, not an integer")
    if status == ERROR:
        # A Redis error inside the script; the driver turns it into PressureProtocolError
        # naming the server, like an error reply to a MULTI/EXEC.
        message = reply[1].decode("utf-8", "replace") if isinstance(reply[1], bytes) else reply[1]
        raise ResponseError(message)
    if status not in (OK, BUSY, WAIT):
        raise PressureProtocolError(f"unexpected reply {reply!r} from script")
