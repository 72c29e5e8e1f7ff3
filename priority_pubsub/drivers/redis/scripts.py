"""The Lua scripts of the Redis Streams driver: each settle or claim is one atomic step.

Why scripts: a settle must check that the pending entry is still ours (same consumer, same
delivery count) and change it in the same step, or another replica's reclaim could slip in
between. Why these shapes (see ``driver`` for the whole design):

* every message being worked on is a pending entry of the consumer group (the PEL): its idle
  time is the lease, its delivery count the attempt;
* a returned message (retry with a delay, or a release) stays in the PEL, handed to the
  reserved *parked* consumer, with its due time in a sorted set; whichever replica claims
  next moves due entries back to itself (``XCLAIM`` counts that delivery);
* a lapsed lease (a crashed replica) is any non-parked pending entry idle for at least the
  lease: claimed with ``XCLAIM`` min-idle, so two replicas never both take it.

Replies are RESP2 arrays; Lua numbers are integers, so times travel as milliseconds.
"""

from __future__ import annotations

_PRELUDE = """
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- 1: the entry is pending for `me` with `count` deliveries; 0: not pending any more
-- (settled already); -1: someone else holds it now (its lease lapsed and was reclaimed).
local function owned(stream, group, id, me, count)
  local p = redis.call('XPENDING', stream, group, id, id, 1)
  if not p[1] then return 0 end
  if p[1][2] ~= me or tonumber(p[1][4]) ~= tonumber(count) then return -1 end
  return 1
end

local function as_map(flat)
  local map = {}
  for i = 1, #flat, 2 do map[flat[i]] = flat[i + 1] end
  return map
end

-- whether entry `id` comes after `last` (a group's last-delivered id): not taken by it yet
local function after(id, last)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  local last_ms, last_seq = string.match(last, '^(%d+)-(%d+)$')
  ms, seq, last_ms, last_seq = tonumber(ms), tonumber(seq), tonumber(last_ms), tonumber(last_seq)
  return ms > last_ms or (ms == last_ms and seq > last_seq)
end
"""

CLAIM = _PRELUDE + """
-- KEYS: stream, parked-set. ARGV: group, me, parked, lease_ms, want.
-- Reply: {entries {id, fields, deliveries}..., last-delivered-id, next-due-ms|-1, gone-ids}.
local stream, parked_set = KEYS[1], KEYS[2]
local group, me, parked = ARGV[1], ARGV[2], ARGV[3]
local lease_ms, want = tonumber(ARGV[4]), tonumber(ARGV[5])
local now = now_ms()
local out, gone = {}, {}

local function take(id, min_idle, deliveries)
  local claimed = redis.call('XCLAIM', stream, group, me, min_idle, id)
  local entry = claimed[1]
  if entry then
    out[#out + 1] = {entry[1], entry[2], tonumber(deliveries) + 1}
  elseif #claimed == 0 or entry == false then
    -- the entry was deleted from the stream (trimmed): nothing left to deliver
    redis.call('XACK', stream, group, id)
    gone[#gone + 1] = id
  end
end

-- 1. returned messages whose delay is over
for _, id in ipairs(redis.call('ZRANGEBYSCORE', parked_set, '-inf', now, 'LIMIT', 0, want)) do
  redis.call('ZREM', parked_set, id)
  local p = redis.call('XPENDING', stream, group, id, id, 1)
  if p[1] and p[1][2] == parked then take(id, 0, p[1][4]) end
end

-- 2. lapsed leases of any consumer but the parked one (a replica that died)
if #out < want then
  for _, flat in ipairs(redis.call('XINFO', 'CONSUMERS', stream, group)) do
    local c = as_map(flat)
    if c['name'] ~= parked and tonumber(c['pending']) > 0 and #out < want then
      local p = redis.call('XPENDING', stream, group, 'IDLE', lease_ms, '-', '+',
                           want - #out, c['name'])
      for _, e in ipairs(p) do take(e[1], lease_ms, e[4]) end
    end
  end
end

-- 3. new entries
if #out < want then
  local r = redis.call('XREADGROUP', 'GROUP', group, me, 'COUNT', want - #out,
                       'STREAMS', stream, '>')
  if r then
    for _, entry in ipairs(r[1][2]) do out[#out + 1] = {entry[1], entry[2], 1} end
  end
end

-- 4. when nothing was found: where a blocking wait starts, and when the next delay ends
local last, next_due = '0-0', -1
if #out == 0 then
  for _, flat in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
    local g = as_map(flat)
    if g['name'] == group then last = g['last-delivered-id'] end
  end
  local first = redis.call('ZRANGE', parked_set, 0, 0, 'WITHSCORES')
  if first[2] then next_due = math.floor(tonumber(first[2])) end
end
return {out, last, next_due, gone}
"""

ACK = _PRELUDE + """
-- KEYS: stream. ARGV: group, me, id, deliveries, delete(0|1). Reply: owned() result.
local state = owned(KEYS[1], ARGV[1], ARGV[3], ARGV[2], ARGV[4])
if state == 1 then
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
  if ARGV[5] == '1' then redis.call('XDEL', KEYS[1], ARGV[3]) end
end
return state
"""

