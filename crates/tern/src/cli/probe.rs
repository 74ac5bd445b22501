//! `tern probe`'s options: which measurements, and how heavy.

use clap::Args;

use super::{EngineArgs, positive_secs};

#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// The daemon: HOST, HOST:PORT or tern://HOST[:PORT].
    pub target: String,
    /// Also measure throughput through the engine (this fills the path).
    #[arg(long)]
    pub throughput: bool,
    /// Seconds of the throughput test.
    #[arg(long, default_value_t = 5.0, value_name = "SECS", value_parser = positive_secs)]
    pub time: f64,
    /// Packet trains sent for the capacity estimate (up to twice as many
    /// while fewer than half of them were usable).
    #[arg(long, default_value_t = 10, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=100))]
    pub trains: u16,
    /// Packets per train.
    #[arg(long, default_value_t = 100, value_name = "N", value_parser = clap::value_parser!(u16).range(2..=512))]
    pub train_len: u16,
    /// UDP payload bytes per probe packet [default: the route's MTU less
    /// IP and UDP headers].
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u16).range(256..=8972))]
    pub packet_size: Option<u16>,
    /// Average rate the capacity probe may send each way, bits per second
    /// with decimal suffixes (8M = 8 Mbit/s).
    #[arg(long, default_value = "8M", value_name = "RATE", value_parser = crate::size::parse_rate)]
    pub probe_load: u64,
    /// How far an arrival may stray from its train's line, as a share of
    /// the train's duration, and still be on it; a train with less than
    /// 60 % of its arrivals on one line (a stall, a bunch, cross traffic)
    /// is discarded. Raise it where timestamps are coarse.
    #[arg(long, default_value_t = tern_probe::estimate::DISTURBED_SHARE, value_name = "SHARE", value_parser = positive_share)]
    pub max_stray: f64,
    /// Also measure loss, delay variation and reordering in each direction
    /// with a paced stream of UDP echoes (the daemon's responder answers).
    #[arg(long)]
    pub loss: bool,
    /// Echoes the loss measurement sends. One run of 1000 tells 1 % loss
    /// within about ±0.3 points; ±0.05 takes some 400000.
    #[arg(long, default_value_t = 1000, value_name = "N", value_parser = clap::value_parser!(u32).range(2..=10_000_000))]
    pub echoes: u32,
    /// Echoes per second.
    #[arg(long, default_value_t = 200, value_name = "PPS", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub echo_rate: u32,
    /// UDP payload bytes per echo.
    #[arg(long, default_value_t = 64, value_name = "BYTES", value_parser = clap::value_parser!(u16).range(40..=8972))]
    pub echo_size: u16,
    /// Also trace the route: the routers on the way, with their round-trip
    /// times (UDP with growing TTL, unprivileged, like tracepath).
    #[arg(long)]
    pub route: bool,
    /// Print one JSON object (`rtt`, `capacity`, `loss`, `route`,
    /// `throughput`, `errors`) on stdout.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub engine: EngineArgs,
}

fn positive_share(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
        _ => Err(format!("'{s}' is not a positive number")),
    }
}
