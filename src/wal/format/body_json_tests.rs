//! Issue 43's format change: kinds 9 and 10 (an event with its body's JSON decision), and the
//! rule that a log written before them (kinds 1 and 5 only) reads unchanged after them.

use super::tests::{sample_event, Rng};
use super::*;
use crate::wal::recover::tests::test_cfg;
use crate::wal::{open, recover_dispatch, tools, WalReader, WritePath};
use std::os::unix::fs::FileExt;

const STATES: [BodyJson; 3] = [BodyJson::Undecided, BodyJson::Json, BodyJson::NotJson];

/// A kind-1 payload laid out by hand, field by field, as written before issue 43 (and as the
/// `wal` module header spells it): not through the encoder under test.
fn old_event_payload(id: &str, trigger: &str, source: &str, at: u64, body: &[u8]) -> Vec<u8> {
    let mut p = Vec::new();
    for s in [id, trigger, source] {
        p.extend_from_slice(&(s.len() as u16).to_le_bytes());
        p.extend_from_slice(s.as_bytes());
    }
    p.extend_from_slice(&at.to_le_bytes());
    p.extend_from_slice(&1u16.to_le_bytes()); // one header
    p.extend_from_slice(&12u16.to_le_bytes());
    p.extend_from_slice(b"content-type");
    p.extend_from_slice(&16u16.to_le_bytes());
    p.extend_from_slice(b"application/json");
    p.extend_from_slice(&(body.len() as u32).to_le_bytes());
    p.extend_from_slice(body);
    p
}

/// A record framed by hand: `len`, CRC32C over `len` then `lsn, kind, payload`, `lsn`, `kind`.
fn old_record(lsn: u64, kind: u8, payload: &[u8]) -> Vec<u8> {
    let len = ((RECORD_HEADER_BYTES + payload.len()) as u32).to_le_bytes();
    let mut after_crc = lsn.to_le_bytes().to_vec();
    after_crc.push(kind);
    after_crc.extend_from_slice(payload);
    let crc = crc32c::crc32c_append(crc32c::crc32c(&len), &after_crc);
    let mut r = len.to_vec();
    r.extend_from_slice(&crc.to_le_bytes());
    r.extend_from_slice(&after_crc);
    r
}

