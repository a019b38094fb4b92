//! The bytes of one replication message: what a core's group commits wrote, as JetStream
//! carries them (README "Several nodes": subjects and messages, kept stable).
//!
//! A core's commit helper encodes each locally committed batch as one **frame** ([`FrameBuf`]):
//! for every log the batch appended to, the records exactly as the log wrote them (the WAL's
//! record framing, each with its LSN, kind and CRC32C: `wal::format::append_record`), then the
//! batch's dead letters (dispatch's entry encoding, carried as opaque bytes) and the ids of the
//! dead letters it released, and last the durable LSN of every log the core commits after the
//! batch (`through`: so the last message of a subject tells how far each of its logs is
//! replicated, whichever logs that batch touched). The mirror thread then packs the frames waiting for one subject
//! into one **message** ([`pack`]), under the server's `max_payload`.
//!
//! ```text
//! message := "SLRM" version:u8 (=2) core:u16 frames:u32 frame* crc32c:u32   (crc over all before it)
//! frame   := parts:u16 part* dead:u32 (len:u32 bytes)* released:u32 (len:u16 id)*
//!            through:u16 (log:u16 lsn:u64)*
//!            first:u16 (log:u16 lsn:u64)* ids:u32 (len:u16 id)*     (version 2: `ids` = dead's ids)
//! part    := log:u16 len:u32 <len bytes of WAL records, on-disk framing>
//! ```
//! All integers little-endian. `log` is the log's directory index (`wal/core-<log>`), which is
//! not always the publishing core: a core also commits the logs it adopted when the core count
//! shrank. [`decode`] checks every length before it slices, the CRC and each record's own CRC
//! (`wal::format::parse_record`); malformed input is a typed error, never a panic.
#![forbid(unsafe_code)]

use crate::wal::format::{append_record, parse_record, Parsed, RecordKind, RecordRef};
use crate::wal::{self, Lsn, Record};

/// The first bytes of every message.
pub const MAGIC: &[u8; 4] = b"SLRM";
/// The message format's version (a new field is a new version; older ones stay readable):
/// 2 added each frame's `first` list; version 1 messages decode with it empty.
pub const VERSION: u8 = 2;
/// Bytes of a message around its frames: magic, version, core, frame count, CRC.
pub const MESSAGE_OVERHEAD: usize = 4 + 1 + 2 + 4 + 4;

/// One batch's frame being built by the commit helper (module docs).
#[derive(Debug, Default)]
pub struct FrameBuf {
    parts: Vec<(u16, Vec<u8>)>,
    /// Per log in `parts`, the highest LSN added.
    max: Vec<(u16, Lsn)>,
    dead: Vec<(String, Vec<u8>)>,
    released: Vec<String>,
    through: Vec<(u16, Lsn)>,
    first: Vec<(u16, Lsn)>,
}

impl FrameBuf {
    /// Adds `record`, written to log `log` at `lsn`, in the log's own framing.
    pub fn record(&mut self, log: u16, lsn: Lsn, record: &Record) -> Result<(), wal::EncodeError> {
        self.note_max(log, lsn);
        let part = self.part(log);
        append_record(part, lsn, record.kind(), |out| {
            wal::encode_payload_into(record, out)
        })?;
        Ok(())
    }

    /// Adds a record read back from log `log` (its kind and payload as stored).
    pub fn raw_record(&mut self, log: u16, lsn: Lsn, kind: RecordKind, payload: &[u8]) {
        self.note_max(log, lsn);
        let part = self.part(log);
        let copied: Result<usize, std::convert::Infallible> =
            append_record(part, lsn, kind, |out| {
                out.extend_from_slice(payload);
                Ok(())
            });
        let Ok(_) = copied;
    }

    fn note_max(&mut self, log: u16, lsn: Lsn) {
        match self.max.iter_mut().find(|m| m.0 == log) {
            Some(m) => m.1 = m.1.max(lsn),
            None => self.max.push((log, lsn)),
        }
    }

    fn part(&mut self, log: u16) -> &mut Vec<u8> {
        match self.parts.iter().position(|(l, _)| *l == log) {
            Some(i) => &mut self.parts[i].1,
            None => {
                self.parts.push((log, Vec::new()));
                &mut self.parts.last_mut().expect("just pushed").1
            }
        }
    }

