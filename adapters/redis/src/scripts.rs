//! The Lua scripts, each one step on Redis: whatever must not interleave with another
//! client's commands (a versioned write, a keepalive and its registration, an invalidation
//! and its log entry) runs as one of these.

/// The epoch of this Redis's data set, a Lua function the scripts below start with. The
/// identity of a data set is the primary's replication id (`master_replid`, `INFO
/// replication`), which a primary takes anew whenever its data may have missed writes: a
/// Redis that restarted (from a snapshot older than its last writes, say), a replica
/// promoted in a failover, or an old primary promoted again before it resynced from the
/// primary that took over (its `run_id` is still its own, but the writes made meanwhile on
/// the other one are missing: the randomized fault schedule found that one while the
/// identity was the `run_id`). Each differs from the identity recorded in the key
/// `identity` (which came back from the snapshot, was replicated from the old primary, or
/// predates the promotion): the first script to run there starts a new epoch, the Redis time
/// of that moment (later than the epoch it replaces, also when that one began within the
/// same millisecond). Records carry the epoch they were written in; a live record of an
/// earlier epoch may predate a tombstone the Redis lost, and is confirmed by the store
/// before use. A primary also takes a new replication id when its first replica attaches,
/// or when it has had none for `repl-backlog-ttl`: a new epoch that lost nothing, paid with
/// one store read per live code.
const IDENTITY: &str = r"
local function epoch(key)
  local run = string.match(redis.call('INFO', 'replication'), 'master_replid:(%x+)')
  assert(run, 'INFO replication names no master_replid')
  local held = redis.call('GET', key)
  local before = nil
  if held then
    local r, e = string.match(held, '^(%S+) (%d+)$')
    if r == run then return tonumber(e) end
    before = tonumber(e)
  end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  -- Never the epoch it replaces, even within the same millisecond.
  if before and now <= before then now = before + 1 end
  redis.call('SET', key, run .. ' ' .. now)
  return now
end
";

/// A read: the record and the current epoch.
const READ: &str = r"
local e = epoch(KEYS[2])
return {redis.call('GET', KEYS[1]), e}
";

/// The versioned write of a record (JSON) at `version`, a Lua function: replaces the record
/// unless the stored one has a higher version (equal versions overwrite, so retries are
/// idempotent), stamping it with the epoch `e`. Returns 1 when written.
const VERSIONED_SET_FN: &str = r#"
local function versioned_set(key, e, version, json, ttl)
  local current = redis.call('GET', key)
  if current then
    local v = tonumber(string.match(current, '^(%d+) '))
    if v and v > tonumber(version) then
      return 0
    end
  end
  redis.call('SET', key, version .. ' {"e":' .. e .. ',' .. string.sub(json, 2), 'PX', ttl)
  return 1
end
"#;

/// [`VERSIONED_SET_FN`] as a script: 1 when written, and the epoch.
const VERSIONED_SET: &str = r"
local e = epoch(KEYS[2])
return {versioned_set(KEYS[1], e, ARGV[1], ARGV[2], ARGV[3]), e}
";

/// A proxy's keepalive: registers it in `proxies` at Redis's time (never a process's own
/// clock, which may be skewed), drops registrations older than an hour, and publishes on
/// the proxy's own channel, which only its subscription hears, with `ARGV[4]` (`PUBLISH`,
/// or `SPUBLISH` on a cluster).
const KEEPALIVE: &str = r"
local e = epoch(KEYS[2])
local last = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)
local position = '0-0'
if last[1] then position = last[1][1] end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - 3600000)
redis.call(ARGV[4], ARGV[2], ARGV[3])
return {now, e, position}
";

/// An invalidation: logged in the stream `invalidations` (trimmed to about `ARGV[3]`
/// entries) and published with `ARGV[4]` (`PUBLISH`, or `SPUBLISH` on a cluster), in one
/// step, so the log and the channel agree on the order. The record's tombstone is written
/// before, by its own script (on a cluster it is on another slot).
const INVALIDATE_FN: &str = r"
local function invalidate(log, entry, channel, len, publish)
  redis.call('XADD', log, 'MAXLEN', '~', len, '*', 'i', entry)
  redis.call(publish, channel, entry)
end
";

/// [`INVALIDATE_FN`] as a script.
const INVALIDATE: &str = r"
invalidate(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4])
return 1
";

/// The invalidations logged after the stream id `ARGV[2]` of epoch `ARGV[1]`, at most
/// `ARGV[3]` of them; nil when that cannot be told in full: the epoch changed (the Redis
/// may have lost entries), entries after the position were trimmed, or there are more.
const REPLAY: &str = r"
if epoch(KEYS[1]) ~= tonumber(ARGV[1]) then return false end
local limit = tonumber(ARGV[3])
local entries
if ARGV[2] == '0-0' then
  -- Nothing was logged then: complete if nothing was ever trimmed.
  if redis.call('EXISTS', KEYS[2]) == 0 then return {} end
  local info = redis.call('XINFO', 'STREAM', KEYS[2])
  local fields = {}
  for i = 1, #info, 2 do fields[info[i]] = info[i + 1] end
  if not fields['entries-added'] or fields['entries-added'] ~= fields['length'] then return false end
  entries = redis.call('XRANGE', KEYS[2], '-', '+', 'COUNT', limit + 1)
