//! A blocking Redis connection for the client thread: connect with a timeout, `SELECT` the db,
//! load the two scripts, then pipelined `EVALSHA` batches (one write, the replies read in
//! order). Every read and write has a timeout ([`IO_TIMEOUT`]); any error drops the connection
//! and the caller reconnects (which reloads the scripts, so a restarted Redis needs nothing
//! else). Only the client thread calls this: a slow or dead Redis stalls that thread, never an
//! event loop.
//!
//! The scripts (Lua, atomic in Redis; time is Redis's own `TIME`):
//! - [`LEASE`]: one node's permit sync. Reaps expired holders, computes the node's target
//!   (`min(want, limit − others)`, capped at a fair share `⌈limit / nodes wanting⌉` while
//!   another node wants more than it holds), records `max(target, ceiling)` with an expiry of
//!   `lease`, returns `{target, recorded, total}`. A node with nothing held and nothing wanted
//!   is removed. **Epoch:** the first sync on a Redis without the budget's `epoch` key (a new
//!   Redis, or one that lost its data in a restart) writes it, and for one `lease` after that no
//!   node's target exceeds its `ceiling`: nodes may still hold leases granted by the Redis
//!   that was lost, and they are only known once they sync again (each does within
//!   `lease / 3`) or have expired (within `lease`). The key never expires (a few bytes per
//!   budget), so idle budgets do not pay this again.
//! - [`RATE`]: the shared GCRA (one TAT in microseconds). Reserves up to `want` tokens whose
//!   conformance time `tat + k·T − τ` falls within `horizon` of now, advances the TAT past
//!   them, returns `{granted, offset of token 0 from now in µs}`.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use super::resp::{self, Reply};
use super::spec::RedisAddr;

/// Bound of a connect, of each write and of each wait for a reply.
pub const IO_TIMEOUT: Duration = Duration::from_millis(1000);
/// Most reply bytes buffered (replies are a few dozen bytes each).
const MAX_BUFFERED: usize = 1 << 20;

/// The permit sync. KEYS: held (hash), want (hash), expiry (zset), epoch (string, no expiry).
/// ARGV: node, ceiling, want, limit, lease_ms.
pub const LEASE: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local node = ARGV[1]
local ceiling, want = tonumber(ARGV[2]), tonumber(ARGV[3])
local limit, lease = tonumber(ARGV[4]), tonumber(ARGV[5])
for _, d in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)) do
  redis.call('HDEL', KEYS[1], d)
  redis.call('HDEL', KEYS[2], d)
  redis.call('ZREM', KEYS[3], d)
end
local held = redis.call('HGETALL', KEYS[1])
local count = {}
local others = 0
for i = 1, #held, 2 do
  local c = tonumber(held[i + 1])
  count[held[i]] = c
  if held[i] ~= node then others = others + c end
end
local wants = redis.call('HGETALL', KEYS[2])
local active, starved = 1, 0
for i = 1, #wants, 2 do
  if wants[i] ~= node then
    local w = tonumber(wants[i + 1])
    if w > 0 then active = active + 1 end
    if w > (count[wants[i]] or 0) then starved = starved + 1 end
  end
end
local target = math.min(want, limit - others)
if starved > 0 then target = math.min(target, math.ceil(limit / active)) end
local since = tonumber(redis.call('GET', KEYS[4]) or '-1')
if since < 0 then
  since = now
  redis.call('SET', KEYS[4], now)
end
if now < since + lease then target = math.min(target, ceiling) end
if target < 0 then target = 0 end
local recorded = math.max(target, ceiling)
if recorded == 0 and want == 0 then
  redis.call('HDEL', KEYS[1], node)
  redis.call('HDEL', KEYS[2], node)
  redis.call('ZREM', KEYS[3], node)
