//! Client response reader: arbitrary bytes at arbitrary cut points (plus EOF at the end) give
//! the same events as the whole input at once, never panic, and keep the body bounds.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::net::http::client::{ClientLimits, ResponseEvent, ResponseReader};

fn run(input: &[u8], cuts: &[usize], limits: &ClientLimits) -> Vec<ResponseEvent> {
    let mut reader = ResponseReader::new(limits.clone());
    let mut buf = Vec::new();
    let mut out = Vec::new();
    let mut at = 0;
    for &cut in cuts.iter().chain(std::iter::once(&input.len())) {
        let cut = cut.clamp(at, input.len());
        buf.extend_from_slice(&input[at..cut]);
        at = cut;
        for _ in 0..=input.len() {
            match reader.poll(&mut buf) {
                ResponseEvent::Incomplete => break,
                ev @ ResponseEvent::Error(_) => {
                    out.push(ev);
                    return out;
                }
                ResponseEvent::Response(r) => {
                    assert!(r.body_prefix.len() <= limits.max_body_keep);
                    assert!(r.body_len <= limits.max_body_bytes);
                    out.push(ResponseEvent::Response(r));
                }
            }
        }
    }
    out.push(reader.on_eof());
    out
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let (ctl, input) = data.split_at(3);
    let limits = ClientLimits {
        max_head_bytes: 64 + usize::from(ctl[0]) * 4,
        max_headers: 1 + usize::from(ctl[1] % 16),
        max_body_keep: usize::from(ctl[2]),
        max_body_bytes: u64::from(ctl[2]) * 32,
    };
    let whole = run(input, &[], &limits);
    let step = 1 + usize::from(ctl[1] >> 4);
    let cuts: Vec<usize> = (0..input.len()).step_by(step).collect();
    assert_eq!(
        whole,
        run(input, &cuts, &limits),
        "events depend on where the input was cut"
    );
});
