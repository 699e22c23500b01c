//! The node's CPU and memory topology, read once from sysfs and procfs.
//!
//! Resource policies (exclusive CPUs, NUMA alignment) need to know which
//! CPUs are online, how they group into NUMA nodes and how much memory each
//! node has. The files read are the kernel's standard ones:
//! `devices/system/cpu/online`, `devices/system/node/node<N>/cpulist` and
//! `.../meminfo` under the sysfs root, and `meminfo` under the procfs root.
//! Both roots are parameters, so tests point them at a fake tree and need no
//! particular machine. A machine without NUMA information (containers often
//! hide `node*`) is one node holding every online CPU and all memory.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// One NUMA node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumaNode {
    /// The node's number, as in `/sys/devices/system/node/nodeN`.
    pub id: u32,
    /// Online CPUs of the node, ascending.
    pub cpus: Vec<u32>,
    /// Memory of the node in bytes.
    pub memory_bytes: u64,
}

/// What the node has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// Online CPUs, ascending.
    pub online_cpus: Vec<u32>,
    /// NUMA nodes, by id.
    pub numa_nodes: Vec<NumaNode>,
    /// Total memory in bytes.
    pub memory_bytes: u64,
}

/// Reading the topology failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    /// A file of the topology could not be read.
    #[error("cannot read {path}: {reason}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why not.
        reason: String,
    },
    /// A file of the topology did not say what the kernel documents.
    #[error("{path}: {reason}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What was wrong with it.
        reason: String,
    },
}

/// A kernel CPU list that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuListError {
    /// A CPU number that is not one.
    #[error("bad CPU number {number:?} in {part:?}")]
    Number {
        /// The text where a number should be.
        number: String,
        /// The list's item it is in.
        part: String,
    },
    /// A range that runs backwards or spans more CPUs than a node has.
    #[error("bad CPU range {part:?}")]
    Range {
        /// The list's item.
        part: String,
    },
}

/// Parses a kernel CPU list such as `0-3,8,10-11`.
pub fn parse_cpu_list(text: &str) -> Result<Vec<u32>, CpuListError> {
    let mut cpus = BTreeSet::new();
    for part in text.trim().split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (lo, hi) = match part.split_once('-') {
            Some((lo, hi)) => (lo, hi),
            None => (part, part),
        };
        let number = |n: &str| {
            n.parse::<u32>().map_err(|_| CpuListError::Number { number: n.to_string(), part: part.to_string() })
        };
        let (lo, hi) = (number(lo)?, number(hi)?);
        if hi < lo || hi - lo > 65_535 {
            return Err(CpuListError::Range { part: part.to_string() });
        }
        cpus.extend(lo..=hi);
    }
    Ok(cpus.into_iter().collect())
}

/// Formats CPUs as a kernel CPU list (`0-3,8`), the form cpusets take.
pub fn format_cpu_list(cpus: &[u32]) -> String {
    let mut sorted: Vec<u32> = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        parts.push(if start == end { start.to_string() } else { format!("{start}-{end}") });
        i += 1;
    }
    parts.join(",")
}

fn read(path: &Path) -> Result<String, TopologyError> {
    std::fs::read_to_string(path).map_err(|e| TopologyError::Read { path: path.to_path_buf(), reason: e.to_string() })
}

/// The `MemTotal` line of a meminfo file (global or per node), in bytes.
fn mem_total(path: &Path) -> Result<u64, TopologyError> {
    let text = read(path)?;
    text.lines()
        .find_map(|line| {
            let (_, rest) = line.split_once("MemTotal:")?;
            let kb: u64 = rest.split_whitespace().next()?.parse().ok()?;
            Some(kb * 1024)
        })
        .ok_or_else(|| TopologyError::Parse { path: path.to_path_buf(), reason: "no MemTotal line".into() })
}

impl Topology {
    /// Reads the running system's topology.
    pub fn from_system() -> Result<Self, TopologyError> {
        Self::read(Path::new("/sys"), Path::new("/proc"))
    }

    /// Reads the topology from a sysfs root and a procfs root.
    pub fn read(sys: &Path, proc: &Path) -> Result<Self, TopologyError> {
        let online_path = sys.join("devices/system/cpu/online");
        let online_cpus = parse_cpu_list(&read(&online_path)?)
            .map_err(|e| TopologyError::Parse { path: online_path.clone(), reason: e.to_string() })?;
        let memory_bytes = mem_total(&proc.join("meminfo"))?;
        let online: BTreeSet<u32> = online_cpus.iter().copied().collect();

        let mut numa_nodes = Vec::new();
        let node_dir = sys.join("devices/system/node");
        if let Ok(entries) = std::fs::read_dir(&node_dir) {
            for entry in entries.filter_map(Result::ok) {
                let name = entry.file_name();
                let Some(id) = name.to_str().and_then(|n| n.strip_prefix("node")).and_then(|n| n.parse().ok()) else {
                    continue;
                };
                let cpulist = entry.path().join("cpulist");
                let cpus = parse_cpu_list(&read(&cpulist)?)
                    .map_err(|e| TopologyError::Parse { path: cpulist.clone(), reason: e.to_string() })?;
                let cpus = cpus.into_iter().filter(|c| online.contains(c)).collect();
                let memory_bytes = mem_total(&entry.path().join("meminfo"))?;
                numa_nodes.push(NumaNode { id, cpus, memory_bytes });
            }
        }
        numa_nodes.sort_by_key(|n| n.id);
        if numa_nodes.is_empty() {
            numa_nodes.push(NumaNode { id: 0, cpus: online_cpus.clone(), memory_bytes });
        }
        Ok(Self { online_cpus, numa_nodes, memory_bytes })
    }