#[test]
fn a_log_written_before_the_json_flag_is_recovered_and_read_as_undecided() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = test_cfg(tmp.path(), WritePath::Pwrite);
    std::fs::create_dir_all(&cfg.dir).unwrap();
    // Kind 1 (LSN 1, a JSON body) and kind 5 (LSN 2, a replay of it): no marker, no
    // checkpoint, as the oldest logs are; the body of LSN 1 is JSON, never flagged.
    let plain = old_event_payload("evt-1", "gh", "github", 1_700_000_000_001, b"{\"a\":1}");
    let mut replay = Vec::new();
    replay.extend_from_slice(&5u16.to_le_bytes());
    replay.extend_from_slice(b"evt-0");
    replay.extend_from_slice(&old_event_payload(
        "evt-2",
        "gh",
        "github",
        1_700_000_000_002,
        b"\xff not json",
    ));
    let mut seg = old_record(1, 1, &plain);
    seg.extend_from_slice(&old_record(2, 5, &replay));
    let file = std::fs::File::create(cfg.dir.join("00000000000000000001.seg")).unwrap();
    file.set_len(cfg.segment_bytes).unwrap();
    file.write_all_at(&seg, 0).unwrap();
    drop(file);

    let (wal, report) = open(&cfg).unwrap();
    assert_eq!((report.records, report.last_lsn), (2, 2));
    assert!(report.truncated_tail.is_none() && report.lost.is_empty());
    drop(wal);

    let mut reader = WalReader::open(&cfg.dir).unwrap();
    let (lsn, first) = reader.next_event().unwrap().unwrap();
    assert_eq!(lsn, 1);
    assert_eq!(first.kind(), RecordKind::Event);
    assert_eq!(first.body_json, BodyJson::Undecided);
    assert_eq!(first.body, b"{\"a\":1}");
    assert_eq!(first.headers[0].1, b"application/json");
    assert_eq!(first.replay_of, None);
    let (lsn, second) = reader.next_event().unwrap().unwrap();
    assert_eq!(lsn, 2);
    assert_eq!(second.kind(), RecordKind::ReplayEvent);
    assert_eq!(second.body_json, BodyJson::Undecided);
    assert_eq!(second.replay_of.as_deref(), Some("evt-0"));
    assert_eq!(second.event_id, "evt-2");
    assert!(reader.next_event().is_none());
    // Re-encoded, an undecided event is the old bytes exactly (kind 1 and 5 are unchanged).
    assert_eq!(encode_event(&first).unwrap(), plain);
    assert_eq!(encode_event(&second).unwrap(), replay);

    let state = recover_dispatch(&cfg.dir).unwrap();
    let pending: Vec<_> = state
        .pending
        .iter()
        .map(|(l, m)| (*l, m.replay_of.clone()))
        .collect();
    assert_eq!(pending, [(1, None), (2, Some("evt-0".to_owned()))]);
    assert_eq!(
        state.pending[&1].bytes,
        (RECORD_HEADER_BYTES + plain.len()) as u64
    );
    let v = tools::verify_log(&cfg.dir).unwrap();
    assert!(v.is_clean(), "{v}");
    let mut out = Vec::new();
    tools::inspect_json(tmp.path(), &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert_eq!(text.lines().count(), 2);
    assert!(
        !text.contains("body_json"),
        "undecided shows no flag: {text}"
    );
}

#[test]
fn flagged_kinds_round_trip_each_flag_state_as_a_flags_byte_before_the_old_payload() {
    for replay_of in [None, Some("01HZX3K9V7Q2W8E5R4T6Y1U0AB".to_owned())] {
        for state in STATES {
            let mut ev = sample_event(3, 40);
            ev.replay_of = replay_of.clone();
            let undecided = encode_event(&ev).unwrap();
            ev.body_json = state;
            let bytes = encode_event(&ev).unwrap();
            assert_eq!(bytes.len(), event_payload_len(&ev).unwrap());
            let rec = Record::Event(ev.clone());
            assert_eq!(decode_payload(ev.kind(), &bytes).unwrap(), rec);
            let want = match (state, replay_of.is_some()) {
                (BodyJson::Undecided, false) => RecordKind::Event,
                (BodyJson::Undecided, true) => RecordKind::ReplayEvent,
                (_, false) => RecordKind::FlaggedEvent,
                (_, true) => RecordKind::FlaggedReplayEvent,
            };
            assert_eq!(ev.kind(), want);
            if state == BodyJson::Undecided {
                assert_eq!(bytes, undecided);
            } else {
                assert_eq!(bytes[0], state.to_flags());
                assert_eq!(&bytes[1..], &undecided[..], "the kind-1/5 payload follows");
            }
            // Framed, recovered by the record parser, and as `wal inspect`'s cost counts it.
            let mut out = Vec::new();
            let n = append_record(&mut out, 7, ev.kind(), |o| encode_event_into(&ev, o)).unwrap();
            assert_eq!(n as u64, event_cost(&ev));
            let Parsed::Record(r) = parse_record(&out) else {
                panic!("not a record")
            };
            assert_eq!(
                (r.kind, decode_payload(r.kind, r.payload).unwrap()),
                (want, rec)
            );
        }
    }
    // Flags value 0 in a kind-9 payload is well formed (nothing decided); encoders write kind 1.
    let ev = sample_event(4, 10);
    let mut p = vec![0];
    p.extend_from_slice(&encode_event(&ev).unwrap());
    assert_eq!(
        parse_event(RecordKind::FlaggedEvent, &p)
            .unwrap()
            .to_record(),
        ev
    );
    assert_eq!(BodyJson::from_flags(1), Some(BodyJson::Json));
    assert_eq!(BodyJson::from_flags(2), Some(BodyJson::NotJson));
}