    /// Adds dead letter `id` stored by the batch, in its store's encoding.
    pub fn dead_letter(&mut self, id: &str, entry: Vec<u8>) {
        self.dead.push((id.to_owned(), entry));
    }

    /// Adds the id of a dead letter the batch removed.
    pub fn released(&mut self, id: &str) {
        self.released.push(id.to_owned());
    }

    /// Records that log `log` is durable through `lsn` after the batch.
    pub fn through(&mut self, log: u16, lsn: Lsn) {
        self.through.push((log, lsn));
    }

    /// Records that log `log` keeps its records from `lsn` on (below it every event is done and
    /// its segments retired): a restore may begin the log there, and the stream may drop what
    /// lies below.
    pub fn first(&mut self, log: u16, lsn: Lsn) {
        self.first.push((log, lsn));
    }

    /// True if the batch made nothing durable (nothing to replicate).
    pub fn is_empty(&self) -> bool {
        self.parts.is_empty() && self.dead.is_empty() && self.released.is_empty()
    }

    /// The size of the frame [`FrameBuf::finish`] would give now.
    pub fn len(&self) -> usize {
        let mut n = 2 + 4 + 4;
        n += self.parts.iter().map(|(_, b)| 6 + b.len()).sum::<usize>();
        n += self
            .dead
            .iter()
            .map(|d| 4 + d.1.len() + 2 + d.0.len())
            .sum::<usize>();
        n += self.released.iter().map(|r| 2 + r.len()).sum::<usize>();
        n + 2 + 10 * self.through.len() + 2 + 10 * self.first.len() + 4
    }

    /// What the frame [`FrameBuf::finish`] would give now holds, for the stream's retention
    /// (`replication::retention`).
    pub fn meta(&self) -> FrameMeta {
        FrameMeta {
            max: self.max.clone(),
            puts: self.dead.iter().map(|d| d.0.clone()).collect(),
            releases: self.released.clone(),
            first: self.first.clone(),
            through: self.through.clone(),
        }
    }

    /// The frame's bytes and what it holds ([`FrameBuf::meta`]); the builder is left empty.
    pub fn take(&mut self) -> (Vec<u8>, FrameMeta) {
        let meta = self.meta();
        (self.finish(), meta)
    }

    /// The frame's bytes; the builder is left empty for the next batch.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len());
        out.extend_from_slice(&(self.parts.len() as u16).to_le_bytes());
        for (log, bytes) in self.parts.drain(..) {
            out.extend_from_slice(&log.to_le_bytes());
            out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            out.extend_from_slice(&bytes);
        }
        out.extend_from_slice(&(self.dead.len() as u32).to_le_bytes());
        for (_, d) in &self.dead {
            out.extend_from_slice(&(d.len() as u32).to_le_bytes());
            out.extend_from_slice(d);
        }
        out.extend_from_slice(&(self.released.len() as u32).to_le_bytes());
        for r in self.released.drain(..) {
            // Dead-letter ids are event ids (26 bytes); the cap keeps the cast honest.
            let r = &r.as_bytes()[..r.len().min(u16::MAX as usize)];
            out.extend_from_slice(&(r.len() as u16).to_le_bytes());
            out.extend_from_slice(r);
        }
        out.extend_from_slice(&(self.through.len() as u16).to_le_bytes());
        for (log, lsn) in self.through.drain(..) {
            out.extend_from_slice(&log.to_le_bytes());
            out.extend_from_slice(&lsn.to_le_bytes());
        }
        out.extend_from_slice(&(self.first.len() as u16).to_le_bytes());
        for (log, lsn) in self.first.drain(..) {
            out.extend_from_slice(&log.to_le_bytes());
            out.extend_from_slice(&lsn.to_le_bytes());
        }
        out.extend_from_slice(&(self.dead.len() as u32).to_le_bytes());
        for (id, _) in self.dead.drain(..) {
            let id = &id.as_bytes()[..id.len().min(u16::MAX as usize)];
            out.extend_from_slice(&(id.len() as u16).to_le_bytes());
            out.extend_from_slice(id);
        }
        self.max.clear();
        out
    }
}

/// One message of `core` holding `frames`, in order.
pub fn pack<'a>(core: usize, frames: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    out.extend_from_slice(&u16::try_from(core).unwrap_or(u16::MAX).to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    let mut n = 0u32;
    for f in frames {
        out.extend_from_slice(f);
        n += 1;
    }
    out[7..11].copy_from_slice(&n.to_le_bytes());
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// A decoded message, borrowing its bytes.
#[derive(Debug, PartialEq, Eq)]
pub struct Decoded<'a> {
    pub core: u16,
    pub frames: Vec<Frame<'a>>,
}