    /// What is known without sysfs: `cpus` CPUs on one node, memory unknown.
    pub fn fallback(cpus: u32) -> Self {
        let online_cpus: Vec<u32> = (0..cpus.max(1)).collect();
        Self {
            numa_nodes: vec![NumaNode { id: 0, cpus: online_cpus.clone(), memory_bytes: 0 }],
            online_cpus,
            memory_bytes: 0,
        }
    }

    /// The NUMA node a CPU belongs to.
    pub fn node_of(&self, cpu: u32) -> Option<u32> {
        self.numa_nodes.iter().find(|n| n.cpus.contains(&cpu)).map(|n| n.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str, text: &str) {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn cpu_lists_parse_and_format_both_ways() {
        assert_eq!(parse_cpu_list("0-3,8,10-11\n").unwrap(), [0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(parse_cpu_list("").unwrap(), Vec::<u32>::new());
        assert_eq!(parse_cpu_list("5").unwrap(), [5]);
        assert_eq!(parse_cpu_list("3-1").unwrap_err(), CpuListError::Range { part: "3-1".into() });
        assert!(parse_cpu_list("a").unwrap_err().to_string().contains("\"a\""));
        assert_eq!(format_cpu_list(&[11, 0, 1, 2, 3, 8, 10, 3]), "0-3,8,10-11");
        assert_eq!(format_cpu_list(&[]), "");
        for text in ["0", "0-1", "0,2,4", "1-2,5-9,12"] {
            assert_eq!(format_cpu_list(&parse_cpu_list(text).unwrap()), text);
        }
    }

    #[test]
    fn a_two_node_machine_is_read_from_a_fake_tree() {
        let sys = tempfile::tempdir().unwrap();
        let proc = tempfile::tempdir().unwrap();
        write(sys.path(), "devices/system/cpu/online", "0-6\n");
        write(sys.path(), "devices/system/node/node0/cpulist", "0-3\n");
        write(
            sys.path(),
            "devices/system/node/node0/meminfo",
            "Node 0 MemTotal:       1024 kB\nNode 0 MemFree: 1 kB\n",
        );
        // CPU 7 is offline.
        write(sys.path(), "devices/system/node/node1/cpulist", "4-7\n");
        write(sys.path(), "devices/system/node/node1/meminfo", "Node 1 MemTotal:       2048 kB\n");
        write(sys.path(), "devices/system/node/online", "0-1\n");
        write(proc.path(), "meminfo", "MemTotal:        3072 kB\nMemFree: 5 kB\n");
        let t = Topology::read(sys.path(), proc.path()).unwrap();
        assert_eq!(t.online_cpus, [0, 1, 2, 3, 4, 5, 6]);
        assert_eq!(t.memory_bytes, 3072 * 1024);
        assert_eq!(
            t.numa_nodes,
            [
                NumaNode { id: 0, cpus: vec![0, 1, 2, 3], memory_bytes: 1024 * 1024 },
                NumaNode { id: 1, cpus: vec![4, 5, 6], memory_bytes: 2048 * 1024 },
            ]
        );
        assert_eq!((t.node_of(5), t.node_of(7)), (Some(1), None));
    }

    #[test]
    fn without_numa_information_the_node_is_one_numa_node() {
        let sys = tempfile::tempdir().unwrap();
        let proc = tempfile::tempdir().unwrap();
        write(sys.path(), "devices/system/cpu/online", "0-1");
        write(proc.path(), "meminfo", "MemTotal: 100 kB\n");
        let t = Topology::read(sys.path(), proc.path()).unwrap();
        assert_eq!(t.numa_nodes, [NumaNode { id: 0, cpus: vec![0, 1], memory_bytes: 100 * 1024 }]);
    }

    #[test]
    fn broken_files_are_errors_that_name_the_file() {
        let sys = tempfile::tempdir().unwrap();
        let proc = tempfile::tempdir().unwrap();
        let e = Topology::read(sys.path(), proc.path()).unwrap_err().to_string();
        assert!(e.contains("devices/system/cpu/online"), "{e}");
        write(sys.path(), "devices/system/cpu/online", "0-x");
        let e = Topology::read(sys.path(), proc.path()).unwrap_err().to_string();
        assert!(e.contains("online") && e.contains("\"x\""), "{e}");
        write(sys.path(), "devices/system/cpu/online", "0");
        write(proc.path(), "meminfo", "nothing here\n");
        let e = Topology::read(sys.path(), proc.path()).unwrap_err().to_string();
        assert!(e.contains("meminfo") && e.contains("MemTotal"), "{e}");
    }

    #[test]
    fn this_machine_has_at_least_one_online_cpu() {
        let t = Topology::from_system().unwrap();
        assert!(!t.online_cpus.is_empty() && t.memory_bytes > 0);
        let in_nodes: usize = t.numa_nodes.iter().map(|n| n.cpus.len()).sum();
        assert_eq!(in_nodes, t.online_cpus.len());
    }
}