#[test]
fn undefined_flags_and_truncated_flagged_payloads_are_decode_errors() {
    let invalid = Err(DecodeError::Invalid {
        field: "event flags",
    });
    for kind in [RecordKind::FlaggedEvent, RecordKind::FlaggedReplayEvent] {
        let mut ev = sample_event(9, 30);
        ev.body_json = BodyJson::Json;
        if kind == RecordKind::FlaggedReplayEvent {
            ev.replay_of = Some("r".into());
        }
        let payload = encode_event(&ev).unwrap();
        assert_eq!(ev.kind(), kind);
        for flags in 3..=u8::MAX {
            let mut p = payload.clone();
            p[0] = flags;
            assert_eq!(decode_payload(kind, &p), invalid, "flags {flags:#x}");
            assert!(matches!(
                parse_event(kind, &p),
                Err(DecodeError::Invalid {
                    field: "event flags"
                })
            ));
        }
        assert_eq!(
            decode_payload(kind, &[]),
            Err(DecodeError::Truncated {
                field: "event flags"
            })
        );
        for cut in 0..payload.len() {
            assert!(decode_payload(kind, &payload[..cut]).is_err(), "cut {cut}");
        }
        // A kind-1/5 payload read as kind 9/10 (its first byte taken for flags) never panics.
        let mut rng = Rng(0xF1A6_5EED_0000_0043);
        for _ in 0..3000 {
            let mut p = payload.clone();
            for _ in 0..1 + rng.next() % 3 {
                let i = (rng.next() as usize) % p.len();
                p[i] = rng.next() as u8;
            }
            for k in [1, 5, 9, 10].into_iter().filter_map(RecordKind::from_u8) {
                let _ = decode_payload(k, &p);
            }
        }
    }
}

#[test]
fn the_decision_is_the_batch_rule_and_a_stored_one_is_not_reparsed() {
    assert_eq!(BodyJson::decide(b" {\"a\": [1, 2]} \n"), BodyJson::Json);
    assert_eq!(BodyJson::decide(b"42"), BodyJson::Json);
    assert_eq!(BodyJson::decide(b"{\"a\":1} x"), BodyJson::NotJson);
    assert_eq!(BodyJson::decide(b""), BodyJson::NotJson);
    assert_eq!(BodyJson::decide(b"\xff"), BodyJson::NotJson);
    assert!(BodyJson::Undecided.is_json(b"[]"));
    assert!(!BodyJson::Undecided.is_json(b"["));
    // A stored decision wins over the bytes (a batch trusts it and parses nothing).
    assert!(!BodyJson::NotJson.is_json(b"[]"));
    assert!(BodyJson::Json.is_json(b"["));
}

#[test]
fn flagged_events_are_recovered_read_and_inspected_with_their_flag() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = test_cfg(tmp.path(), WritePath::Pwrite);
    let mut evs: Vec<EventRecord> = STATES
        .iter()
        .enumerate()
        .map(|(i, &state)| EventRecord {
            body_json: state,
            ..sample_event(i as u64, 20)
        })
        .collect();
    evs[2].replay_of = Some("evt-0".into());
    open(&cfg).unwrap().0.append_events(&evs).unwrap();
    let (_wal, report) = open(&cfg).unwrap();
    assert_eq!(report.records, 3);
    let read: Vec<_> = WalReader::open(&cfg.dir)
        .unwrap()
        .map(|r| {
            let r = r.unwrap();
            (r.kind, parse_event(r.kind, &r.payload).unwrap().to_record())
        })
        .collect();
    let kinds: Vec<_> = read.iter().map(|(k, _)| *k).collect();
    use RecordKind::*;
    assert_eq!(kinds, [Event, FlaggedEvent, FlaggedReplayEvent]);
    assert_eq!(read.into_iter().map(|(_, e)| e).collect::<Vec<_>>(), evs);
    let state = recover_dispatch(&cfg.dir).unwrap();
    assert_eq!(state.pending.len(), 3);
    for (i, ev) in evs.iter().enumerate() {
        assert_eq!(state.pending[&(i as u64 + 1)].bytes, event_cost(ev));
    }
    let mut out = Vec::new();
    tools::inspect_json(tmp.path(), &mut out).unwrap();
    let flags: Vec<_> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["body_json"].clone())
        .collect();
    use serde_json::Value;
    assert_eq!(flags, [Value::Null, Value::Bool(true), Value::Bool(false)]);
}

