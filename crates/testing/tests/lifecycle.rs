//! `make cluster` / `make cluster-down` with the real node: starting twice is
//! harmless, and `down` leaves nothing of the node on the machine: no process,
//! mount, nftables table, iptables chain, interface, cgroup or changed sysctl; and a
//! cluster that started without its node (the machine could not run one yet) gets it
//! at the next `up`, keeping what it stores.
//!
//! Its own test binary, with one test: it stops the cluster the other tests share and
//! starts it again, so nothing may run beside it (cargo runs test binaries one after
//! another). Run: `cargo test -p bosun-testing --test lifecycle`.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)] // tests: failing loudly is the point

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use bosun_testing::node::require_real_node;
use bosun_testing::{cluster, repo_root};

/// Sysctls the node changes (kubelet's kernel tunables, forwarding, bridge netfilter).
const SYSCTLS: &[&str] = &[
    "net/ipv4/ip_forward",
    "net/bridge/bridge-nf-call-iptables",
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
];

/// What the real node can leave on a machine, as sets of lines per kind.
#[derive(Debug, PartialEq, Eq)]
struct Machine {
    processes: BTreeSet<String>,
    mounts: BTreeSet<String>,
    nft_tables: BTreeSet<String>,
    kube_iptables_chains: BTreeSet<String>,
    interfaces: BTreeSet<String>,
    cgroups: BTreeSet<String>,
    sysctls: BTreeSet<String>,
    owner_file: bool,
    /// `ip netns list` (the second real node's namespace).
    netns: BTreeSet<String>,
}

fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program).args(args).output().unwrap_or_else(|e| panic!("running {program}: {e}"));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn lines(text: &str) -> BTreeSet<String> {
    text.lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_owned).collect()
}

/// The cluster's state directory.
fn state_dir() -> PathBuf {
    std::env::var_os("BOSUN_CLUSTER_DIR").map(PathBuf::from).unwrap_or_else(|| repo_root().join(".cluster"))
}

/// The cluster's components by name, from their pid files.
fn component_pids() -> BTreeSet<String> {
    let Ok(dir) = std::fs::read_dir(state_dir().join("pids")) else { return BTreeSet::new() };
    dir.flatten()
        .map(|f| {
            let pid = std::fs::read_to_string(f.path()).unwrap_or_default();
            format!("{} {}", f.file_name().to_string_lossy(), pid.trim())
        })
        .collect()
}

impl Machine {
    /// What this cluster can have left on the machine. Other processes, mounts and
    /// containerds on the machine (another cluster's, a developer's) are not counted.
    fn now() -> Self {
        let state = state_dir().display().to_string();
        // Components and shims name the state directory on their command line; the
        // containers (and their pause processes) sit in kubepods cgroups, counted below.
        let processes = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().chars().all(|c| c.is_ascii_digit()))
            .filter_map(|e| {
                let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
                let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
                let pid = e.file_name().to_string_lossy().into_owned();
                cmdline.contains(&format!("{state}/")).then(|| format!("{pid} {}", cmdline.trim()))
            })
            .collect();
        let mounts = std::fs::read_to_string("/proc/self/mounts")
            .unwrap()
            .lines()
            .filter_map(|l| l.split_whitespace().nth(1))
            .filter(|m| m.starts_with(&state) || m.contains("kubepods"))
            .map(str::to_owned)
            .collect();
        let mut kube_iptables_chains = BTreeSet::new();
        for cmd in ["iptables", "ip6tables"] {
            for table in ["filter", "nat", "mangle"] {
                for chain in run(cmd, &["-w", "-t", table, "-S"]).lines().filter(|l| l.contains("KUBE-")) {
                    kube_iptables_chains.insert(format!("{cmd} {table}: {chain}"));
                }
            }
        }
        let interfaces = run("ip", &["-o", "link", "show"])
            .lines()
            .filter_map(|l| l.split(": ").nth(1))
            .map(|name| name.split('@').next().unwrap_or(name).to_owned())
            .collect();
        let cgroups = std::fs::read_dir("/sys/fs/cgroup")
            .map(|d| {
                d.flatten()
                    .flat_map(|h| [h.path().join("kubepods"), h.path().join("bosun-node-2")])
                    .filter(|p| p.exists())
                    .map(|p| p.display().to_string())
                    .collect()
            })
            .unwrap_or_default();
        let sysctls = SYSCTLS
            .iter()
            .filter_map(|k| std::fs::read_to_string(format!("/proc/sys/{k}")).ok().map(|v| format!("{k}={}", v.trim())))
            .collect();
        Machine {
            processes,
            mounts,
            nft_tables: lines(&run("nft", &["list", "tables"])),
            kube_iptables_chains,
            interfaces,
            cgroups,
            sysctls,
            owner_file: std::path::Path::new("/run/bosun-node.owner").exists(),
            netns: run("ip", &["netns", "list"])
                .lines()
                .filter_map(|l| l.split_whitespace().next())
                .map(str::to_owned)
                .collect(),
        }
    }
}

fn cluster_sh(command: &str) -> String {
    cluster_sh_with_path(command, None)
}

/// `cluster.sh COMMAND`, with `PATH` replaced when one is given.
fn cluster_sh_with_path(command: &str, path: Option<&str>) -> String {
    let start = Instant::now();
    let mut cmd = Command::new(repo_root().join("hack/controlplane/cluster.sh"));
    if let Some(path) = path {
        cmd.env("PATH", path);
    }
    let out = cmd.arg(command).output().unwrap_or_else(|e| panic!("running cluster.sh {command}: {e}"));
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "cluster.sh {command} failed:\n{text}");
    eprintln!("cluster.sh {command}: {:?}", start.elapsed());
    text
}

