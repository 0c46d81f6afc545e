//! Reporting measurements: ratios to the best peer, the table (with rates and extras
//! under it) and the `--json` lines.

use std::collections::BTreeMap;
use std::io::{self, Write};

use serde::Serialize;

use crate::harness::{is_trellis, Measurement};

/// For each measurement (same order), its median divided by the fastest successful peer
/// median of the same suite and scenario; `None` if it failed or no peer succeeded.
pub fn ratios(measurements: &[Measurement]) -> Vec<Option<f64>> {
    let mut best: BTreeMap<(&str, &str), f64> = BTreeMap::new();
    for m in measurements {
        if let (Ok(ns), false) = (&m.median_ns, is_trellis(&m.system)) {
            let entry = best.entry((m.suite.as_str(), m.scenario.as_str())).or_insert(*ns);
            if *ns < *entry {
                *entry = *ns;
            }
        }
    }
    measurements
        .iter()
        .map(|m| {
            let ns = m.median_ns.as_ref().ok()?;
            let best = best.get(&(m.suite.as_str(), m.scenario.as_str()))?;
            (*best > 0.0).then(|| ns / best)
        })
        .collect()
}

/// One JSON line of the `--json` output.
#[derive(Serialize)]
struct JsonLine<'a> {
    suite: &'a str,
    scenario: &'a str,
    system: &'a str,
    median_ns: Option<u64>,
    ratio_vs_best_peer: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    p99_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    peak_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    target_ns: Option<u64>,
    /// `"median"` or `"p99"`: what `target_ns` is for.
    #[serde(skip_serializing_if = "Option::is_none")]
    target_of: Option<&'static str>,
    /// A target for the 99th percentile beside the median's.
    #[serde(skip_serializing_if = "Option::is_none")]
    p99_target_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
}

/// Writes one JSON object per measurement per line: `suite`, `scenario`, `system`,
/// `median_ns`, `ratio_vs_best_peer` (relative to the fastest peer of that scenario;
/// `null` when unknown), plus `p99_ns`, `peak_bytes`, `target_ns` (with `target_of`:
/// `median` or `p99`) and `p99_target_ns` (a tail target beside the median's) where the
/// scenario measures them, and `error` for a failed measurement (whose median is `null`).
pub fn write_json(out: &mut impl Write, measurements: &[Measurement]) -> io::Result<()> {
    for (m, ratio) in measurements.iter().zip(ratios(measurements)) {
        let line = JsonLine {
            suite: &m.suite,
            scenario: &m.scenario,
            system: &m.system,
            median_ns: m.median_ns.as_ref().ok().map(|ns| ns.round() as u64),
            ratio_vs_best_peer: ratio.map(|r| (r * 1000.0).round() / 1000.0),
            p99_ns: m.extra.p99_ns.map(|ns| ns.round() as u64),
            peak_bytes: m.extra.peak_bytes,
            target_ns: m.extra.target_ns.map(|ns| ns.round() as u64),
            target_of: m.extra.target_ns.map(|_| if m.extra.target_is_p99 { "p99" } else { "median" }),
            p99_target_ns: m.extra.p99_target_ns.map(|ns| ns.round() as u64),
            error: m.median_ns.as_ref().err().map(String::as_str),
        };
        let text = serde_json::to_string(&line).map_err(io::Error::other)?;
        writeln!(out, "{text}")?;
    }
    Ok(())
}

