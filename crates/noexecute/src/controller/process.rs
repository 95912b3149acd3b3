//! The standard `process_*` metrics (CPU, memory, file descriptors, start time), as every
//! Prometheus client library exports them, read from `/proc/self` at each scrape. Elsewhere
//! than Linux, or when `/proc` cannot be read, they are left out of the scrape.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Linux reports CPU times and the start time in USER_HZ ticks, 100 a second on every
/// architecture it supports.
const TICKS_PER_SECOND: f64 = 100.0;

#[derive(Debug, Default)]
pub struct ProcessCollector;

/// What one scrape reports.
#[derive(Debug, Default, PartialEq)]
pub struct Sample {
    pub cpu_seconds: f64,
    pub resident_bytes: f64,
    pub virtual_bytes: f64,
    pub start_time_seconds: Option<f64>,
    pub open_fds: Option<f64>,
    pub max_fds: Option<f64>,
}

/// Parses `/proc/self/stat` (the fields after the command name, which may hold spaces and
/// parentheses), `/proc/self/status`'s VmRSS, and `/proc/stat`'s btime.
pub fn parse(stat: &str, status: &str, boot: Option<&str>) -> Option<Sample> {
    let after = &stat[stat.rfind(')')? + 1..];
    // Field 3 (state) is the first after the name; utime is 14, stime 15, starttime 22,
    // vsize 23 (1-based, as proc(5) numbers them).
    let fields: Vec<&str> = after.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<f64>().ok());
    let cpu_seconds = (field(14)? + field(15)?) / TICKS_PER_SECOND;
    let virtual_bytes = field(23)?;
    let resident_bytes = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kb| kb * 1024.0)?;
    let start_time_seconds = boot
        .and_then(|b| b.lines().find_map(|l| l.strip_prefix("btime ")))
        .and_then(|b| b.trim().parse::<f64>().ok())
        .and_then(|btime| Some(btime + field(22)? / TICKS_PER_SECOND));
    Some(Sample {
        cpu_seconds,
        resident_bytes,
        virtual_bytes,
        start_time_seconds,
        open_fds: None,
        max_fds: None,
    })
}

/// The soft limit of "Max open files" in `/proc/self/limits`.
pub fn max_fds(limits: &str) -> Option<f64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let soft = line["Max open files".len()..].split_whitespace().next()?;
    soft.parse().ok()
}

fn read() -> Option<Sample> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let boot = std::fs::read_to_string("/proc/stat").ok();
    let mut sample = parse(&stat, &status, boot.as_deref())?;
    sample.open_fds = std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|d| d.count() as f64);
    sample.max_fds = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|l| max_fds(&l));
    Some(sample)
}

fn gauge(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: f64,
) -> std::fmt::Result {
    let metric = ConstGauge::new(value);
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        let Some(s) = read() else {
            return Ok(());
        };
        let cpu = ConstCounter::new(s.cpu_seconds);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds.",
            None,
            cpu.metric_type(),
        )?)?;
        gauge(
            &mut encoder,
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            s.resident_bytes,
        )?;
        gauge(
            &mut encoder,
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes.",
            s.virtual_bytes,
        )?;
        if let Some(start) = s.start_time_seconds {
            gauge(
                &mut encoder,
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                start,
            )?;
        }
        if let Some(open) = s.open_fds {
            gauge(
                &mut encoder,
                "process_open_fds",
                "Number of open file descriptors.",
                open,
            )?;
        }
        if let Some(max) = s.max_fds {
            gauge(
                &mut encoder,
                "process_max_fds",
                "Maximum number of open file descriptors.",
                max,
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_with_spaces_and_parentheses_in_the_name_parses() {
        // pid (comm) then fields 3.. : state S, utime=250 and stime=50 ticks,
        // starttime=1000 ticks, vsize.
        let mut fields = vec!["0"; 50];
        fields[0] = "S";
        fields[14 - 3] = "250";
        fields[15 - 3] = "50";
        fields[22 - 3] = "1000";
        fields[23 - 3] = "123456789";
        let stat = format!("42 (no exe (c) ) {}", fields.join(" "));
        let status = "Name:\tnoexecute\nVmRSS:\t   2048 kB\n";
        assert_eq!(
            parse(&stat, status, Some("cpu  1 2 3\nbtime 1700000000\n")),
            Some(Sample {
                cpu_seconds: 3.0,
                resident_bytes: 2048.0 * 1024.0,
                virtual_bytes: 123_456_789.0,
                start_time_seconds: Some(1_700_000_010.0),
                open_fds: None,
                max_fds: None,
            })
        );
        assert_eq!(parse("garbage", status, None), None);
    }

    #[test]
    fn the_soft_limit_of_open_files_is_read() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \nMax open files            1024                 524288               files     \n";
        assert_eq!(max_fds(limits), Some(1024.0));
    }

    #[test]
    fn this_process_reports_its_own_figures() {
        let s = read();
        assert!(
            s.as_ref()
                .is_some_and(|s| s.resident_bytes > 0.0 && s.virtual_bytes >= s.resident_bytes),
            "{s:?}"
        );
        assert!(
            s.as_ref()
                .is_some_and(|s| s.open_fds.is_some_and(|n| n >= 3.0)),
            "{s:?}"
        );
    }
}
