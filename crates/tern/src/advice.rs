//! Advice as people read it (`tern advise`, and what `--advisor` says it
//! starts from).

use tern_advisor::Advice;

use crate::size::{count, human_bytes, human_rate};

/// An age in the unit that reads best.
pub fn age(secs: f64) -> String {
    match secs {
        s if s < 120.0 => format!("{s:.0} s"),
        s if s < 7200.0 => format!("{:.0} min", s / 60.0),
        s if s < 172_800.0 => format!("{:.1} h", s / 3600.0),
        s => format!("{:.1} days", s / 86_400.0),
    }
}

/// Milliseconds, with the precision a loopback RTT needs.
pub fn ms(v: f64) -> String {
    if v < 1.0 {
        format!("{v:.3} ms")
    } else {
        format!("{v:.1} ms")
    }
}

/// Where measurements came from.
pub fn source(s: tern_advisor::advice::Source) -> &'static str {
    match s {
        tern_advisor::advice::Source::Passive => "passive",
        tern_advisor::advice::Source::Active => "active",
        tern_advisor::advice::Source::Mixed => "passive and active",
    }
}

/// Advice for people.
pub fn describe(a: &Advice, url: &str) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let streams = match a.streams {
        1 => "1 stream".to_string(),
        n => format!("{n} streams"),
    };
    let _ = writeln!(out, "advice for {} from {url}", a.host);
    let _ = writeln!(
        out,
        "  buffer     {} per stream, {streams}   (tern: --window {} -P {})",
        human_bytes(a.buffer_bytes),
        a.tern_window_bytes,
        a.streams
    );
    let _ = writeln!(
        out,
        "  expected   {}",
        human_rate(a.expected_throughput_bps)
    );
    let _ = writeln!(
        out,
        "  path       RTT {} x capacity {} = {} in flight",
        ms(a.rtt_ms),
        human_rate(a.capacity_bps),
        human_bytes(a.bdp_bytes)
    );
    evidence(a, &mut out);
    if a.host_limit.limited {
        let _ = writeln!(
            out,
            "  host caps  one socket gets at most {} on the advisor's host; to let one stream carry the path:",
            human_bytes(a.host_limit.socket_window_max_bytes)
        );
        for s in &a.host_limit.sysctls {
            let _ = writeln!(out, "    {s}");
        }
    }
    if let Some(sw) = a.sweep.as_ref().filter(|sw| sw.followed) {
        let _ = writeln!(
            out,
            "  sweep      best of {} cells {} old: {}, window {}, {} (the formula expected {})",
            sw.cells,
            age(sw.age_s),
            count(sw.best_streams as usize, "stream"),
            sw.best_window,
            human_rate(sw.best_bps),
            human_rate(sw.formula_bps)
        );
    }
    if let Some(from) = &a.aggregated_from {
        let by = a.aggregated_by.as_deref().unwrap_or("same subnet");
        let _ = writeln!(out, "  from       {from} ({by})");
    }
    for p in &a.paths {
        let figures = match (p.rtt_ms, p.expected_throughput_bps) {
            (Some(rtt), Some(rate)) => format!("RTT {}, {} expected", ms(rtt), human_rate(rate)),
            _ => "no measurements of its own yet".to_string(),
        };
        let _ = writeln!(out, "  also via   {} ({figures})", p.host);
    }
    for n in &a.notes {
        let _ = writeln!(out, "  note: {n}");
    }
    out
}

/// The evidence lines: how many samples, of which kind, and how old, for
/// the RTT and the capacity.
fn evidence(a: &Advice, out: &mut String) {
    use std::fmt::Write;
    use tern_advisor::advice::CapacityBasis;
    let capacity_from = match a.capacity_basis {
        CapacityBasis::Capacity => "capacity probes",
        CapacityBasis::Throughput => "transfers the network limited",
        CapacityBasis::ThroughputLowerBound => "the best transfer (a lower bound)",
    };
    let _ = writeln!(
        out,
        "  evidence   {} samples ({}), the staler quantity {} old",
        a.samples,
        source(a.source),
        age(a.age_s)
    );
    let basis = |b: &tern_advisor::advice::Basis, ewma: String| {
        format!(
            "{} of {}, EWMA {ewma}, {}, newest {} old",
            b.method.replace('_', " "),
            b.samples,
            source(b.source),
            age(b.age_s)
        )
    };
    let _ = writeln!(out, "    RTT        {}", basis(&a.rtt, ms(a.rtt.ewma)));
    let _ = writeln!(
        out,
        "    capacity   from {capacity_from}: {}",
        basis(&a.capacity, human_rate(a.capacity.ewma))
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_well() {
        assert_eq!(age(3.2), "3 s");
        assert_eq!(age(600.0), "10 min");
        assert_eq!(age(3.0 * 3600.0), "3.0 h");
        assert_eq!(age(3.0 * 86_400.0), "3.0 days");
    }
}