EXTEND = _PRELUDE + """
-- KEYS: stream. ARGV: group, me, id, deliveries. Resets the idle time (the lease) without
-- counting a delivery (JUSTID). Reply: owned() result.
local state = owned(KEYS[1], ARGV[1], ARGV[3], ARGV[2], ARGV[4])
if state == 1 then
  redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'JUSTID')
end
return state
"""

PARK = _PRELUDE + """
-- KEYS: stream, parked-set. ARGV: group, me, id, deliveries, parked, delay_ms, retrycount.
-- Hands the entry to the parked consumer, due after delay_ms; the next claim counts a
-- delivery, so retrycount = deliveries for a retry and deliveries - 1 for a release.
local state = owned(KEYS[1], ARGV[1], ARGV[3], ARGV[2], ARGV[4])
if state == 1 then
  redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[5], 0, ARGV[3],
             'RETRYCOUNT', ARGV[7], 'JUSTID')
  redis.call('ZADD', KEYS[2], now_ms() + tonumber(ARGV[6]), ARGV[3])
end
return state
"""

DEAD_LETTER = _PRELUDE + """
-- KEYS: stream, dead-letter stream. ARGV: group, me, id, deliveries, delete(0|1),
-- field, value, ... Adds the dead letter and acks the original in one step.
local state = owned(KEYS[1], ARGV[1], ARGV[3], ARGV[2], ARGV[4])
if state == 1 then
  local fields = {}
  for i = 6, #ARGV do fields[#fields + 1] = ARGV[i] end
  redis.call('XADD', KEYS[2], '*', unpack(fields))
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
  if ARGV[5] == '1' then redis.call('XDEL', KEYS[1], ARGV[3]) end
end
return state
"""

FORGET_CONSUMER = _PRELUDE + """
-- KEYS: stream. ARGV: group, consumer. Deletes the consumer only when it holds nothing
-- (XGROUP DELCONSUMER would drop its pending entries). Reply: 1 deleted, 0 kept.
for _, flat in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local c = as_map(flat)
  if c['name'] == ARGV[2] then
    if tonumber(c['pending']) == 0 then
      redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
      return 1
    end
    return 0
  end
end
return 0
"""

UNREAD = """
-- KEYS: stream. ARGV: the group's last-delivered id, cap. Reply: how many entries come after
-- that id, or -1 if more than `cap` stand on each side of it. Used when XINFO GROUPS reports
-- `lag` as null (after an AOF reload, or an entry deleted mid-stream). Counted here so that
-- no payload crosses the network; at most `cap` entries are read on each side, so a huge
-- stream is never walked: the entries after the id if few, else the stream's length less
-- the few at or before it.
local stream, last, cap = KEYS[1], ARGV[1], tonumber(ARGV[2])
local after = #redis.call('XRANGE', stream, '(' .. last, '+', 'COUNT', cap)
if after < cap then return after end
local before = #redis.call('XREVRANGE', stream, last, '-', 'COUNT', cap)
if before < cap then return redis.call('XLEN', stream) - before end
return -1
"""

DELETE_WAITING = _PRELUDE + """
-- KEYS: stream. ARGV: group, id. Deletes an entry the group has not taken yet (after its
-- last-delivered id, so in nobody's pending list): how the monitor takes a chosen dead letter
-- out of the dead-letter stream once it was requeued or deleted. Reply: 1 deleted; 0 gone
-- already, or taken by the group meanwhile (e.g. `priority-pubsub requeue`): left alone.
local stream, group, id = KEYS[1], ARGV[1], ARGV[2]
local last = nil
for _, flat in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
  local g = as_map(flat)
  if g['name'] == group then last = g['last-delivered-id'] end
end
if not last or not after(id, last) then return 0 end
return redis.call('XDEL', stream, id)
"""

MOVE_WAITING = _PRELUDE + """
-- KEYS: source, target. ARGV: group, id, maxlen ('' for none), then the copy's fields and
-- values. Moves an entry the group has not taken yet to the target in one step (the monitor's
-- promote): the copy added, the entry deleted, so a worker taking it meanwhile can never
-- leave it in both. Reply: the copy's id; 0 gone already or taken by the group meanwhile;
-- -1 another group reads the source stream (a deleted entry would be gone for it too).
local source, target, group, id, maxlen = KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3]
local groups = redis.call('XINFO', 'GROUPS', source)
if #groups ~= 1 then return -1 end
local only = as_map(groups[1])
if only['name'] ~= group then return -1 end
if not after(id, only['last-delivered-id']) then return 0 end
if #redis.call('XRANGE', source, id, id) == 0 then return 0 end
local fields = {}
for i = 4, #ARGV do fields[#fields + 1] = ARGV[i] end
local copy
if maxlen ~= '' then
  copy = redis.call('XADD', target, 'MAXLEN', '~', maxlen, '*', unpack(fields))
else
  copy = redis.call('XADD', target, '*', unpack(fields))
end
redis.call('XDEL', source, id)
return copy
"""