else
  redis.call('HSET', KEYS[1], node, recorded)
  redis.call('HSET', KEYS[2], node, want)
  redis.call('ZADD', KEYS[3], now + lease, node)
  for k = 1, 3 do redis.call('PEXPIRE', KEYS[k], lease * 2) end
end
return {target, recorded, others + recorded}
"#;

/// The shared GCRA. KEYS: tat. ARGV: want, T_us, tau_us, horizon_us.
pub const RATE: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local want, T = tonumber(ARGV[1]), tonumber(ARGV[2])
local tau, horizon = tonumber(ARGV[3]), tonumber(ARGV[4])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local room = now + horizon + tau - tat
local g = 0
if room >= 0 then g = math.min(want, math.floor(room / T) + 1) end
if g > 0 then
  local new = tat + g * T
  redis.call('SET', KEYS[1], string.format('%.0f', new), 'PX', math.floor((new - now) / 1000) + 1000)
end
return {g, tat - tau - now}
"#;

/// Why a request failed.
#[derive(Debug)]
pub enum RedisError {
    Io(io::Error),
    Resolve(String),
    Protocol(resp::ProtocolError),
    /// An error reply (`-ERR …`).
    Reply(String),
    /// A reply of a shape the scripts never return.
    Unexpected(String),
}

impl std::fmt::Display for RedisError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RedisError::Io(e) => write!(f, "{e}"),
            RedisError::Resolve(e) => write!(f, "cannot resolve: {e}"),
            RedisError::Protocol(e) => write!(f, "{e}"),
            RedisError::Reply(e) => write!(f, "Redis answered: {e}"),
            RedisError::Unexpected(e) => write!(f, "unexpected reply: {e}"),
        }
    }
}

impl From<io::Error> for RedisError {
    fn from(e: io::Error) -> Self {
        RedisError::Io(e)
    }
}

/// One connection, scripts loaded.
#[derive(Debug)]
pub struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    lease_sha: String,
    rate_sha: String,
}

/// One call of a pipeline.
#[derive(Debug, Clone, Copy)]
pub enum Call<'a> {
    Lease {
        keys: [&'a str; 4],
        node: &'a str,
        ceiling: u32,
        want: u32,
        limit: u32,
        lease_ms: u64,
    },
    Rate {
        key: &'a str,
        want: u32,
        /// The emission interval in microseconds (fractional for rates above 1e6/s).
        interval_us: f64,
        tau_us: u64,
        horizon_us: u64,
    },
}

impl Conn {
    /// Connects (each resolved address in turn), selects the db, loads the scripts.
    pub fn open(addr: &RedisAddr) -> Result<Conn, RedisError> {
        let addrs: Vec<SocketAddr> = (addr.host.as_str(), addr.port)
            .to_socket_addrs()
            .map_err(|e| RedisError::Resolve(e.to_string()))?
            .collect();
        let mut last = RedisError::Resolve(format!("no address for {}", addr.host));
        for a in addrs {
            match TcpStream::connect_timeout(&a, IO_TIMEOUT) {
                Ok(stream) => return Self::setup(stream, addr.db),
                Err(e) => last = RedisError::Io(e),
            }
        }
        Err(last)
    }

