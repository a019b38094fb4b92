//! Server request reader: arbitrary bytes, cut at arbitrary points, must give the same events
//! as the whole input at once (the resumability contract), never panic, and respect the limits.
//! The cut run hands each finished head back for reuse (as the server's loop does), so a reused
//! head that kept anything of its previous request shows as a difference too.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::net::http::{Limits, ReadEvent, RequestReader};

/// Events as comparable text (the reader's types have no `PartialEq`).
fn run(input: &[u8], cuts: &[usize], limits: &Limits, reuse: bool) -> Vec<String> {
    let mut reader = RequestReader::new(limits.clone());
    let mut spare = None;
    let mut buf = Vec::new();
    let mut out = Vec::new();
    let mut at = 0;
    for &cut in cuts.iter().chain(std::iter::once(&input.len())) {
        let cut = cut.clamp(at, input.len());
        buf.extend_from_slice(&input[at..cut]);
        at = cut;
        for _ in 0..=input.len() {
            match reader.poll_reusing(&mut buf, &mut spare) {
                ReadEvent::Incomplete => break,
                ReadEvent::HeadReady { expect_continue } => {
                    // Not compared: whether the head is reported before the body depends on
                    // where the input is cut.
                    let _ = expect_continue;
                    assert!(reader.pending_head().is_some());
                }
                ReadEvent::Request(r) => {
                    assert!(r.body.len() as u64 <= limits.max_body_bytes);
                    out.push(format!("{r:?}"));
                    if reuse {
                        spare = Some(r.head);
                    }
                }
                ReadEvent::Error(e) => {
                    out.push(format!("error {e:?}"));
                    return out;
                }
            }
        }
        assert!(buf.len() <= limits.max_head_bytes + input.len());
    }
    out
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let (ctl, input) = data.split_at(4);
    // Small limits from the control bytes, so every bound is reachable.
    let limits = Limits {
        max_head_bytes: 64 + usize::from(ctl[0]) * 4,
        max_headers: 1 + usize::from(ctl[1] % 16),
        max_uri_bytes: 8 + usize::from(ctl[2]),
        max_body_bytes: u64::from(ctl[3]) * 16,
        max_chunk_line_bytes: 16 + usize::from(ctl[0] % 64),
    };
    let whole = run(input, &[], &limits, false);
    let step = 1 + usize::from(ctl[1] >> 4);
    let cuts: Vec<usize> = (0..input.len()).step_by(step).collect();
    let split = run(input, &cuts, &limits, true);
    assert_eq!(
        whole, split,
        "events depend on where the input was cut or on head reuse"
    );
});