/// kubectl as the cluster's admin; its stdout, or a panic with its stderr.
fn kubectl(args: &[&str]) -> String {
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(state_dir().join("kubeconfig"))
        .args(["--namespace", "default"])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running kubectl: {e}"));
    assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn up_twice_is_harmless_and_down_leaves_nothing_behind() {
    // The suite's cluster, with its real node: proves the node was there to clean up.
    require_real_node(&cluster().await.client).await;
    let saved_sysctls =
        std::fs::read_to_string(state_dir().join("node/sysctl.saved")).expect("the node's saved sysctls");
    assert!(saved_sysctls.contains("net.ipv4.ip_forward="), "{saved_sysctls}");

    // Starting again while healthy changes nothing: same processes.
    let running = Machine::now();
    let components = component_pids();
    assert!(components.iter().any(|c| c.starts_with("kubelet.pid ")), "{components:?}");
    let again = cluster_sh("up");
    assert!(again.contains("already running"), "a second up keeps the running cluster:\n{again}");
    assert_eq!(component_pids(), components, "no component was restarted");
    assert!(running.interfaces.contains("bosun0"), "the node's bridge exists while it runs: {:?}", running.interfaces);
    assert!(running.nft_tables.contains("table inet bosun-node"), "{:?}", running.nft_tables);
    assert!(!running.cgroups.is_empty(), "kubelet's cgroups exist while it runs");
    // The second node: its namespace, the machine's end of its veth pair, its rules
    // and its cgroup root.
    assert!(running.netns.contains("bosun-node-2"), "{:?}", running.netns);
    assert!(running.interfaces.contains("bosun1-h"), "{:?}", running.interfaces);
    assert!(running.nft_tables.contains("table inet bosun-bosun-node-2"), "{:?}", running.nft_tables);
    assert!(running.cgroups.iter().any(|c| c.ends_with("/bosun-node-2")), "{:?}", running.cgroups);

    // Down, the machine as it is without a cluster.
    cluster_sh("down");
    let without = Machine::now();

    // Up on a machine that cannot run the node yet (nft, iptables and ip live in the
    // sbin directories, left out of PATH here, as on a machine before
    // hack/prerequisites.sh): the control plane alone, and the reason.
    let path = std::env::var("PATH").unwrap_or_default();
    let no_sbin: Vec<&str> = path.split(':').filter(|d| !d.ends_with("sbin")).collect();
    let missing = cluster_sh_with_path("up", Some(&no_sbin.join(":")));
    assert!(
        missing.contains("real node: MISSING — ") && missing.contains(" is not installed"),
        "up without the sbin tools:\n{missing}"
    );
    assert!(!Machine::now().interfaces.contains("bosun0"), "no node without the sbin tools");
    kubectl(&["create", "configmap", "kept-across-the-node", "--from-literal=k=v"]);

    // Up again once the machine can run it: the running cluster gets its node and
    // keeps what it stores.
    let added = cluster_sh("up");
    assert!(added.contains("this machine can run it now: adding it"), "up with the sbin tools:\n{added}");
    assert!(added.contains("real nodes bosun-node and bosun-node-2: Ready"), "{added}");
    assert_eq!(kubectl(&["get", "configmap", "kept-across-the-node", "-o", "jsonpath={.data.k}"]), "v");
    let up = Machine::now();
    assert!(up.interfaces.contains("bosun0") && up.owner_file, "the node came back: {up:?}");
    assert!(
        up.interfaces.contains("bosun1-h") && up.netns.contains("bosun-node-2"),
        "the second node came too: {up:?}"
    );
    cluster_sh("down");
    let after = Machine::now();

    assert_eq!(after, without, "a second up/down cycle left something behind");
    assert!(after.processes.is_empty(), "processes left: {:?}", after.processes);
    assert!(after.mounts.is_empty(), "mounts left: {:?}", after.mounts);
    assert!(after.kube_iptables_chains.is_empty(), "iptables chains left: {:?}", after.kube_iptables_chains);
    assert!(after.cgroups.is_empty(), "cgroups left: {:?}", after.cgroups);
    assert!(!after.owner_file, "/run/bosun-node.owner left");
    assert!(!after.netns.contains("bosun-node-2"), "the second node's network namespace left: {:?}", after.netns);
    assert!(
        !after.interfaces.iter().any(|i| i == "bosun0" || i == "bosun1-h" || i.starts_with("veth")),
        "interfaces left: {:?}",
        after.interfaces
    );
    assert!(
        !after.nft_tables.iter().any(|t| t.contains("bosun-node") || t.contains("kube-proxy")),
        "nftables tables left: {:?}",
        after.nft_tables
    );
    // Every sysctl the node changed is back at the value it had before the node
    // started, as the running cluster recorded it.
    for line in saved_sysctls.lines() {
        let (key, value) = line.split_once('=').unwrap_or_else(|| panic!("sysctl.saved line {line:?}"));
        let now = std::fs::read_to_string(format!("/proc/sys/{}", key.replace('.', "/"))).unwrap_or_default();
        assert_eq!(now.trim(), value, "sysctl {key} restored");
    }
    assert_eq!(after.sysctls, without.sysctls, "sysctls after a second cycle");

    // Leave the cluster running for the test binaries after this one.
    cluster_sh("up");
    require_real_node(&cluster().await.client).await;
}
