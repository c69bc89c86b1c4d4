//! Process metrics (RSS, CPU, open file descriptors, start time) read from `/proc` at
//! scrape time, in the names Prometheus' own clients use. On systems without `/proc`
//! they are simply absent.

use std::fmt::Write;

/// Append the process families to an OpenMetrics text body.
pub fn encode(out: &mut String) {
    let page = 4096.0; // bytes; Linux on the architectures we ship
    let ticks = 100.0; // USER_HZ
    if let Some(rss_pages) = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|v| v.parse::<f64>().ok()))
    {
        gauge(out, "process_resident_memory_bytes", "Resident memory size in bytes", rss_pages * page);
    }
    if let Ok(stat) = std::fs::read_to_string("/proc/self/stat") {
        // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
        let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or_default();
        let fields: Vec<&str> = after.split_whitespace().collect();
        let num = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok());
        if let (Some(utime), Some(stime)) = (num(11), num(12)) {
            let _ = writeln!(
                out,
                "# TYPE process_cpu_seconds counter\n# HELP process_cpu_seconds Total user and system CPU time spent in seconds"
            );
            let _ = writeln!(out, "process_cpu_seconds_total {}", (utime + stime) / ticks);
        }
        if let (Some(start_ticks), Some(boot)) = (num(19), boot_time()) {
            gauge(
                out,
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds",
                boot + start_ticks / ticks,
            );
        }
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        gauge(out, "process_open_fds", "Number of open file descriptors", fds.count() as f64);
    }
}

fn gauge(out: &mut String, name: &str, help: &str, value: f64) {
    let _ = writeln!(out, "# TYPE {name} gauge\n# HELP {name} {help}\n{name} {value}");
}

fn boot_time() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    stat.lines().find_map(|l| l.strip_prefix("btime ")).and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    #[test]
    fn reports_memory_cpu_and_fds_on_linux() {
        let mut out = String::new();
        super::encode(&mut out);
        for family in [
            "process_resident_memory_bytes ",
            "process_cpu_seconds_total ",
            "process_open_fds ",
            "process_start_time_seconds ",
        ] {
            let line =
                out.lines().find(|l| l.starts_with(family)).unwrap_or_else(|| panic!("{family} missing in\n{out}"));
            let value: f64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
            // CPU time is counted in 10 ms ticks; a short test may not have used one.
            let least = if family.starts_with("process_cpu") { 0.0 } else { f64::MIN_POSITIVE };
            assert!(value >= least, "{line}");
        }
    }
}
