//! Progress of long offline commands (`wal verify`, `wal inspect`, `dlq replay --all`): a bar on
//! stderr with the count, the rate and (when known) the total, drawn by `indicatif` — only when
//! stderr is a terminal. Piped or redirected, the commands write no progress byte at all: their
//! stdout is data (`wal inspect` JSON lines) and their stderr is read by scripts.
//!
//! The library functions take a `&mut dyn Progress`; [`Silent`] is the no-op the tests and the
//! fuzz targets pass, [`on_stderr`] is what the binary passes.

#![forbid(unsafe_code)]

use std::io::IsTerminal;
use std::time::Duration;

/// Receives the progress of one long operation.
pub trait Progress {
    /// A new phase: `label` (e.g. `"wal verify core-0"`), `total` units if known.
    fn begin(&mut self, label: &str, total: Option<u64>);
    /// `n` more units done.
    fn advance(&mut self, n: u64);
    /// The phase is over (the bar stays on screen with its final count).
    fn end(&mut self);
}

/// No progress output.
#[derive(Debug, Default)]
pub struct Silent;

impl Progress for Silent {
    fn begin(&mut self, _: &str, _: Option<u64>) {}
    fn advance(&mut self, _: u64) {}
    fn end(&mut self) {}
}

/// An `indicatif` bar on stderr; `unit` names what is counted (`"records"`, `"events"`).
#[derive(Debug)]
pub struct StderrBar {
    unit: &'static str,
    bar: Option<indicatif::ProgressBar>,
}

impl StderrBar {
    pub fn new(unit: &'static str) -> StderrBar {
        StderrBar { unit, bar: None }
    }
}

impl Progress for StderrBar {
    fn begin(&mut self, label: &str, total: Option<u64>) {
        self.end();
        let target = indicatif::ProgressDrawTarget::stderr_with_hz(10);
        let unit = self.unit;
        let (bar, template) = match total {
            Some(n) => (
                indicatif::ProgressBar::with_draw_target(Some(n), target),
                format!("{{msg}} [{{bar:30}}] {{pos}}/{{len}} {unit} ({{per_sec}}, eta {{eta}})"),
            ),
            None => (
                indicatif::ProgressBar::with_draw_target(None, target),
                format!("{{spinner}} {{msg}} {{pos}} {unit} ({{per_sec}}, {{elapsed}})"),
            ),
        };
        if let Ok(style) = indicatif::ProgressStyle::with_template(&template) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_message(label.to_string());
        bar.enable_steady_tick(Duration::from_millis(200));
        self.bar = Some(bar);
    }

    fn advance(&mut self, n: u64) {
        if let Some(b) = &self.bar {
            b.inc(n);
        }
    }

    fn end(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish();
        }
    }
}

impl Drop for StderrBar {
    fn drop(&mut self) {
        self.end();
    }
}

/// A bar on stderr counting `unit` when stderr is a terminal; [`Silent`] otherwise.
pub fn on_stderr(unit: &'static str) -> Box<dyn Progress> {
    if std::io::stderr().is_terminal() {
        Box::new(StderrBar::new(unit))
    } else {
        Box::new(Silent)
    }
}