impl Decoded<'_> {
    /// Its frames' `through` and `first` lists, per log the highest of each.
    pub fn lists(&self) -> Lists {
        let mut lists = Lists::default();
        for f in &self.frames {
            merge_max(&mut lists.0, f.through.clone());
            merge_max(&mut lists.1, f.first.clone());
        }
        lists
    }
}

/// One batch of a decoded message.
#[derive(Debug, PartialEq, Eq, Default)]
pub struct Frame<'a> {
    /// Per log: its index and its records, in LSN order, CRC-checked.
    pub parts: Vec<(u16, Vec<RecordRef<'a>>)>,
    /// Dead letters stored, in the DLQ's encoding.
    pub dead: Vec<&'a [u8]>,
    /// Ids of dead letters removed.
    pub released: Vec<&'a str>,
    /// Each log the core commits, with its durable LSN after the batch.
    pub through: Vec<(u16, Lsn)>,
    /// Logs whose records below an LSN are retired, with that LSN (version 2; empty in 1).
    pub first: Vec<(u16, Lsn)>,
    /// The ids of `dead`, in order (version 2; empty in 1).
    pub dead_ids: Vec<&'a str>,
}

impl Frame<'_> {
    /// What the frame holds, for the stream's retention (`replication::retention`).
    pub fn meta(&self) -> FrameMeta {
        FrameMeta {
            max: (self.parts.iter())
                .filter_map(|(log, rs)| Some((*log, rs.last()?.lsn)))
                .collect(),
            puts: self.dead_ids.iter().map(|s| s.to_string()).collect(),
            releases: self.released.iter().map(|s| s.to_string()).collect(),
            first: self.first.clone(),
            through: self.through.clone(),
        }
    }
}

/// What a frame holds, as the stream's retention needs it: per log its highest LSN, the ids of
/// the dead letters it stores and releases, and its logs' retired points.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FrameMeta {
    pub max: Vec<(u16, Lsn)>,
    pub puts: Vec<String>,
    pub releases: Vec<String>,
    pub first: Vec<(u16, Lsn)>,
    /// Its `through` list.
    pub through: Vec<(u16, Lsn)>,
}

impl FrameMeta {
    /// Adds `other`'s (a later frame of the same message).
    pub fn merge(&mut self, other: FrameMeta) {
        merge_max(&mut self.max, other.max);
        merge_max(&mut self.first, other.first);
        merge_max(&mut self.through, other.through);
        self.puts.extend(other.puts);
        self.releases.extend(other.releases);
    }
}

/// A frame's `through` and `first` lists, per log.
pub type Lists = (Vec<(u16, Lsn)>, Vec<(u16, Lsn)>);

/// Per log, the higher LSN of `into`'s and `from`'s.
pub fn merge_max(into: &mut Vec<(u16, Lsn)>, from: Vec<(u16, Lsn)>) {
    for (log, lsn) in from {
        match into.iter_mut().find(|m| m.0 == log) {
            Some(m) => m.1 = m.1.max(lsn),
            None => into.push((log, lsn)),
        }
    }
}

/// Why a message did not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// Not a sluice replication message, or a version this build does not read.
    Foreign(String),
    /// The CRC over the message does not match.
    Crc { stored: u32, computed: u32 },
    /// A length runs past the end, or a record inside is invalid.
    Malformed(String),
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Foreign(why) => write!(f, "not a sluice replication message: {why}"),
            DecodeError::Crc { stored, computed } => write!(
                f,
                "message CRC mismatch (stored {stored:#010x}, computed {computed:#010x})"
            ),
            DecodeError::Malformed(why) => write!(f, "malformed message: {why}"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// A bounds-checked reader over a message's bytes.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], DecodeError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let Some(end) = end else {
            let msg = format!("{what} at byte {} runs past the end ({n} bytes)", self.at);
            return Err(DecodeError::Malformed(msg));
        };
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u16(&mut self, what: &str) -> Result<u16, DecodeError> {
        let b = self.take(2, what)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self, what: &str) -> Result<u32, DecodeError> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self, what: &str) -> Result<u64, DecodeError> {
        let b = self.take(8, what)?;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }
}

