//! Scenario reports for `benches/scenarios/`: merges the per-second data of one run into a
//! timeline CSV, and draws timeline CSVs as SVG line charts (hand-written SVG, no plotting crate).
//!
//! ```text
//! scenario_report merge --samples S.csv --loadgen L.csv --mock STATS.json --mock-offset K --out T.csv
//! scenario_report join --in NAME=T.csv [--in NAME=T.csv ...] --out J.csv
//! scenario_report plot --in T.csv --out T.svg --title TITLE [--mark 10,40] [--xlabel TEXT]
//!                      --panel 'Panel title|col[:label],col[:label]|y unit' ...
//! ```
//!
//! `join` puts several timelines side by side on their first column, each column prefixed with
//! `NAME_`. `plot` draws every panel against the first column of the CSV.
//!
//! `merge` inputs:
//! - `--samples`: the runner's `/metrics` + `/proc` sampler, one row per sample with a header;
//!   column `t` is seconds (fractional) since the load started. Gauges keep the last sample of
//!   each second; columns ending in `_total` are cumulative and become per-second deltas (the
//!   `_total` suffix is dropped).
//! - `--loadgen`: `sluice loadgen --timeline-out` CSV (columns kept, prefixed `lg_`).
//! - `--mock`: `GET /stats` JSON of `sluice mock-downstream`; its second `s` is the timeline's
//!   second `s - K` (K = whole seconds between the mock's start and the load's start). Columns
//!   `mock_requests`, `mock_max_concurrency`, `mock_<status>`.
//!
//! Bounded by its inputs: at most one row per second of the run.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::ExitCode;

type Table = BTreeMap<i64, BTreeMap<String, f64>>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("merge") => merge(&args[1..]),
        Some("join") => join(&args[1..]),
        Some("plot") => plot(&args[1..]),
        _ => Err("usage: scenario_report merge|join|plot ... (see the file header)".into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("scenario_report: {e}");
            ExitCode::from(2)
        }
    }
}

/// `--key value` pairs; repeated keys keep every value in order.
fn options(args: &[String]) -> Result<BTreeMap<String, Vec<String>>, String> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut it = args.iter();
    while let Some(k) = it.next() {
        let key = k
            .strip_prefix("--")
            .ok_or_else(|| format!("expected --option, got {k:?}"))?;
        let v = it.next().ok_or_else(|| format!("--{key} needs a value"))?;
        out.entry(key.to_string()).or_default().push(v.clone());
    }
    Ok(out)
}

fn one<'a>(o: &'a BTreeMap<String, Vec<String>>, key: &str) -> Result<&'a str, String> {
    o.get(key)
        .and_then(|v| v.last())
        .map(String::as_str)
        .ok_or_else(|| format!("--{key} is required"))
}

fn read(path: &str) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))
}

/// Header and rows of a CSV of numbers (empty or unparsable cells are skipped).
fn parse_csv(text: &str) -> (Vec<String>, Vec<Vec<Option<f64>>>) {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<String> = lines
        .next()
        .map(|h| h.split(',').map(|s| s.trim().to_string()).collect())
        .unwrap_or_default();
    let rows = lines
        .map(|l| l.split(',').map(|c| c.trim().parse::<f64>().ok()).collect())
        .collect();
    (header, rows)
}