else
  -- The log is trimmed from its oldest end only: while the entry at the position is
  -- still there, everything after it is too.
  entries = redis.call('XRANGE', KEYS[2], ARGV[2], '+', 'COUNT', limit + 2)
  if #entries == 0 or entries[1][1] ~= ARGV[2] then return false end
  table.remove(entries, 1)
end
if #entries > limit then return false end
local out = {}
for i, entry in ipairs(entries) do out[i] = entry[2][2] end
return out
";

/// The epoch, its age in milliseconds, the proxies registered within the last `ARGV[1]`
/// milliseconds of Redis's time (those registered in an earlier epoch may be missing), and
/// how long ago each last registered, by Redis's clock.
const LIVE_PROXIES_FN: &str = r"
local function live_proxies(proxies, identity, within)
  local e = epoch(identity)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local found = redis.call('ZRANGEBYSCORE', proxies, now - tonumber(within), '+inf', 'WITHSCORES')
  local names, ages = {}, {}
  for i = 1, #found, 2 do
    names[#names + 1] = found[i]
    ages[#ages + 1] = now - tonumber(found[i + 1])
  end
  return {e, now - e, names, ages}
end
";

/// [`LIVE_PROXIES_FN`] as a script.
const LIVE_PROXIES: &str = r"
return live_proxies(KEYS[1], KEYS[2], ARGV[1])
";

/// A delete's whole step on one Redis (not a cluster, where these keys are on different
/// slots): the tombstone written ([`VERSIONED_SET_FN`]), then the invalidation logged and
/// published ([`INVALIDATE_FN`]), then the registry read ([`LIVE_PROXIES_FN`]), in this
/// order and with nothing in between, in one round trip. The registry is read after the
/// publish as when these are three steps: a proxy missing from it registered after the
/// invalidation was published, and whatever it reads from L2 then is the tombstone.
/// KEYS: the record, its identity, the log, the registry, the fleet's identity. Returns
/// {written, record epoch, [fleet epoch, its age, proxies]}.
const DEACTIVATE: &str = r"
local e = epoch(KEYS[2])
local written = versioned_set(KEYS[1], e, ARGV[1], ARGV[2], ARGV[3])
invalidate(KEYS[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7])
return {written, e, live_proxies(KEYS[4], KEYS[5], ARGV[8])}
";

/// Takes one password attempt on a link from the fleet's budget (a GCRA on Redis's own
/// clock, so the proxies' clocks do not matter). KEYS: the link's attempts key. ARGV: the
/// burst, the milliseconds between two attempts once it is spent. The key holds the
/// theoretical arrival time of the next attempt, and expires once the budget is full
/// again. Returns 0 when taken, else the milliseconds until the next one is.
const TAKE_ATTEMPT: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local burst = tonumber(ARGV[1])
local every = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local next_tat = tat + every
local allowed_at = next_tat - burst * every
if allowed_at > now then
  return allowed_at - now
end
redis.call('SET', KEYS[1], next_tat, 'PX', next_tat - now)
return 0
"#;

/// The scripts of one cache, the epoch function prepended to those that report it.
pub(crate) struct Scripts {
    /// [`VERSIONED_SET`].
    pub(crate) versioned_set: redis::Script,
    /// [`READ`].
    pub(crate) read: redis::Script,
    /// [`KEEPALIVE`].
    pub(crate) keepalive: redis::Script,
    /// [`LIVE_PROXIES`].
    pub(crate) live_proxies: redis::Script,
    /// [`INVALIDATE`].
    pub(crate) invalidate: redis::Script,
    /// [`REPLAY`].
    pub(crate) replay: redis::Script,
    /// [`DEACTIVATE`].
    pub(crate) deactivate: redis::Script,
    /// [`TAKE_ATTEMPT`].
    pub(crate) take_attempt: redis::Script,
}

impl Scripts {
    pub(crate) fn new() -> Scripts {
        Scripts {
            versioned_set: redis::Script::new(&format!("{IDENTITY}{VERSIONED_SET_FN}{VERSIONED_SET}")),
            read: redis::Script::new(&format!("{IDENTITY}{READ}")),
            keepalive: redis::Script::new(&format!("{IDENTITY}{KEEPALIVE}")),
            live_proxies: redis::Script::new(&format!("{IDENTITY}{LIVE_PROXIES_FN}{LIVE_PROXIES}")),
            invalidate: redis::Script::new(&format!("{INVALIDATE_FN}{INVALIDATE}")),
            replay: redis::Script::new(&format!("{IDENTITY}{REPLAY}")),
            deactivate: redis::Script::new(&format!(
                "{IDENTITY}{VERSIONED_SET_FN}{INVALIDATE_FN}{LIVE_PROXIES_FN}{DEACTIVATE}"
            )),
            take_attempt: redis::Script::new(TAKE_ATTEMPT),
        }
    }
}
