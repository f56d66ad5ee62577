//! Reading `ptxas -v` reports (shared with build.rs, which includes this file).

/// The spill report of one function for one architecture.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spill {
    /// The function's (mangled) name.
    pub function: String,
    /// Bytes of registers spilled to local memory.
    pub stores: u64,
    /// Bytes loaded back from those spills.
    pub loads: u64,
}

/// Every function's spill figures in a `ptxas -v` report, in report order.
pub fn spills(report: &str) -> Vec<Spill> {
    let mut found = Vec::new();
    let mut function = String::new();
    for line in report.lines() {
        if let Some(rest) = line.split("Function properties for ").nth(1) {
            function = rest.trim().to_string();
        } else if line.contains("bytes spill stores") {
            let n: Vec<u64> = line
                .split(|c: char| !c.is_ascii_digit())
                .filter_map(|t| t.parse().ok())
                .collect();
            if let [_, stores, loads, ..] = n[..] {
                found.push(Spill {
                    function: function.clone(),
                    stores,
                    loads,
                });
            }
        }
    }
    found
}