#[test]
fn the_outcome_index_reads_the_trigger_of_flagged_kinds_too() {
    for replay_of in [None, Some("r".to_owned())] {
        for state in STATES {
            let ev = EventRecord {
                body_json: state,
                replay_of: replay_of.clone(),
                ..sample_event(5, 12)
            };
            let payload = encode_event(&ev).unwrap();
            assert_eq!(event_trigger(ev.kind(), &payload), Ok("github-push"));
            if state != BodyJson::Undecided {
                let mut bad = payload.clone();
                bad[0] = 3;
                assert!(event_trigger(ev.kind(), &bad).is_err(), "flags 3");
                assert!(event_trigger(ev.kind(), &payload[..1]).is_err());
            }
        }
    }
}

/// The rule against `serde_json` (the parser a receiver may well use): on random near-JSON
/// inputs, shallower than `json::MAX_DEPTH`, a body is JSON exactly when `serde_json` parses it
/// and it is valid UTF-8.
#[test]
fn the_decision_agrees_with_serde_json_on_utf8_near_json_inputs() {
    const TOKENS: &[&[u8]] = &[
        b"{",
        b"}",
        b"[",
        b"]",
        b",",
        b":",
        b"\"",
        b"\\",
        b"\\u",
        b"\\n",
        b"0",
        b"1",
        b"9",
        b"e",
        b"E",
        b".",
        b"-",
        b"+",
        b"true",
        b"false",
        b"null",
        b"tru",
        b" ",
        b"\t",
        b"\n",
        b"x",
        "\u{e9}".as_bytes(),
        b"\xff",
        b"\x1f",
        b"\"k\":",
        b"\"abcdefghijklmnopqrstuvwxyz0123\"",
        b"A",
        b"f",
    ];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut json, mut total) = (0, 0);
    for _ in 0..200_000 {
        let mut body = Vec::new();
        // Half the inputs are a valid document with one token spliced in somewhere.
        if rng.next() % 2 == 0 {
            body.extend_from_slice(
                b"{\"a\":[1,-2.5e3,\"s\\\"t\\u00e9\"],\"b\":{\"c\":null,\"d\":true}}",
            );
            let at = (rng.next() as usize) % (body.len() + 1);
            let t = TOKENS[(rng.next() as usize) % TOKENS.len()];
            if rng.next() % 3 == 0 {
                body.splice(at..(at + 1).min(body.len()), t.iter().copied());
            } else {
                body.splice(at..at, t.iter().copied());
            }
        } else {
            for _ in 0..(rng.next() % 24) {
                body.extend_from_slice(TOKENS[(rng.next() as usize) % TOKENS.len()]);
            }
        }
        let serde = serde_json::from_slice::<serde::de::IgnoredAny>(&body).is_ok()
            && std::str::from_utf8(&body).is_ok();
        let ours = BodyJson::decide(&body) == BodyJson::Json;
        assert_eq!(ours, serde, "{:?}", String::from_utf8_lossy(&body));
        json += usize::from(ours);
        total += 1;
    }
    // The inputs exercise both answers, not one.
    assert!(
        json > total / 20 && json < total - total / 20,
        "{json} of {total}"
    );
}