fn merge(args: &[String]) -> Result<(), String> {
    let o = options(args)?;
    let mut table: Table = BTreeMap::new();

    // Sampler: gauges (last of each second) and cumulative counters (per-second deltas).
    let (header, rows) = parse_csv(&read(one(&o, "samples")?)?);
    let t_col = header
        .iter()
        .position(|h| h == "t")
        .ok_or("samples: no column t")?;
    let mut last_of_second: BTreeMap<i64, Vec<Option<f64>>> = BTreeMap::new();
    for row in rows {
        if let Some(Some(t)) = row.get(t_col) {
            if *t >= 0.0 {
                last_of_second.insert(t.floor() as i64, row);
            }
        }
    }
    let mut previous: Option<&Vec<Option<f64>>> = None;
    for (second, row) in &last_of_second {
        let cells = table.entry(*second).or_default();
        for (i, name) in header.iter().enumerate() {
            let Some(Some(v)) = row.get(i) else { continue };
            if i == t_col {
                continue;
            }
            if let Some(base) = name.strip_suffix("_total") {
                if let Some(Some(p)) = previous.and_then(|p| p.get(i)) {
                    cells.insert(base.to_string(), v - p);
                }
            } else {
                cells.insert(name.clone(), *v);
            }
        }
        previous = Some(row);
    }

    // Loadgen timeline.
    let (header, rows) = parse_csv(&read(one(&o, "loadgen")?)?);
    for row in rows {
        let Some(Some(second)) = row.first() else {
            continue;
        };
        let cells = table.entry(*second as i64).or_default();
        for (name, v) in header.iter().zip(&row).skip(1) {
            if let Some(v) = v {
                cells.insert(format!("lg_{name}"), *v);
            }
        }
    }

    // Mock downstream per-second stats.
    let offset: i64 = one(&o, "mock-offset")?
        .parse()
        .map_err(|_| "--mock-offset must be an integer")?;
    let stats: serde_json::Value =
        serde_json::from_str(&read(one(&o, "mock")?)?).map_err(|e| format!("--mock: {e}"))?;
    let seconds = stats["per_second"].as_array().cloned().unwrap_or_default();
    let mut statuses: Vec<String> = Vec::new();
    for s in &seconds {
        if let Some(map) = s["status"].as_object() {
            for k in map.keys() {
                if !statuses.contains(k) {
                    statuses.push(k.clone());
                }
            }
        }
    }
    for s in &seconds {
        let Some(second) = s["second"].as_i64() else {
            continue;
        };
        let second = second - offset;
        if second < 0 {
            continue;
        }
        let cells = table.entry(second).or_default();
        let num = |v: &serde_json::Value| v.as_f64().unwrap_or(0.0);
        cells.insert("mock_requests".into(), num(&s["requests"]));
        cells.insert("mock_max_concurrency".into(), num(&s["max_concurrency"]));
        for k in &statuses {
            cells.insert(format!("mock_{k}"), num(&s["status"][k.as_str()]));
        }
    }

    write_table(&table, one(&o, "out")?)
}

fn join(args: &[String]) -> Result<(), String> {
    let o = options(args)?;
    let mut table: Table = BTreeMap::new();
    for spec in o.get("in").ok_or("--in NAME=FILE is required")? {
        let (name, path) = spec
            .split_once('=')
            .ok_or_else(|| format!("--in {spec:?}: expected NAME=FILE"))?;
        let (header, rows) = parse_csv(&read(path)?);
        for row in rows {
            let Some(Some(x)) = row.first() else { continue };
            let cells = table.entry(*x as i64).or_default();
            for (col, v) in header.iter().zip(&row).skip(1) {
                if let Some(v) = v {
                    cells.insert(format!("{name}_{col}"), *v);
                }
            }
        }
    }
    write_table(&table, one(&o, "out")?)
}

fn write_table(table: &Table, path: &str) -> Result<(), String> {
    let mut columns: Vec<&String> = Vec::new();
    for cells in table.values() {
        for k in cells.keys() {
            if !columns.contains(&k) {
                columns.push(k);
            }
        }
    }
    columns.sort_by_key(|c| (column_group(c), c.to_string()));
    let mut out = String::from("second");
    for c in &columns {
        let _ = write!(out, ",{c}");
    }
    out.push('\n');
    for (second, cells) in table {
        let _ = write!(out, "{second}");
        for c in &columns {
            match cells.get(*c) {
                Some(v) if v.fract() == 0.0 => {
                    let _ = write!(out, ",{v:.0}");
                }
                Some(v) => {
                    let _ = write!(out, ",{v:.3}");
                }
                None => out.push(','),
            }
        }
        out.push('\n');
    }
    std::fs::write(path, out).map_err(|e| format!("{path}: {e}"))
}

