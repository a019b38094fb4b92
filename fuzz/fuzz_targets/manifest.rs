//! Manifest parser and validation: any text either builds a config or is refused with an
//! error; never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::config::{Config, Overrides};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(raw) = Config::parse_manifest(text) else {
        return;
    };
    // Environment: a few of the variables the config reads, with values from the input's end.
    let tail = text.rsplit('\n').next().unwrap_or("").to_string();
    let env = move |k: &str| (k.starts_with("HARN_") && !tail.is_empty()).then(|| tail.clone());
    let _ = Config::build(raw, &env, &Overrides::default());
});