/// Decodes a message (module docs): CRC, every length, every record's CRC and kind.
pub fn decode(bytes: &[u8]) -> Result<Decoded<'_>, DecodeError> {
    if bytes.len() < MESSAGE_OVERHEAD || &bytes[..4] != MAGIC {
        return Err(DecodeError::Foreign("no SLRM header".into()));
    }
    let version = bytes[4];
    if !(1..=VERSION).contains(&version) {
        return Err(DecodeError::Foreign(format!("version {version}")));
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    let stored = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
    let computed = crc32c::crc32c(body);
    if stored != computed {
        return Err(DecodeError::Crc { stored, computed });
    }
    let mut c = Cursor { bytes: body, at: 5 };
    let core = c.u16("core")?;
    let n = c.u32("frame count")?;
    let mut frames = Vec::new();
    for _ in 0..n {
        frames.push(frame(&mut c, version)?);
    }
    if c.at != body.len() {
        let extra = body.len() - c.at;
        return Err(DecodeError::Malformed(format!(
            "{extra} bytes after the last frame"
        )));
    }
    Ok(Decoded { core, frames })
}

fn frame<'a>(c: &mut Cursor<'a>, version: u8) -> Result<Frame<'a>, DecodeError> {
    let mut f = Frame::default();
    for _ in 0..c.u16("part count")? {
        let log = c.u16("log")?;
        let len = c.u32("part length")? as usize;
        let mut bytes = c.take(len, "part")?;
        let mut records = Vec::new();
        while !bytes.is_empty() {
            match parse_record(bytes) {
                Parsed::Record(r) => {
                    bytes = &bytes[r.len..];
                    records.push(r);
                }
                Parsed::End => return Err(malformed("an empty record in a part")),
                Parsed::Bad(why) => return Err(malformed(why)),
            }
        }
        f.parts.push((log, records));
    }
    for _ in 0..c.u32("dead-letter count")? {
        let len = c.u32("dead-letter length")? as usize;
        f.dead.push(c.take(len, "dead letter")?);
    }
    for _ in 0..c.u32("release count")? {
        let len = c.u16("release length")? as usize;
        let id = c.take(len, "released id")?;
        let id = std::str::from_utf8(id).map_err(|_| malformed("a released id is not UTF-8"))?;
        f.released.push(id);
    }
    for _ in 0..c.u16("through count")? {
        let log = c.u16("through log")?;
        f.through.push((log, c.u64("through lsn")?));
    }
    if version >= 2 {
        for _ in 0..c.u16("first count")? {
            let log = c.u16("first log")?;
            f.first.push((log, c.u64("first lsn")?));
        }
        let ids = c.u32("dead-letter id count")? as usize;
        if ids != f.dead.len() {
            return Err(malformed("dead-letter ids do not match the dead letters"));
        }
        for _ in 0..ids {
            let len = c.u16("dead-letter id length")? as usize;
            let id = c.take(len, "dead-letter id")?;
            let id =
                std::str::from_utf8(id).map_err(|_| malformed("a dead-letter id is not UTF-8"))?;
            f.dead_ids.push(id);
        }
    }
    Ok(f)
}

