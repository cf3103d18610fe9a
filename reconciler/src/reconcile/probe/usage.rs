//! CPU time and peak memory of this process, from /proc (Linux), for the probe's cost: each
//! probe pod reports its own, the driver measures the reconciler's over a round.

/// CPU time (user + system) of this process in milliseconds; `None` without /proc.
pub fn cpu_ms() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) may hold spaces: count from the closing parenthesis.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // utime and stime are fields 14 and 15, in clock ticks (USER_HZ, 100 on Linux).
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ticks * 10)
}

/// Peak resident memory (VmHWM) in KiB; `None` without /proc.
pub fn max_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_a_cpu_time_and_a_peak_memory() {
        if std::path::Path::new("/proc/self/stat").exists() {
            assert!(cpu_ms().is_some());
            assert!(max_rss_kib().unwrap() > 0);
        }
    }
}
