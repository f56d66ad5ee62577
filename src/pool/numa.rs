//! Which NUMA node a GPU hangs off (from its PCI address and sysfs), and
//! the CPUs of a node: where a pool places each member's pinned memory and
//! completion thread.

/// The host's NUMA nodes (1 where sysfs does not say).
pub(crate) fn nodes() -> usize {
    std::fs::read_dir("/sys/devices/system/node")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| {
                    let name = e.file_name();
                    let name = name.to_string_lossy();
                    name.strip_prefix("node")
                        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                })
                .count()
        })
        .unwrap_or(0)
        .max(1)
}

/// The node of the PCI device at `bus_id` ("0000:3B:00.0"), if sysfs
/// names one.
pub(crate) fn node_of(bus_id: &str) -> Option<usize> {
    let path = format!(
        "/sys/bus/pci/devices/{}/numa_node",
        bus_id.to_ascii_lowercase()
    );
    let text = std::fs::read_to_string(path).ok()?;
    text.trim()
        .parse::<i64>()
        .ok()
        .and_then(|n| usize::try_from(n).ok())
}

/// The CPUs of node `node` (its sysfs cpulist, such as "0-15,32-47").
pub(crate) fn cpus_of(node: usize) -> Vec<usize> {
    let path = format!("/sys/devices/system/node/node{node}/cpulist");
    std::fs::read_to_string(path)
        .map(|t| parse_cpulist(&t))
        .unwrap_or_default()
}

/// "0-3,8,10-11" as [0, 1, 2, 3, 8, 10, 11]; what does not parse is left
/// out.
pub(crate) fn parse_cpulist(text: &str) -> Vec<usize> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.trim().parse::<usize>(), b.trim().parse::<usize>()) {
                    cpus.extend(a..=b.min(a.saturating_add(4096)));
                }
            }
            None => cpus.extend(part.trim().parse::<usize>().ok()),
        }
    }
    cpus
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpulists_parse_and_nonsense_is_left_out() {
        assert_eq!(parse_cpulist("0-3,8,10-11\n"), [0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(parse_cpulist(""), [] as [usize; 0]);
        assert_eq!(parse_cpulist("x,5,7-y"), [5]);
        assert_eq!(parse_cpulist("4-2"), [] as [usize; 0]);
    }

    #[test]
    #[cfg_attr(miri, ignore = "reads sysfs, which Miri's isolation refuses")]
    fn a_missing_device_has_no_node_and_the_host_at_least_one() {
        assert_eq!(node_of("ffff:ff:ff.f"), None);
        assert!(nodes() >= 1);
    }
}