fn malformed(why: &str) -> DecodeError {
    DecodeError::Malformed(why.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::format::tests::sample_event;
    use crate::wal::{decode_payload, DoneEntry, DoneRecord, DoneStatus};

    fn frame_of(log: u16, lsns: std::ops::Range<u64>) -> Vec<u8> {
        let mut f = FrameBuf::default();
        let last = lsns.end - 1;
        for lsn in lsns {
            f.record(log, lsn, &Record::Event(sample_event(lsn, 40)))
                .unwrap();
        }
        f.through(log, last);
        f.finish()
    }

    #[test]
    fn a_message_of_frames_decodes_to_the_same_records_dead_letters_and_releases() {
        let mut f = FrameBuf::default();
        f.record(0, 7, &Record::Event(sample_event(7, 100)))
            .unwrap();
        let done = DoneRecord {
            entries: vec![DoneEntry {
                event_lsn: 3,
                status: DoneStatus::Delivered,
                attempts: 1,
            }],
        };
        f.record(2, 41, &Record::Done(done.clone())).unwrap();
        f.record(0, 8, &Record::Event(sample_event(8, 0))).unwrap();
        f.dead_letter("d1", b"entry-bytes".to_vec());
        f.released("01JABCDEFGHJKMNPQRSTVWXYZ0");
        f.through(0, 8);
        f.through(2, 41);
        f.first(2, 30);
        assert!(!f.is_empty());
        let one = f.finish();
        assert!(f.is_empty(), "finish leaves the builder empty");
        let two = frame_of(0, 9..11);
        let msg = pack(3, [one.as_slice(), two.as_slice()]);
        let d = decode(&msg).unwrap();
        assert_eq!(d.core, 3);
        assert_eq!(d.frames.len(), 2);
        let first = &d.frames[0];
        let lsns: Vec<(u16, Vec<u64>)> = (first.parts.iter())
            .map(|(l, rs)| (*l, rs.iter().map(|r| r.lsn).collect()))
            .collect();
        assert_eq!(
            lsns,
            [(0, vec![7, 8]), (2, vec![41])],
            "grouped by log, in order"
        );
        let ev = decode_payload(first.parts[0].1[0].kind, first.parts[0].1[0].payload).unwrap();
        assert_eq!(ev, Record::Event(sample_event(7, 100)));
        let d2 = decode_payload(first.parts[1].1[0].kind, first.parts[1].1[0].payload).unwrap();
        assert_eq!(d2, Record::Done(done));
        assert_eq!(first.dead, [b"entry-bytes".as_slice()]);
        assert_eq!(first.released, ["01JABCDEFGHJKMNPQRSTVWXYZ0"]);
        assert_eq!(first.through, [(0, 8), (2, 41)]);
        assert_eq!(first.first, [(2, 30)]);
        assert_eq!(first.dead_ids, ["d1"]);
        let meta = first.meta();
        assert_eq!(meta.max, [(0, 8), (2, 41)]);
        assert_eq!(meta.puts, ["d1"]);
        assert!(d.frames[1].first.is_empty());
        let second: Vec<u64> = d.frames[1].parts[0].1.iter().map(|r| r.lsn).collect();
        assert_eq!(second, [9, 10]);
    }

    #[test]
    /// The first seed is a version 1 message (no `first` list): still read, with `first` empty;
    /// the second a version 2 one, both written by hand (outside this code).
    fn the_fuzz_seed_is_a_valid_message_written_by_hand() {
        let seed = include_bytes!("../../fuzz/seeds/replication_message/one_frame");
        let d = decode(seed).expect("the seed decodes");
        assert_eq!(d.frames.len(), 1);
        assert_eq!(d.frames[0].dead, [b"abc".as_slice()]);
        assert_eq!(d.frames[0].released, ["01JABCDEFGHJKMNPQRSTVWXYZ0"]);
        assert_eq!(d.frames[0].through, [(0, 5)]);
        assert!(d.frames[0].first.is_empty());
        assert_eq!(seed[4], 1, "a version 1 message");
        let v2 = include_bytes!("../../fuzz/seeds/replication_message/one_frame_v2");
        let d = decode(v2).expect("the version 2 seed decodes");
        assert_eq!(v2[4], 2);
        assert_eq!(d.frames[0].first, [(0, 3)]);
        assert_eq!(d.frames[0].dead_ids, ["01JDEADLETTERID00000000000"]);
    }

    #[test]
    fn every_truncation_and_every_flipped_byte_is_an_error_never_a_panic() {
        let one = frame_of(1, 1..4);
        let msg = pack(0, [one.as_slice()]);
        assert!(decode(&msg).is_ok());
        for cut in 0..msg.len() {
            assert!(decode(&msg[..cut]).is_err(), "cut at {cut}");
        }
        for i in 0..msg.len() {
            let mut bad = msg.clone();
            bad[i] ^= 0x40;
            assert!(decode(&bad).is_err(), "flipped byte {i}");
        }
        // A valid CRC over nonsense inside still fails on the inner checks.
        let mut inner = msg[..msg.len() - 4].to_vec();
        let at = inner.len() - 20;
        inner[at] ^= 1;
        let crc = crc32c::crc32c(&inner);
        inner.extend_from_slice(&crc.to_le_bytes());
        assert!(matches!(decode(&inner), Err(DecodeError::Malformed(_))));
        let mut v3 = msg.clone();
        v3[4] = 3;
        assert!(matches!(decode(&v3), Err(DecodeError::Foreign(_))));
    }
}