    fn setup(stream: TcpStream, db: u8) -> Result<Conn, RedisError> {
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(IO_TIMEOUT))?;
        stream.set_write_timeout(Some(IO_TIMEOUT))?;
        let mut c = Conn {
            stream,
            buf: Vec::with_capacity(512),
            lease_sha: String::new(),
            rate_sha: String::new(),
        };
        let mut out = Vec::new();
        let db = db.to_string();
        resp::encode_command(&mut out, &[b"SELECT", db.as_bytes()]);
        resp::encode_command(&mut out, &[b"SCRIPT", b"LOAD", LEASE.as_bytes()]);
        resp::encode_command(&mut out, &[b"SCRIPT", b"LOAD", RATE.as_bytes()]);
        c.stream.write_all(&out)?;
        c.expect_ok()?;
        c.lease_sha = c.read_sha()?;
        c.rate_sha = c.read_sha()?;
        Ok(c)
    }

    fn expect_ok(&mut self) -> Result<(), RedisError> {
        match self.read_reply()? {
            Reply::Simple(_) => Ok(()),
            Reply::Error(e) => Err(RedisError::Reply(e)),
            other => Err(RedisError::Unexpected(format!("{other:?}"))),
        }
    }

    fn read_sha(&mut self) -> Result<String, RedisError> {
        match self.read_reply()? {
            Reply::Bulk(Some(b)) => Ok(String::from_utf8_lossy(&b).into_owned()),
            Reply::Error(e) => Err(RedisError::Reply(e)),
            other => Err(RedisError::Unexpected(format!("{other:?}"))),
        }
    }

    fn read_reply(&mut self) -> Result<Reply, RedisError> {
        let mut chunk = [0u8; 4096];
        loop {
            if let Some((r, used)) = resp::parse(&self.buf).map_err(RedisError::Protocol)? {
                self.buf.drain(..used);
                return Ok(r);
            }
            if self.buf.len() > MAX_BUFFERED {
                return Err(RedisError::Protocol(resp::ProtocolError::TooLarge));
            }
            let n = self.stream.read(&mut chunk)?;
            if n == 0 {
                return Err(RedisError::Io(io::ErrorKind::UnexpectedEof.into()));
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Sends `calls` in one write and reads their replies: each `[a, b, …]` of integers, or
    /// the error of that call. A connection-level error fails the whole batch.
    pub fn pipeline(
        &mut self,
        calls: &[Call<'_>],
    ) -> Result<Vec<Result<Vec<i64>, RedisError>>, RedisError> {
        let mut out = Vec::with_capacity(256 * calls.len());
        for c in calls {
            self.encode(&mut out, c);
        }
        self.stream.write_all(&out)?;
        let mut replies = Vec::with_capacity(calls.len());
        for _ in calls {
            replies.push(match self.read_reply()? {
                Reply::Array(Some(items)) => items
                    .iter()
                    .map(|i| i.as_int())
                    .collect::<Option<Vec<i64>>>()
                    .ok_or_else(|| RedisError::Unexpected(format!("{items:?}"))),
                Reply::Error(e) => Err(RedisError::Reply(e)),
                other => Err(RedisError::Unexpected(format!("{other:?}"))),
            });
        }
        Ok(replies)
    }

    fn encode(&self, out: &mut Vec<u8>, call: &Call<'_>) {
        match *call {
            Call::Lease {
                keys,
                node,
                ceiling,
                want,
                limit,
                lease_ms,
            } => {
                let (c, w, l, ms) = (
                    ceiling.to_string(),
                    want.to_string(),
                    limit.to_string(),
                    lease_ms.to_string(),
                );
                resp::encode_command(
                    out,
                    &[
                        b"EVALSHA",
                        self.lease_sha.as_bytes(),
                        b"4",
                        keys[0].as_bytes(),
                        keys[1].as_bytes(),
                        keys[2].as_bytes(),
                        keys[3].as_bytes(),
                        node.as_bytes(),
                        c.as_bytes(),
                        w.as_bytes(),
                        l.as_bytes(),
                        ms.as_bytes(),
                    ],
                );
            }
            Call::Rate {
                key,
                want,
                interval_us,
                tau_us,
                horizon_us,
            } => {
                let (w, t, tau, h) = (
                    want.to_string(),
                    format!("{interval_us:.3}"),
                    tau_us.to_string(),
                    horizon_us.to_string(),
                );
                resp::encode_command(
                    out,
                    &[
                        b"EVALSHA",
                        self.rate_sha.as_bytes(),
                        b"1",
                        key.as_bytes(),
                        w.as_bytes(),
                        t.as_bytes(),
                        tau.as_bytes(),
                        h.as_bytes(),
                    ],
                );
            }
        }
    }
}