/// Column order: load generator, sluice, downstream.
fn column_group(name: &str) -> u8 {
    if name.starts_with("lg_") {
        0
    } else if name.starts_with("mock_") {
        2
    } else {
        1
    }
}

// ---------------------------------------------------------------------------------------------
// SVG line charts.
// ---------------------------------------------------------------------------------------------

const WIDTH: f64 = 960.0;
const PANEL_HEIGHT: f64 = 190.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const PANEL_GAP: f64 = 62.0;
const PALETTE: &[&str] = &[
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

struct Series {
    label: String,
    points: Vec<(f64, f64)>,
}

struct Panel {
    title: String,
    unit: String,
    series: Vec<Series>,
}

fn plot(args: &[String]) -> Result<(), String> {
    let o = options(args)?;
    let (header, rows) = parse_csv(&read(one(&o, "in")?)?);
    let column = |name: &str| -> Result<Vec<(f64, f64)>, String> {
        let i = header
            .iter()
            .position(|h| h == name)
            .ok_or_else(|| format!("no column {name:?} in {}", header.join(",")))?;
        Ok(rows
            .iter()
            .filter_map(|r| Some((r.first().copied()??, r.get(i).copied()??)))
            .collect())
    };
    let mut panels = Vec::new();
    for spec in o.get("panel").ok_or("--panel is required")? {
        let mut parts = spec.split('|');
        let title = parts.next().unwrap_or("").to_string();
        let cols = parts.next().ok_or("--panel 'title|cols|unit'")?;
        let unit = parts.next().unwrap_or("").to_string();
        let mut series = Vec::new();
        for c in cols.split(',') {
            let (name, label) = c.split_once(':').unwrap_or((c, c));
            series.push(Series {
                label: label.to_string(),
                points: column(name)?,
            });
        }
        panels.push(Panel {
            title,
            unit,
            series,
        });
    }
    let marks: Vec<f64> = match o.get("mark") {
        Some(v) => v
            .iter()
            .flat_map(|m| m.split(','))
            .map(|m| m.parse().map_err(|_| format!("--mark {m:?}")))
            .collect::<Result<_, _>>()?,
        None => Vec::new(),
    };
    let xlabel = o
        .get("xlabel")
        .and_then(|v| v.last())
        .map_or("seconds since the load started", String::as_str);
    let svg = render(one(&o, "title")?, xlabel, &panels, &marks);
    let out = one(&o, "out")?;
    std::fs::write(out, svg).map_err(|e| format!("{out}: {e}"))
}

/// A "nice" tick step (1, 2 or 5 × 10^k) giving about `n` intervals up to `max`.
fn nice_step(max: f64, n: f64) -> f64 {
    let raw = (max / n).max(f64::MIN_POSITIVE);
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let m = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    m * mag
}

fn fmt_tick(v: f64) -> String {
    if v >= 1e6 {
        format!("{}M", v / 1e6)
    } else if v >= 1e4 {
        format!("{}k", v / 1e3)
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn render(title: &str, xlabel: &str, panels: &[Panel], marks: &[f64]) -> String {
    let height = TOP + panels.len() as f64 * (PANEL_HEIGHT + PANEL_GAP) + 10.0;
    let x_max = panels
        .iter()
        .flat_map(|p| p.series.iter().flat_map(|s| s.points.iter().map(|p| p.0)))
        .fold(1.0f64, f64::max);
    let x_step = nice_step(x_max, 12.0);
    let x_end = (x_max / x_step).ceil() * x_step;
    let plot_w = WIDTH - LEFT - RIGHT;
    let sx = |x: f64| LEFT + x / x_end * plot_w;

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(
        s,
        r#"<rect width="100%" height="100%" fill="white"/><text x="{LEFT}" y="22" font-size="15" font-weight="bold">{}</text>"#,
        escape(title)
    );
    for (k, panel) in panels.iter().enumerate() {
        let top = TOP + k as f64 * (PANEL_HEIGHT + PANEL_GAP) + 32.0;
        let bottom = top + PANEL_HEIGHT;
        let y_max = panel
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .fold(0.0f64, f64::max);
        let y_step = nice_step(if y_max > 0.0 { y_max } else { 1.0 }, 4.0);
        // Headroom, so a series at its maximum does not sit on the frame.
        let y_end = ((y_max * 1.08 / y_step).ceil() * y_step).max(y_step);
        let sy = |y: f64| bottom - y / y_end * PANEL_HEIGHT;
        let _ = writeln!(
            s,
            r#"<text x="{LEFT}" y="{}" font-size="12" font-weight="bold">{}</text>"#,
            top - 20.0,
            escape(&panel.title)
        );
        // Grid and axes.
        let mut y = 0.0;
        while y <= y_end + y_step / 2.0 {
            let _ = writeln!(
                s,
                r##"<line x1="{LEFT}" x2="{}" y1="{py:.1}" y2="{py:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
                WIDTH - RIGHT,
                LEFT - 5.0,
                sy(y) + 4.0,
                fmt_tick(y),
                py = sy(y)
            );
            y += y_step;
        }
        let mut x = 0.0;
        while x <= x_end + x_step / 2.0 {
            let _ = writeln!(
                s,
                r##"<line x1="{px:.1}" x2="{px:.1}" y1="{top}" y2="{bottom}" stroke="#eee"/><text x="{px:.1}" y="{}" text-anchor="middle">{}</text>"##,
                bottom + 13.0,
                fmt_tick(x),
                px = sx(x)
            );
            x += x_step;
        }
        for m in marks {
            let _ = writeln!(
                s,
                r##"<line x1="{px:.1}" x2="{px:.1}" y1="{top}" y2="{bottom}" stroke="#888" stroke-dasharray="4 3"/>"##,
                px = sx(*m)
            );
        }
        let _ = writeln!(
            s,
            r##"<rect x="{LEFT}" y="{top}" width="{plot_w}" height="{PANEL_HEIGHT}" fill="none" stroke="#444"/>"##
        );
        let _ = writeln!(
            s,
            r#"<text transform="translate(14,{:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
            (top + bottom) / 2.0,
            escape(&panel.unit)
        );
        if k + 1 == panels.len() {
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
                LEFT + plot_w / 2.0,
                bottom + 28.0,
                escape(xlabel)
            );
        }
        // Series and legend.
        let mut legend_x = WIDTH - RIGHT - 8.0;
        for (i, series) in panel.series.iter().enumerate().rev() {
            let color = PALETTE[i % PALETTE.len()];
            let mut path = String::new();
            for (j, (x, y)) in series.points.iter().enumerate() {
                let _ = write!(
                    path,
                    "{}{:.1},{:.1}",
                    if j == 0 { "" } else { " " },
                    sx(*x),
                    sy(*y)
                );
            }
            let _ = writeln!(
                s,
                r#"<polyline fill="none" stroke="{color}" stroke-width="1.6" points="{path}"/>"#
            );
            let w = 7.0 * series.label.chars().count() as f64 + 24.0;
            legend_x -= w;
            let _ = writeln!(
                s,
                r#"<line x1="{:.1}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="{color}" stroke-width="3"/><text x="{:.1}" y="{:.1}">{}</text>"#,
                legend_x,
                legend_x + 14.0,
                top - 10.0,
                top - 10.0,
                legend_x + 18.0,
                top - 6.0,
                escape(&series.label)
            );
        }
    }
    s.push_str("</svg>\n");
    s
}
