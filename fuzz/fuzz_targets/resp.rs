//! The RESP2 reply parser of the shared-budget client (`sluice::cluster::resp`): arbitrary
//! bytes never panic, a complete reply reports a length within the input, every shorter prefix
//! of it is "incomplete" (never an error and never a different reply), and the reply parses
//! the same from exactly its own bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::cluster::resp::parse;

fuzz_target!(|data: &[u8]| {
    let data = &data[..data.len().min(4096)];
    if let Ok(Some((reply, used))) = parse(data) {
        assert!(used > 0 && used <= data.len());
        assert_eq!(parse(&data[..used]), Ok(Some((reply, used))));
        for cut in 0..used {
            assert_eq!(
                parse(&data[..cut]),
                Ok(None),
                "prefix of {cut} of {used} bytes"
            );
        }
    }
});
