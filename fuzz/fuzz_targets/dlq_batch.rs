//! DLQ batch files (`dispatch::dlq_batch::scan`): arbitrary bytes never panic; every record found
//! lies inside the file, in order, without overlap; an undamaged one decodes to an entry with the
//! id it was found under; a damaged one names a well-formed id.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::dispatch::dlq::batch::{scan, HEADER_BYTES};
use sluice::dispatch::dlq::{check_record, decode_entry, valid_id};

fuzz_target!(|data: &[u8]| {
    let s = scan(data, check_record);
    let mut at = HEADER_BYTES as u64;
    for f in &s.records {
        assert_eq!(f.offset, at, "records are back to back");
        let end = f.offset + u64::from(f.len);
        assert!(end <= data.len() as u64);
        let rec = &data[f.offset as usize..end as usize];
        assert!(valid_id(&f.id));
        if f.damage.is_none() {
            let e = decode_entry(rec).expect("an undamaged record decodes");
            assert_eq!(e.id, f.id);
        }
        at = end;
    }
    if let Some((offset, _)) = &s.tail {
        assert!(*offset <= data.len() as u64);
    }
});