/// Formats nanoseconds with a readable unit (`ns`, `µs`, `ms`, `s`).
pub fn format_ns(ns: f64) -> String {
    if ns < 1e3 {
        format!("{ns:.0} ns")
    } else if ns < 1e6 {
        format!("{:.2} µs", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

/// Formats a rate with thousands separators and no decimals (`41,234`).
pub fn format_rate(per_second: f64) -> String {
    let digits = format!("{:.0}", per_second.max(0.0));
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// Writes one table per suite: a row per scenario, a column per system holding the median
/// and its ratio to the best peer, and a last column per Trellis system with its ratio to
/// the best peer (`n/a` when there is no Trellis system yet). Scenarios measured per
/// operation ([`Measurement::rate_unit`]) get a throughput line under the table.
pub fn write_table(out: &mut impl Write, measurements: &[Measurement]) -> io::Result<()> {
    let ratios = ratios(measurements);
    let suites = unique(measurements.iter().map(|m| m.suite.as_str()));
    for suite in suites {
        let rows: Vec<(&Measurement, Option<f64>)> =
            measurements.iter().zip(ratios.iter().copied()).filter(|(m, _)| m.suite == suite).collect();
        let scenarios = unique(rows.iter().map(|(m, _)| m.scenario.as_str()));
        let systems = unique(rows.iter().map(|(m, _)| m.system.as_str()));
        let ours: Vec<&str> = systems.iter().copied().filter(|s| is_trellis(s)).collect();

        let mut header = vec!["scenario".to_string()];
        header.extend(systems.iter().map(|s| s.to_string()));
        if ours.is_empty() {
            header.push("trellis / best peer".to_string());
        } else {
            header.extend(ours.iter().map(|s| format!("{s} / best peer")));
        }

        let mut table = vec![header];
        for scenario in &scenarios {
            let find = |system: &str| rows.iter().find(|(m, _)| m.scenario == *scenario && m.system == system);
            let mut line = vec![scenario.to_string()];
            for system in &systems {
                line.push(match find(system) {
                    None => "-".to_string(),
                    Some((m, ratio)) => match (&m.median_ns, ratio) {
                        (Err(_), _) => "FAILED".to_string(),
                        (Ok(ns), Some(r)) => format!("{} ({r:.2}x)", format_ns(*ns)),
                        (Ok(ns), None) => format_ns(*ns),
                    },
                });
            }
            if ours.is_empty() {
                line.push("n/a".to_string());
            } else {
                for system in &ours {
                    line.push(match find(system) {
                        Some((_, Some(r))) => format!("{r:.2}x"),
                        _ => "-".to_string(),
                    });
                }
            }
            table.push(line);
        }

        writeln!(out, "suite: {suite}  (median per iteration; (Nx) = ratio to the fastest peer)")?;
        write_grid(out, &table)?;
        let failures: Vec<&Measurement> = rows.iter().map(|(m, _)| *m).filter(|m| m.median_ns.is_err()).collect();
        for m in failures {
            if let Err(e) = &m.median_ns {
                writeln!(out, "  FAILED {}/{}: {e}", m.scenario, m.system)?;
            }
        }
        write_rates(out, &scenarios, &rows)?;
        write_extras(out, &rows)?;
        writeln!(out)?;
    }
    Ok(())
}

/// Writes, for each scenario with a [`Measurement::rate_unit`], one line with every
/// successful system's operations per second (`1e9 / median`).
fn write_rates(out: &mut impl Write, scenarios: &[&str], rows: &[(&Measurement, Option<f64>)]) -> io::Result<()> {
    let width = scenarios.iter().map(|s| s.chars().count()).max().unwrap_or(0);
    for scenario in scenarios {
        let rates: Vec<String> = rows
            .iter()
            .filter(|(m, _)| m.scenario == *scenario)
            .filter_map(|(m, _)| {
                let (ns, unit) = (m.median_ns.as_ref().ok()?, m.rate_unit?);
                (*ns > 0.0)
                    .then(|| format!("{} {}s/s", format_rate(1e9 / ns), unit))
                    .map(|rate| format!("{}: {rate}", m.system))
            })
            .collect();
        if !rates.is_empty() {
            writeln!(out, "  {scenario:<width$}  {}", rates.join(" | "))?;
        }
    }
    Ok(())
}

/// Writes one line per measurement that has a tail, a memory peak or a target: `p99`,
/// `peak` (MiB) and whether the median met the target.
fn write_extras(out: &mut impl Write, rows: &[(&Measurement, Option<f64>)]) -> io::Result<()> {
    for (m, _) in rows {
        let Ok(median) = m.median_ns else { continue };
        let mut parts = Vec::new();
        if let Some(p99) = m.extra.p99_ns {
            parts.push(format!("p99 {}", format_ns(p99)));
        }
        if let Some(bytes) = m.extra.peak_bytes {
            parts.push(format!("peak {:.1} MiB", bytes as f64 / (1024.0 * 1024.0)));
        }
        if let Some(target) = m.extra.target_ns {
            let (what, measured) = match (m.extra.target_is_p99, m.extra.p99_ns) {
                (true, Some(p99)) => ("p99", p99),
                _ => ("median", median),
            };
            let verdict = if measured <= target { "met" } else { "missed" };
            parts.push(format!("target {what} ≤ {}: {verdict} ({:.2}x)", format_ns(target), measured / target));
        }
        if let (Some(target), Some(p99)) = (m.extra.p99_target_ns, m.extra.p99_ns) {
            let verdict = if p99 <= target { "met" } else { "missed" };
            parts.push(format!("target p99 ≤ {}: {verdict} ({:.2}x)", format_ns(target), p99 / target));
        }
        if !parts.is_empty() {
            writeln!(out, "  {} {}: {}", m.scenario, m.system, parts.join(", "))?;
        }
    }
    Ok(())
}

/// Writes rows of cells as an aligned grid (first column left-aligned, others right).
fn write_grid(out: &mut impl Write, table: &[Vec<String>]) -> io::Result<()> {
    let columns = table.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| table.iter().filter_map(|r| r.get(c)).map(|s| s.chars().count()).max().unwrap_or(0))
        .collect();
    for (i, row) in table.iter().enumerate() {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(
                |(c, cell)| {
                    if c == 0 {
                        format!("{cell:<w$}", w = widths[c])
                    } else {
                        format!("{cell:>w$}", w = widths[c])
                    }
                },
            )
            .collect();
        writeln!(out, "{}", cells.join(" | "))?;
        if i == 0 {
            let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
            writeln!(out, "{}", rule.join("-+-"))?;
        }
    }
    Ok(())
}

/// The distinct items of `items`, in order of first appearance.
fn unique<'a>(items: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut seen = Vec::new();
    for item in items {
        if !seen.contains(&item) {
            seen.push(item);
        }
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::Extra;

    fn m(scenario: &str, system: &str, ns: Result<f64, String>) -> Measurement {
        Measurement {
            suite: "s".into(),
            scenario: scenario.into(),
            system: system.into(),
            median_ns: ns,
            samples: 1,
            rate_unit: None,
            extra: Extra::default(),
        }
    }

    #[test]
    fn ratios_are_relative_to_the_fastest_peer_only() {
        let ms = vec![
            m("a", "trellis", Ok(50.0)),
            m("a", "p1", Ok(200.0)),
            m("a", "p2", Ok(100.0)),
            m("b", "trellis", Ok(10.0)),
            m("b", "p1", Err("boom".into())),
        ];
        assert_eq!(ratios(&ms), vec![Some(0.5), Some(2.0), Some(1.0), None, None]);
    }

    #[test]
    fn json_lines_have_the_documented_fields() {
        let ms = vec![m("a", "p1", Ok(200.0)), m("a", "p2", Err("bad".into()))];
        let mut out = Vec::new();
        write_json(&mut out, &ms).expect("write to a Vec");
        let text = String::from_utf8(out).expect("utf-8");
        let lines: Vec<serde_json::Value> =
            text.lines().map(|l| serde_json::from_str(l).expect("valid JSON line")).collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["median_ns"], 200);
        assert_eq!(lines[0]["ratio_vs_best_peer"], 1.0);
        assert!(lines[1]["median_ns"].is_null());
        assert_eq!(lines[1]["error"], "bad");
    }

    #[test]
    fn table_mentions_every_system_and_failure() {
        let ms = vec![m("a", "p1", Ok(2000.0)), m("a", "p2", Err("bad".into()))];
        let mut out = Vec::new();
        write_table(&mut out, &ms).expect("write to a Vec");
        let text = String::from_utf8(out).expect("utf-8");
        assert!(text.contains("p1") && text.contains("p2") && text.contains("FAILED"));
        assert!(text.contains("2.00 µs (1.00x)"));
    }

    #[test]
    fn rates_are_shown_under_the_table_but_not_in_json() {
        let ms = vec![
            m("commit", "trellis", Ok(25_000.0)).per("commit"),
            m("commit", "p1", Ok(50_000.0)).per("commit"),
            m("plain", "p1", Ok(10.0)),
        ];
        let mut table = Vec::new();
        write_table(&mut table, &ms).expect("write to a Vec");
        let text = String::from_utf8(table).expect("utf-8");
        assert!(text.contains("trellis: 40,000 commits/s | p1: 20,000 commits/s"), "{text}");
        assert!(!text.lines().any(|l| l.starts_with("  plain")), "{text}");
        let mut json = Vec::new();
        write_json(&mut json, &ms).expect("write to a Vec");
        let line: serde_json::Value =
            serde_json::from_str(String::from_utf8(json).expect("utf-8").lines().next().expect("a line"))
                .expect("valid JSON");
        let keys: Vec<&str> = line.as_object().expect("object").keys().map(String::as_str).collect();
        assert_eq!(keys.len(), 5, "{keys:?}");
    }

    #[test]
    fn extras_show_in_json_and_under_the_table() {
        use serde_json::json;
        let mut big = m("open", "trellis", Ok(300e6));
        big.extra = Extra {
            p99_ns: Some(400e6),
            peak_bytes: Some(3 << 20),
            target_ns: Some(200e6),
            target_is_p99: false,
            p99_target_ns: Some(300e6),
        };
        let ms = vec![big, m("plain", "trellis", Ok(10.0))];
        let mut table = Vec::new();
        write_table(&mut table, &ms).expect("write to a Vec");
        let text = String::from_utf8(table).expect("utf-8");
        assert!(
            text.contains(
                "open trellis: p99 400.00 ms, peak 3.0 MiB, target median ≤ 200.00 ms: missed (1.50x), \
                 target p99 ≤ 300.00 ms: missed (1.33x)"
            ),
            "{text}"
        );
        assert!(!text.contains("plain trellis:"), "{text}");
        let mut json = Vec::new();
        write_json(&mut json, &ms).expect("write to a Vec");
        let text = String::from_utf8(json).expect("utf-8");
        let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).expect("JSON")).collect();
        assert_eq!((lines[0]["p99_ns"].as_u64(), lines[0]["peak_bytes"].as_u64()), (Some(400_000_000), Some(3 << 20)));
        assert_eq!((&lines[0]["target_ns"], &lines[0]["target_of"]), (&json!(200_000_000), &json!("median")));
        assert_eq!(lines[0]["p99_target_ns"], json!(300_000_000));
        assert!(lines[1].get("p99_ns").is_none());
    }

    #[test]
    fn rates_have_thousands_separators() {
        assert_eq!(format_rate(0.4), "0");
        assert_eq!(format_rate(999.0), "999");
        assert_eq!(format_rate(1000.0), "1,000");
        assert_eq!(format_rate(1_234_567.6), "1,234,568");
    }
}
