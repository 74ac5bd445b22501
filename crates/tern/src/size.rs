//! Sizes and rates on the command line. Sizes: `4M`, `1.5G`, `512KiB`,
//! `1000000`, where K, M, G and T are powers of 1024, with or without
//! `iB`/`B`. Rates: bits per second with decimal suffixes, as iperf3.

/// Parses a size; used as a clap value parser.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let (value, unit) = number_and_unit(s)
        .ok_or_else(|| format!("'{s}' is not a size (examples: 4M, 1.5G, 65536)"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        other => {
            return Err(format!(
                "unknown size unit '{other}' in '{s}' (use K, M, G or T)"
            ));
        }
    };
    let bytes = value * mult as f64;
    if !(0.0..1.8e19).contains(&bytes) {
        return Err(format!("'{s}' is out of range"));
    }
    Ok(bytes as u64)
}

/// Splits `1.5G` into 1.5 and `G`.
fn number_and_unit(s: &str) -> Option<(f64, &str)> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    Some((num.parse().ok()?, unit))
}

/// Parses a rate in bits per second with decimal SI suffixes, as iperf3's
/// `-b`: `500M` is 500 000 000 bit/s, `2.5G`, `800k`.
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let (value, unit) = number_and_unit(s)
        .ok_or_else(|| format!("'{s}' is not a rate (examples: 500M, 2.5G, 800k bits/s)"))?;
    let mult = match unit.trim() {
        "" => 1.0,
        "k" | "K" => 1e3,
        "m" | "M" => 1e6,
        "g" | "G" => 1e9,
        "t" | "T" => 1e12,
        other => {
            return Err(format!(
                "unknown rate unit '{other}' in '{s}' (use k, M, G or T)"
            ));
        }
    };
    let bps = value * mult;
    if !(1000.0..1e15).contains(&bps) {
        return Err(format!("'{s}': a rate from 1k to 1000T bit/s"));
    }
    Ok(bps as u64)
}

/// Formats bytes with binary units, e.g. `1.50 GiB`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

/// Formats a rate in bits per second, e.g. `9.41 Gbit/s`.
pub fn human_rate(bps: f64) -> String {
    const UNITS: [&str; 5] = ["bit/s", "kbit/s", "Mbit/s", "Gbit/s", "Tbit/s"];
    let mut v = bps;
    let mut u = 0;
    while v >= 1000.0 && u < UNITS.len() - 1 {
        v /= 1000.0;
        u += 1;
    }
    format!("{v:.2} {}", UNITS[u])
}

/// `n` things, in English: "1 file", "2 files".
pub fn count(n: usize, thing: &str) -> String {
    if n == 1 {
        format!("1 {thing}")
    } else {
        format!("{n} {thing}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_decimal_bits_like_iperf3() {
        assert_eq!(parse_rate("500M"), Ok(500_000_000));
        assert_eq!(parse_rate("2.5G"), Ok(2_500_000_000));
        assert_eq!(parse_rate("800k"), Ok(800_000));
        assert_eq!(parse_rate("1000"), Ok(1000));
        assert!(parse_rate("5Q").is_err());
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("10").is_err(), "below 1k");
    }

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("4M").unwrap(), 4 << 20);
        assert_eq!(parse_size("4MiB").unwrap(), 4 << 20);
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
        assert_eq!(parse_size("65536").unwrap(), 65536);
        assert_eq!(parse_size("2 k").unwrap(), 2048);
        assert!(parse_size("lots").is_err());
        assert!(parse_size("4Q").is_err());
    }

    #[test]
    fn humans_read_units() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(3 << 29), "1.50 GiB");
        assert_eq!(human_rate(9.41e9), "9.41 Gbit/s");
    }
}
