//! Kernel CPU lists (`0-3,8`): how cpusets are written, in the NRI
//! adjustment and in the node's topology, so policies that place containers
//! on CPUs read and write them constantly.

/// Parses a kernel CPU list such as `0-3,8` (what cpusets are written as).
pub fn parse_cpu_list(text: &str) -> Result<Vec<u32>, String> {
    let mut cpus = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let lo: u32 = lo.trim().parse().map_err(|_| format!("bad CPU number in {part:?}"))?;
        let hi: u32 = hi.trim().parse().map_err(|_| format!("bad CPU number in {part:?}"))?;
        if hi < lo || hi - lo > 65_535 {
            return Err(format!("bad CPU range {part:?}"));
        }
        cpus.extend(lo..=hi);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// Formats CPUs as a kernel CPU list (`0-3,8`).
pub fn format_cpu_list(cpus: &[u32]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out = String::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        while i + 1 < sorted.len() && sorted[i + 1] == sorted[i] + 1 {
            i += 1;
        }
        if !out.is_empty() {
            out.push(',');
        }
        if start == sorted[i] {
            out.push_str(&start.to_string());
        } else {
            out.push_str(&format!("{start}-{}", sorted[i]));
        }
        i += 1;
    }
    out
}
