//! The local Kubernetes control plane (`hack/controlplane/cluster.sh
//! up|down|status|kubeconfig|env|sa-kubeconfig|restart-apiserver`): etcd,
//! kube-apiserver, kube-controller-manager and kube-scheduler built from the pinned
//! upstream sources (`hack/controlplane/build.sh`), plus kwok, which plays the
//! kubelets of a few fake nodes (pods become Running/Ready, Job pods Succeed, claims
//! get bound) without any container runtime; and beside them two real nodes
//! ([`realnode`]): containerd, runc, kubelet and kube-proxy each, and CoreDNS, for
//! the pods that must really run. This module starts, checks and stops them all on [`supervise`]; the machine
//! steps of the node (its network rules, sysctls, cgroups, configuration files) are
//! `hack/controlplane/node.sh`'s, the images `hack/images.sh`'s.
//!
//! The state directory's layout is [`crate::cluster`]'s. Progress goes to stderr;
//! stdout only carries what a caller may capture (a kubeconfig path, an export line,
//! a ServiceAccount's kubeconfig).
//!
//! [`supervise`]: crate::supervise
//! [`realnode`]: crate::realnode

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::PostParams;
use kube::{Api, Client};
use nix::sys::signal::Signal;
use tokio::runtime::Runtime;

use crate::bootstrap;
use crate::cluster::{Cluster, ClusterDir, MARKER, Ports};
use crate::kubeconfig::{self, Credentials};
use crate::pki::{self, Pki};
use crate::realnode::{Broken, FIRST, POD_SUPERNET, REAL_NODES, RealNode, SECOND};
pub use crate::realnode::{COREDNS, KUBE_PROXY, KUBELET, NODE_LABEL};
use crate::supervise::{
    Component, Launch, StateDir, Unhealthy, Waiting, await_reaped, processes, signal_pid, write_private,
};
use crate::{ports, repo_root, run};

// The cluster's shape. The Service range is Kubernetes' convention; its first address
// is the `kubernetes` Service's, which therefore is in the serving certificate.
pub const SERVICE_CIDR: &str = "10.96.0.0/16";
pub const FIRST_SERVICE_IP: &str = "10.96.0.1";
pub const DNS_SERVICE_IP: &str = "10.96.0.10";
pub const CLUSTER_DOMAIN: &str = "cluster.local";
pub const FAKE_NODES: [&str; 2] = ["kwok-node-0", "kwok-node-1"];
/// Named by kwok's volume stages: they only act on claims and volumes of this class.
pub const STORAGE_CLASS: &str = "kwok-volume";
pub const STORAGE_PROVISIONER: &str = "kwok.x-k8s.io/volume";
/// A node's own storage (`stages/local-volume.yaml`): a volume made where the claim's
/// first pod is scheduled, usable on that node alone, as a local volume provisioner's.
pub const LOCAL_STORAGE_CLASS: &str = "bosun-local";
pub const LOCAL_STORAGE_PROVISIONER: &str = "bosun.dev/local-volume";
/// Where kwok's volume stages put hostPath volumes; ours go into the state directory.
const KWOK_VOLUME_ROOT: &str = "/tmp/kwok-local-path-provisioner";
// The first real node (one per machine: its bridge, address and DNS port are
// machine-wide); the second's are in crate::realnode.
pub const NODE_NAME: &str = FIRST.name;
pub const NODE_IP: &str = FIRST.ip;
/// A namespace's label choosing where its pods run: `fake` (the kwok nodes) or `real`
/// (the real nodes). Without it, a namespace made while the real nodes run gets them
/// (see `bootstrap::placement_policy`).
pub const NODES_LABEL: &str = "bosun.dev/nodes";
/// Which cluster's state directory the machine's real nodes belong to.
const NODE_OWNER: &str = "/run/bosun-node.owner";
/// `BOSUN_SECOND_NODE=0`: a cluster with the first real node only.
const SECOND_NODE_SWITCH: &str = "BOSUN_SECOND_NODE";
/// `BOSUN_REAL_NODES=0`: no real node at all, the fake nodes hold every pod. For
/// benchmarks of thousands of Services: each real node's kube-proxy programs every
/// Service of the cluster, and at 10,000 the two of them took a third of the machine.
const REAL_NODES_SWITCH: &str = "BOSUN_REAL_NODES";

pub const ETCD: Component = Component::named("etcd");
pub const APISERVER: Component = Component::named("kube-apiserver");
pub const CONTROLLER_MANAGER: Component = Component::named("kube-controller-manager");
pub const SCHEDULER: Component = Component::named("kube-scheduler");
pub const KWOK: Component = Component::named("kwok");
const CONTROL_PLANE: [Component; 5] = [ETCD, APISERVER, CONTROLLER_MANAGER, SCHEDULER, KWOK];

fn log(message: &str) {
    eprintln!("cluster: {message}");
}

/// The state directory: `dir`, else `$BOSUN_CLUSTER_DIR`, else `<repo>/.cluster`.
pub fn state_dir(dir: Option<&Path>) -> Result<StateDir> {
    let path = dir.map(Path::to_path_buf).unwrap_or_else(|| ClusterDir::from_env().path().to_owned());
    StateDir::new(&path, MARKER)
}

fn record(dir: &StateDir) -> ClusterDir {
    ClusterDir::at(dir.path())
}

fn save(dir: &StateDir, c: &Cluster) -> Result<()> {
    write_private(&record(dir).record(), &serde_json::to_vec_pretty(c)?)
}

/// Every component a cluster may run.
fn all() -> Vec<Component> {
    CONTROL_PLANE.into_iter().chain(REAL_NODES.iter().flat_map(RealNode::components)).collect()
}

/// The components `c` runs now: not those of a node a test stopped.
fn components(dir: &StateDir, c: &Cluster) -> Vec<Component> {
    let mut all = CONTROL_PLANE.to_vec();
    for n in c.real_nodes() {
        let killed = if n.broken(dir.path()) == Some(Broken::Stopped) { n.killed_by_stop() } else { vec![] };
        all.extend(n.components().into_iter().filter(|c| !killed.contains(c)));
    }
    all
}

fn script(name: &str) -> PathBuf {
    repo_root().join("hack/controlplane").join(name)
}

/// `build.sh [node]`: the build's `bin` directory (cached per pinned version; a cold
/// build takes minutes, with its progress on stderr).
fn build(part: Option<&str>) -> Result<PathBuf> {
    let what = match part {
        Some("node") => "building the real node's kubelet, kube-proxy and CoreDNS (first time only)",
        _ => "building the control plane (first time only)",
    };
    let out = crate::supervise::speaking(what, None, log, || {
        Command::new(script("build.sh")).args(part).stdin(Stdio::null()).stderr(Stdio::inherit()).output()
    })
    .context("running hack/controlplane/build.sh")?;
    if !out.status.success() {
        bail!("hack/controlplane/build.sh {} failed ({})", part.unwrap_or_default(), out.status);
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// `node.sh STEP` for real node `n` with the cluster's shape (the one copy of it is
/// here) and, once there are any, its ports.
fn node_step(dir: &StateDir, ports: Option<&Ports>, n: &RealNode, step: &str) -> Result<String> {
    let mut cmd = Command::new(script("node.sh"));
    let links = REAL_NODES.iter().map(|n| n.own.map_or(n.bridge, |o| o.link)).collect::<Vec<_>>().join(" ");
    cmd.arg(step).env("BOSUN_CLUSTER_DIR", dir.path()).env("HOST_LINKS", links).envs([
        ("NODE_NAME", n.name),
        ("NODE_DIR", n.dir),
        ("NODE_BRIDGE", n.bridge),
        ("NODE_CIDR", n.cidr),
        ("NODE_IP", n.ip),
        ("NODE_LABEL", NODE_LABEL),
        ("HOST_NODE_IP", FIRST.ip),
        ("POD_SUPERNET", POD_SUPERNET),
        ("SERVICE_CIDR", SERVICE_CIDR),
        ("FIRST_SERVICE_IP", FIRST_SERVICE_IP),
        ("DNS_SERVICE_IP", DNS_SERVICE_IP),
        ("CLUSTER_DOMAIN", CLUSTER_DOMAIN),
    ]);
    if let Some(own) = n.own {
        cmd.envs([
            ("NODE_NETNS", own.netns),
            ("NODE_LINK", own.link),
            ("LINK_HOST_IP", own.link_host_ip),
            ("LINK_NODE_IP", own.link_node_ip),
            ("NODE_CGROUP_ROOT", own.cgroup_root),
        ]);
    }
    if let Some(p) = ports {
        cmd.env("APISERVER_PORT", p.apiserver.to_string())
            .env("KUBELET_PORT", p.kubelet.to_string())
            .env("KUBELET_HEALTHZ_PORT", p.kubelet_healthz.to_string());
    }
    run(&mut cmd).with_context(|| format!("real node {}'s step '{step}'", n.name))
}

/// `Err` naming the switch when the environment sets it to `0`.
fn switched_on(switch: &str) -> std::result::Result<(), String> {
    if std::env::var(switch).is_ok_and(|v| v == "0") { Err(format!("turned off ({switch}=0)")) } else { Ok(()) }
}

/// Whether this cluster gets the real node: the node build's `bin` directory, or why
/// not (turned off, or this machine cannot run it).
fn pick_node(dir: &StateDir) -> std::result::Result<PathBuf, String> {
    switched_on(REAL_NODES_SWITCH)?;
    let why = node_step(dir, None, &FIRST, "unsupported").map_err(|e| format!("{e:#}"))?;
    if !why.trim().is_empty() {
        return Err(why.trim().to_owned());
    }
    build(Some("node")).map_err(|_| "building kubelet, kube-proxy and CoreDNS failed".to_owned())
}

/// Whether this cluster also gets the second real node (the first one runs), or why not.
fn pick_second_node(dir: &StateDir) -> std::result::Result<(), String> {
    switched_on(SECOND_NODE_SWITCH)?;
    let why = node_step(dir, None, &SECOND, "unsupported").map_err(|e| format!("{e:#}"))?;
    if why.trim().is_empty() { Ok(()) } else { Err(why.trim().to_owned()) }
}

/// The executable a component runs: containerd is Debian's, the nodes' own
/// components come from the node build, the rest from the control plane build.
fn program(c: &Component, s: &Cluster) -> Result<PathBuf> {
    match c.exe {
        "containerd" => which("containerd"),
        "kubelet" | "kube-proxy" | "coredns" => {
            Ok(s.node.as_ref().map_err(|why| anyhow!("no real node: {why}"))?.join(c.exe))
        }
        _ => Ok(s.bin.join(c.name)),
    }
}

fn which(name: &str) -> Result<PathBuf> {
    std::env::var_os("PATH")
        .and_then(|path| std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file()))
        .ok_or_else(|| anyhow!("{name} is not on PATH"))
}

fn start(dir: &StateDir, s: &Cluster, c: &Component, args: Vec<String>) -> Result<()> {
    // KWOK_WORKDIR keeps kwok from also loading a ~/.kwok/kwok.yaml.
    let env = if *c == KWOK { vec![("KWOK_WORKDIR".into(), dir.join("kwok").display().to_string())] } else { vec![] };
    dir.start(c, &Launch { program: program(c, s)?, args, env })?;
    Ok(())
}

/// Starts one of real node `n`'s components (in its network namespace, if it has one).
fn start_on(dir: &StateDir, s: &Cluster, n: &RealNode, c: &Component, args: Vec<String>) -> Result<()> {
    let (program, args) = n.launch(program(c, s)?, args);
    dir.start(c, &Launch { program, args, env: vec![] })?;
    Ok(())
}

fn path(p: PathBuf) -> String {
    p.display().to_string()
}

// --- start ---------------------------------------------------------------------------

fn start_cluster(
    dir: &StateDir,
    bin: &Path,
    node: std::result::Result<PathBuf, String>,
    node_2: std::result::Result<(), String>,
) -> Result<Cluster> {
    dir.create()?;
    std::fs::create_dir_all(dir.join("kubeconfigs"))?;
    std::fs::create_dir_all(dir.join("etcd"))?;
    std::fs::set_permissions(dir.join("etcd"), std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
    let p = ports::free_ports(9)?;
    let ports = Ports {
        etcd: p[0],
        etcd_peer: p[1],
        apiserver: p[2],
        kube_controller_manager: p[3],
        kube_scheduler: p[4],
        kubelet: p[5],
        kubelet_healthz: p[6],
        kube_proxy_metrics: p[7],
        kube_proxy_healthz: p[8],
    };
    let s = Cluster { ports, bin: bin.to_owned(), node, node_2 };
    save(dir, &s)?;
    // The first real node's bridge carries the address the apiserver advertises, so
    // it comes first; a machine that cannot run containers gets the rest.
    for n in s.real_nodes() {
        node_step(dir, Some(&s.ports), n, "network-up")?;
    }
    // etcd needs no certificates, so it boots while they are made. --unsafe-no-fsync:
    // the data is disposable and fsync dominates write latency.
    let (etcd, peer) = (s.ports.etcd, s.ports.etcd_peer);
    start(
        dir,
        &s,
        &ETCD,
        vec![
            "--name=bosun".into(),
            format!("--data-dir={}", path(dir.join("etcd"))),
            format!("--listen-client-urls=http://127.0.0.1:{etcd}"),
            format!("--advertise-client-urls=http://127.0.0.1:{etcd}"),
            format!("--listen-peer-urls=http://127.0.0.1:{peer}"),
            format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer}"),
            format!("--initial-cluster=bosun=http://127.0.0.1:{peer}"),
            "--initial-cluster-state=new".into(),
            "--unsafe-no-fsync".into(),
            "--log-level=warn".into(),
        ],
    )?;

    // The CA, the apiserver's serving certificate (every address clients use), the
    // control plane's client certificates and the ServiceAccount key pair.
    let names: Vec<String> = [
        "127.0.0.1",
        FIRST_SERVICE_IP,
        NODE_IP,
        "localhost",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    ]
    .map(str::to_owned)
    .to_vec();
    Pki::create(&dir.join("certs"), &names).context("certificate generation failed")?;
    write_kubeconfig(dir, &s, "admin", &dir.join("kubeconfig.tmp"))?;
    for c in [CONTROLLER_MANAGER, SCHEDULER] {
        write_kubeconfig(dir, &s, c.name, &dir.join(format!("kubeconfigs/{}.kubeconfig", c.name)))?;
    }
    node_certs(dir, &s, &s.real_nodes())?;
    write_kwok_config(dir, &s)?;
    start_apiserver(dir, &s)?;

    // The controller-manager and scheduler start right away rather than after the
    // apiserver is ready (saves seconds); they retry until it answers. Their
    // delegated authentication reads a ConfigMap at startup which RBAC may not allow
    // yet while the apiserver bootstraps its policy, and would exit on that without
    // --authentication-tolerate-lookup-failure; a background refresh picks it up.
    let certs = |f: &str| path(dir.join("certs").join(f));
    let kcm = path(dir.join("kubeconfigs/kube-controller-manager.kubeconfig"));
    start(
        dir,
        &s,
        &CONTROLLER_MANAGER,
        vec![
            format!("--kubeconfig={kcm}"),
            format!("--authentication-kubeconfig={kcm}"),
            format!("--authorization-kubeconfig={kcm}"),
            "--authentication-tolerate-lookup-failure=true".into(),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={}", s.ports.kube_controller_manager),
            "--leader-elect=false".into(),
            "--use-service-account-credentials=true".into(),
            format!("--service-account-private-key-file={}", certs("sa.key")),
            format!("--root-ca-file={}", certs("ca.crt")),
            format!("--cluster-signing-cert-file={}", certs("ca.crt")),
            format!("--cluster-signing-key-file={}", certs("ca.key")),
            format!("--service-cluster-ip-range={SERVICE_CIDR}"),
            "--cluster-name=bosun-local".into(),
            "--controllers=*".into(),
            "--node-monitor-grace-period=120s".into(),
            "--kube-api-qps=100".into(),
            "--kube-api-burst=200".into(),
            "--profiling=false".into(),
        ],
    )?;
    let sched = path(dir.join("kubeconfigs/kube-scheduler.kubeconfig"));
    start(
        dir,
        &s,
        &SCHEDULER,
        vec![
            format!("--kubeconfig={sched}"),
            format!("--authentication-kubeconfig={sched}"),
            format!("--authorization-kubeconfig={sched}"),
            "--authentication-tolerate-lookup-failure=true".into(),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={}", s.ports.kube_scheduler),
            "--leader-elect=false".into(),
            "--profiling=false".into(),
        ],
    )?;

    // The admin kubeconfig appears under its final name only now, so that
    // `kubeconfig` never hands out a half-written file. kwok uses it too.
    std::fs::rename(dir.join("kubeconfig.tmp"), dir.join("kubeconfig"))?;

    // Node leases (renewed every 10 s) keep the node lifecycle controller from marking
    // the fake nodes unreachable between the rare status heartbeats. After an
    // apiserver outage kwok's lease retries back off for half a minute or more; the
    // controller manager's grace period (120 s, not 50) outlasts that, because a fake
    // node once marked unreachable has its pods marked not Ready, and kwok never makes
    // them Ready again (a test after chaos.rs's apiserver restart saw that).
    start(
        dir,
        &s,
        &KWOK,
        vec![
            format!("--kubeconfig={}", path(dir.join("kubeconfig"))),
            format!("--config={}", path(dir.join("kwok/kwok.yaml"))),
            "--manage-all-nodes=false".into(),
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake".into(),
            "--node-lease-duration-seconds=40".into(),
            "--cidr=10.244.128.0/17".into(),
        ],
    )?;
    start_nodes(dir, &s, &s.real_nodes())?;
    Ok(s)
}

/// A kubeconfig of the local apiserver as IDENTITY's client certificate, mode 600.
fn write_kubeconfig(dir: &StateDir, s: &Cluster, identity: &str, out: &Path) -> Result<()> {
    write_kubeconfig_on(dir, s, &FIRST, identity, out)
}

/// A kubeconfig as IDENTITY for a process on real node `n`: the second node reaches
/// the apiserver at the first node's address (node.sh's network-up says how), the
/// machine itself at the loopback listener.
fn write_kubeconfig_on(dir: &StateDir, s: &Cluster, n: &RealNode, identity: &str, out: &Path) -> Result<()> {
    let pki = Pki::at(&dir.join("certs"));
    let mut config =
        kubeconfig::kubeconfig(&pki, s.ports.apiserver, identity, &Credentials::Certificate(identity.into()), None)?;
    if n.own.is_some() {
        for c in config.clusters.iter_mut().filter_map(|c| c.cluster.as_mut()) {
            c.server = Some(format!("https://{}:{}", FIRST.ip, s.ports.apiserver));
        }
    }
    kubeconfig::write(out, &config).with_context(|| format!("writing {}", out.display()))
}

/// kwok's stage definitions are copied from its module by build.sh. Only the ones we
/// need: nodes become Ready and keep a lease, pods become Ready and Job pods Succeed,
/// deleted pods go away, and claims of the kwok StorageClass get a bound volume (and
/// release/delete it again). The claims' binding is our own stage
/// (`stages/pvc-provision.yaml` says why).
fn write_kwok_config(dir: &StateDir, s: &Cluster) -> Result<()> {
    let stages = s.bin.parent().map(|b| b.join("stages")).unwrap_or_default();
    let files = [
        stages.join("node/fast/node-initialize.yaml"),
        stages.join("node/heartbeat-with-lease/node-heartbeat-with-lease.yaml"),
        stages.join("pod/fast/pod-ready.yaml"),
        stages.join("pod/fast/pod-complete.yaml"),
        stages.join("pod/fast/pod-delete.yaml"),
        script("stages/pvc-provision.yaml"),
        script("stages/local-volume.yaml"),
        stages.join("volume/fast/pv-bind.yaml"),
        stages.join("volume/fast/pvc-delete.yaml"),
        stages.join("volume/fast/pv-delete.yaml"),
    ];
    let volumes = path(dir.join("volumes"));
    let mut docs = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f)
            .with_context(|| format!("kwok stage {} is missing; rebuild with build.sh", f.display()))?;
        let mut text = text.replace(KWOK_VOLUME_ROOT, &volumes);
        if !text.ends_with('\n') {
            text.push('\n');
        }
        docs.push(text);
    }
    std::fs::create_dir_all(dir.join("kwok"))?;
    std::fs::write(dir.join("kwok/kwok.yaml"), docs.join("---\n"))?;
    Ok(())
}

/// kube-apiserver, with the real node's settings when this cluster has one.
fn start_apiserver(dir: &StateDir, s: &Cluster) -> Result<()> {
    let certs = |f: &str| path(dir.join("certs").join(f));
    // With the real node, the `kubernetes` Service's endpoint is the node's address
    // (node.sh's network-up says how pods get from there to the loopback listener),
    // and the apiserver calls kubelets for logs and exec with a certificate of its
    // own. Without it, --advertise-address is loopback, which Endpoints validation
    // rejects, so the Service gets no endpoints.
    let node_args = if s.node.is_ok() {
        vec![
            format!("--advertise-address={NODE_IP}"),
            "--endpoint-reconciler-type=lease".into(),
            format!("--kubelet-client-certificate={}", certs("kube-apiserver-kubelet-client.crt")),
            format!("--kubelet-client-key={}", certs("kube-apiserver-kubelet-client.key")),
            "--kubelet-preferred-address-types=InternalIP".into(),
        ]
    } else {
        vec!["--advertise-address=127.0.0.1".into(), "--endpoint-reconciler-type=none".into()]
    };
    // --cert-dir only keeps the apiserver from writing to /var/run/kubernetes.
    // PodNodeSelector and PodTolerationRestriction send every pod of a namespace to
    // the real node with two namespace annotations (which the placement policy sets).
    let mut args = vec![
        format!("--etcd-servers=http://127.0.0.1:{}", s.ports.etcd),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={}", s.ports.apiserver),
    ];
    args.extend(node_args);
    args.extend([
        format!("--cert-dir={}", path(dir.join("certs"))),
        format!("--tls-cert-file={}", certs("apiserver.crt")),
        format!("--tls-private-key-file={}", certs("apiserver.key")),
        format!("--client-ca-file={}", certs("ca.crt")),
        format!("--service-cluster-ip-range={SERVICE_CIDR}"),
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
        format!("--service-account-key-file={}", certs("sa.pub")),
        format!("--service-account-signing-key-file={}", certs("sa.key")),
        "--authorization-mode=Node,RBAC".into(),
        "--enable-admission-plugins=NodeRestriction,DefaultStorageClass,PodNodeSelector,PodTolerationRestriction,MutatingAdmissionPolicy,MutatingAdmissionWebhook,ValidatingAdmissionWebhook".into(),
        // The namespace placement policy (bootstrap.rs) is a MutatingAdmissionPolicy:
        // beta in 1.34, off unless asked for.
        "--feature-gates=MutatingAdmissionPolicy=true".into(),
        "--runtime-config=admissionregistration.k8s.io/v1beta1=true".into(),
        "--allow-privileged=true".into(),
        "--profiling=false".into(),
    ]);
    start(dir, s, &APISERVER, args)
}

/// Client certificates of the nodes' components (signed by the cluster's CA), and
/// the kubeconfigs of those that call the apiserver.
fn node_certs(dir: &StateDir, s: &Cluster, nodes: &[&RealNode]) -> Result<()> {
    let pki = Pki::at(&dir.join("certs"));
    for n in nodes {
        let mut kubeconfigs =
            vec![(n.identity, n.identity.to_owned()), ("kube-proxy", format!("kube-proxy{}", n.suffix))];
        if n.own.is_none() {
            pki.clients(&pki::node(n.name)).context("certificate generation failed")?;
            kubeconfigs.push(("coredns", "coredns".into()));
        } else {
            pki.clients(&[pki::kubelet(n.identity, n.name)]).context("certificate generation failed")?;
        }
        for (identity, file) in kubeconfigs {
            write_kubeconfig_on(dir, s, n, identity, &dir.join(format!("kubeconfigs/{file}.kubeconfig")))?;
        }
    }
    Ok(())
}

/// After the control plane, on each of `nodes` at once: its configuration,
/// containerd, the images (imported in parallel: a cold import takes 16-30 s),
/// kubelet, kube-proxy, and on the first node CoreDNS.
fn start_nodes(dir: &StateDir, s: &Cluster, nodes: &[&RealNode]) -> Result<()> {
    for n in nodes {
        node_step(dir, Some(&s.ports), n, "configs")?;
        let config = path(n.path(dir.path()).join("containerd.toml"));
        start_on(dir, s, n, &n.containerd, vec!["--config".into(), config, "--log-level".into(), "warn".into()])?;
    }
    for n in nodes {
        wait_containerd(dir, n)?;
    }
    std::thread::scope(|scope| {
        let imports: Vec<_> = nodes.iter().map(|n| scope.spawn(|| import_images(dir, n))).collect();
        imports.into_iter().try_for_each(|i| i.join().unwrap_or_else(|_| Err(anyhow!("importing the images panicked"))))
    })?;
    for n in nodes {
        start_kubelet_and_proxy(dir, s, n)?;
    }
    if nodes.contains(&&FIRST) {
        start(dir, s, &COREDNS, vec!["-conf".into(), path(FIRST.path(dir.path()).join("Corefile"))])?;
        // Tells node.sh's `unsupported` of another cluster that this node is in use.
        std::fs::write(FIRST.path(dir.path()).join("up"), "")?;
    }
    Ok(())
}

/// Waits until real node `n`'s containerd answers on its socket.
fn wait_containerd(dir: &StateDir, n: &RealNode) -> Result<()> {
    let socket = n.socket(dir.path());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answers = || {
            Command::new("ctr")
                .arg("-a")
                .arg(&socket)
                .arg("version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
        };
        if socket.exists() && answers().is_ok_and(|st| st.success()) {
            return Ok(());
        }
        if dir.pid(&n.containerd).is_none() {
            bail!("{} exited; see {}", n.containerd.name, dir.log(n.containerd.name).display());
        }
        if Instant::now() > deadline {
            bail!(
                "{} does not answer on {} after 30 s; see {}",
                n.containerd.name,
                socket.display(),
                dir.log(n.containerd.name).display()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// hack/images.sh's images (built once, cached) into real node `n`'s containerd.
fn import_images(dir: &StateDir, n: &RealNode) -> Result<()> {
    let name = format!("images{}", n.suffix);
    let log_path = dir.log(&name);
    let images_log = std::fs::File::create(&log_path)?;
    let what = format!("building and importing {}'s images (log: {})", n.name, log_path.display());
    let imported = crate::supervise::speaking(&what, Some(&log_path), log, || {
        Command::new(repo_root().join("hack/images.sh"))
            .arg("import")
            .arg("--address")
            .arg(n.socket(dir.path()))
            .stdin(Stdio::null())
            .stdout(images_log.try_clone()?)
            .stderr(images_log)
            .status()
    })?;
    if !imported.success() {
        bail!(
            "importing the images into real node {} failed; see {}:\n{}",
            n.name,
            log_path.display(),
            dir.log_tail(&name, 20)
        );
    }
    Ok(())
}

fn start_kubelet_and_proxy(dir: &StateDir, s: &Cluster, n: &RealNode) -> Result<()> {
    let node = |f: &str| path(n.path(dir.path()).join(f));
    let kubeconfig = |name: &str| path(dir.join(format!("kubeconfigs/{name}.kubeconfig")));
    start_on(
        dir,
        s,
        n,
        &n.kubelet,
        vec![
            format!("--config={}", node("kubelet.yaml")),
            format!("--kubeconfig={}", kubeconfig(n.identity)),
            format!("--root-dir={}", node("kubelet")),
            format!("--cert-dir={}", node("kubelet/pki")),
            format!("--hostname-override={}", n.name),
            format!("--node-ip={}", n.ip),
            format!("--node-labels={NODE_LABEL}=true"),
            "--v=1".into(),
        ],
    )?;
    start_on(
        dir,
        s,
        n,
        &n.kube_proxy,
        vec![
            format!("--kubeconfig={}", kubeconfig(&format!("kube-proxy{}", n.suffix))),
            "--proxy-mode=nftables".into(),
            format!("--hostname-override={}", n.name),
            format!("--nodeport-addresses={}", n.cidr),
            format!("--metrics-bind-address={}:{}", n.probe_host(), s.ports.kube_proxy_metrics),
            format!("--healthz-bind-address={}:{}", n.probe_host(), s.ports.kube_proxy_healthz),
            "--conntrack-max-per-core=0".into(),
            "--conntrack-tcp-timeout-established=0".into(),
            "--conntrack-tcp-timeout-close-wait=0".into(),
            "--v=1".into(),
        ],
    )
}

/// A running cluster started without the real node gets it once the machine can run
/// it (e.g. after hack/prerequisites.sh installed containerd): the node's network,
/// certificates and daemons start, and kube-apiserver restarts with the node's
/// settings. etcd and everything stored in it stay. When the machine still cannot,
/// the reason is found anew and recorded. The second node is added the same way (the
/// apiserver needs no restart for it).
fn add_node(dir: &StateDir, mut s: Cluster) -> Result<Cluster> {
    if s.node.is_ok() {
        return add_second_node(dir, s);
    }
    let before = s.node.clone().err().unwrap_or_default();
    match pick_node(dir) {
        Err(why) => {
            s.node = Err(why);
            save(dir, &s)?;
        }
        Ok(node_bin) => {
            log(&format!("real node was missing ({before}); this machine can run it now: adding it"));
            node_step(dir, Some(&s.ports), &FIRST, "network-up")?;
            s.node = Ok(node_bin);
            s.node_2 = Err("added after the first".into());
            save(dir, &s)?;
            node_certs(dir, &s, &[&FIRST])?;
            stop_one(dir, &APISERVER)?;
            start_apiserver(dir, &s)?;
            start_nodes(dir, &s, &[&FIRST])?;
            return add_second_node(dir, s);
        }
    }
    Ok(s)
}

fn add_second_node(dir: &StateDir, mut s: Cluster) -> Result<Cluster> {
    let before = s.node_2.clone().err().unwrap_or_default();
    s.node_2 = pick_second_node(dir);
    if s.node_2.is_ok() {
        log(&format!("real node {} was missing ({before}): adding it", SECOND.name));
        node_step(dir, Some(&s.ports), &SECOND, "network-up")?;
        save(dir, &s)?;
        node_certs(dir, &s, &[&SECOND])?;
        start_nodes(dir, &s, &[&SECOND])?;
    } else {
        save(dir, &s)?;
    }
    Ok(s)
}

// --- stop ------------------------------------------------------------------------------

/// Every process of the cluster at once (nothing needs an orderly shutdown: the data
/// is thrown away), SIGKILL after 5 s; then the nodes' containers, and what the nodes
/// left on the machine (node.sh's teardown, the second node's first: the first's
/// puts back the machine-wide settings).
fn stop_all(dir: &StateDir) -> Result<()> {
    dir.stop(&all(), |_| Signal::SIGTERM, Duration::from_secs(5))?;
    if node_owned(dir) {
        for n in &REAL_NODES {
            stop_containers(dir, n);
        }
    }
    for n in REAL_NODES.iter().rev() {
        node_step(dir, None, n, "teardown")?;
    }
    Ok(())
}

/// Whether the machine's real nodes are this cluster's (one pair per machine).
fn node_owned(dir: &StateDir) -> bool {
    dir.join(FIRST.dir).exists()
        || std::fs::read_to_string(NODE_OWNER).is_ok_and(|owner| Path::new(owner.trim()) == dir.path())
}

/// Real node `n`'s containers and their shims, which outlive containerd: killed once
/// kubelet and containerd are gone (nothing restarts them then), containers first so
/// that none outlives its shim. Then node.sh's teardown finds only files, mounts and
/// rules to remove.
fn stop_containers(dir: &StateDir, n: &RealNode) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let pids = n.container_pids();
        if pids.is_empty() || Instant::now() > deadline {
            break;
        }
        for pid in pids {
            signal_pid(pid, Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let shims = shims(dir, n);
    for pid in &shims {
        signal_pid(*pid, Signal::SIGKILL);
    }
    await_reaped(&shims, Duration::from_secs(5));
}

/// The containerd shims of real node `n` (told apart by their containerd's socket).
fn shims(dir: &StateDir, n: &RealNode) -> Vec<u32> {
    let address = format!("-address {} ", n.socket(dir.path()).display());
    processes(|exe, cmdline| exe == "containerd-shim-runc-v2" && format!("{cmdline} ").contains(&address))
}

/// SIGTERM to one component and wait until it has exited (SIGKILL after 10 s: the
/// apiserver drains its requests first).
fn stop_one(dir: &StateDir, c: &Component) -> Result<()> {
    let Some(pid) = dir.pid(c) else {
        log(&format!("{} is not running", c.name));
        return Ok(());
    };
    log(&format!("stopping {} (pid {pid})", c.name));
    let t0 = Instant::now();
    dir.stop(&[*c], |_| Signal::SIGTERM, Duration::from_secs(10))?;
    log(&format!("{} stopped after {:.1}s", c.name, t0.elapsed().as_secs_f64()));
    Ok(())
}

// --- health ------------------------------------------------------------------------------

/// The health checks of one verb: a runtime for kube's client, and the admin's client
/// once the admin kubeconfig exists.
struct Probe {
    rt: Runtime,
    admin: Option<Client>,
}

impl Probe {
    fn new() -> Result<Probe> {
        Ok(Probe { rt: tokio::runtime::Builder::new_current_thread().enable_all().build()?, admin: None })
    }

    fn admin(&mut self, dir: &StateDir) -> std::result::Result<Client, Waiting> {
        if let Some(c) = &self.admin {
            return Ok(c.clone());
        }
        let kubeconfig = record(dir).kubeconfig();
        let client = self
            .rt
            .block_on(bootstrap::client(&kubeconfig))
            .map_err(|e| Waiting { what: format!("the admin kubeconfig ({e:#})"), culprit: "kube-apiserver" })?;
        self.admin = Some(client.clone());
        Ok(client)
    }

    /// Waits until the cluster (or with `apiserver_only`, etcd and the apiserver)
    /// is healthy, logging the stages reached.
    fn wait(
        &mut self,
        dir: &StateDir,
        s: &Cluster,
        started: Instant,
        apiserver_only: bool,
    ) -> std::result::Result<(), Unhealthy> {
        let timeout = Duration::from_secs(
            std::env::var("BOSUN_CLUSTER_TIMEOUT").ok().and_then(|t| t.parse().ok()).unwrap_or(120),
        );
        let probe = std::cell::RefCell::new(self);
        let check = || {
            let mut p = probe.borrow_mut();
            let admin = p.admin(dir)?;
            if apiserver_only {
                p.rt.block_on(bootstrap::apiserver(s, &admin))
            } else {
                p.rt.block_on(bootstrap::cluster(dir, s, &admin))
            }
        };
        let explain = |w: &Waiting| {
            if w.culprit != APISERVER.name {
                return String::new();
            }
            let mut p = probe.borrow_mut();
            let Ok(admin) = p.admin(dir) else { return String::new() };
            format!("\nfailing readiness checks:\n{}", p.rt.block_on(bootstrap::failing_readyz(&admin)))
        };
        dir.wait_healthy(|| components(dir, s), check, started, timeout, log, explain)
    }
}

// --- verbs ------------------------------------------------------------------------------

/// Builds what is missing, starts the cluster (a no-op when it runs; a running
/// cluster without its node gets it when the machine can now run it) and waits until
/// it is healthy.
pub fn up(dir: &StateDir) -> Result<Cluster> {
    let started = Instant::now();
    let _lock = dir.lock()?;
    // Under the lock, so that concurrent `up`s wait for one cold build instead of
    // each starting their own; returns at once when the cache is complete.
    let bin = build(None)?;
    let mut s = match running(dir).ok() {
        Some(s) => {
            if s.bin != bin {
                log(&format!(
                    "warning: the running cluster uses {}, not {}; run down and up to switch",
                    s.bin.display(),
                    bin.display()
                ));
            }
            log("already running; checking health");
            for n in s.real_nodes() {
                mend(dir, &s, n)?;
            }
            if s.node.is_ok() && s.node_2.is_ok() { s } else { add_node(dir, s)? }
        }
        None => {
            dir.clear(&all(), stop_all, log)?;
            let node = pick_node(dir);
            let node_2 = match node {
                Ok(_) => pick_second_node(dir),
                Err(_) => Err("no first real node".into()),
            };
            log(&format!("starting control plane in {}", dir.path().display()));
            start_cluster(dir, &bin, node, node_2)?
        }
    };
    let mut probe = Probe::new()?;
    let mut result = probe.wait(dir, &s, started, false);
    if result.as_ref().is_err_and(Unhealthy::port_conflict) {
        log("port conflict; restarting with other ports");
        stop_all(dir)?;
        dir.remove()?;
        s = start_cluster(dir, &bin, s.node.clone(), s.node_2.clone())?;
        probe = Probe::new()?;
        result = probe.wait(dir, &s, started, false);
    }
    match result {
        Ok(()) => log(&format!(
            "cluster healthy after {:.1}s (kubeconfig: {})",
            started.elapsed().as_secs_f64(),
            record(dir).kubeconfig().display()
        )),
        Err(Unhealthy::Exited { name, log: tail }) => bail!(
            "{name} exited; last lines of {}:\n{tail}\ncluster failed to start ('hack/controlplane/cluster.sh down' cleans up)",
            dir.log(name).display()
        ),
        Err(e) => bail!("{e}\ncluster left running for inspection; 'hack/controlplane/cluster.sh down' stops it"),
    }
    match (&s.node, &s.node_2) {
        (Ok(_), node_2) => {
            let names: Vec<&str> = s.real_nodes().iter().map(|n| n.name).collect();
            log(&format!(
                "real nodes {}: Ready (pods with node selector {NODE_LABEL}=true and its toleration run there)",
                names.join(" and ")
            ));
            if let Err(why) = node_2 {
                log(&format!("second real node: MISSING — {why}; tests that lose a node will fail"));
            }
        }
        (Err(why), _) => log(&format!("real node: MISSING — {why}; tests that need it will fail")),
    }
    Ok(s)
}

/// Stops every component, puts the machine back as the node found it and removes the
/// state directory.
pub fn down(dir: &StateDir) -> Result<()> {
    dir.tear_down(&all(), stop_all, log)
}

/// The running cluster, or an error saying how to start it.
pub fn running(dir: &StateDir) -> Result<Cluster> {
    record(dir)
        .cluster()
        .filter(|s| {
            let c = components(dir, s);
            dir.alive(&c) == c.len() && record(dir).kubeconfig().exists()
        })
        .ok_or_else(|| anyhow!("no local cluster running; start it with 'make cluster'"))
}

/// The components, pids and ports; Ok(true) when all run.
pub fn status(dir: &StateDir) -> Result<(String, bool)> {
    let mut out = format!("state directory: {}\n", dir.path().display());
    let s = record(dir).cluster();
    let list = s.as_ref().map(|s| components(dir, s)).unwrap_or_else(|| CONTROL_PLANE.to_vec());
    let mut all = true;
    for c in &list {
        let port = s.as_ref().map(|s| component_port(c, &s.ports)).unwrap_or_else(|| "?".into());
        match dir.pid(c) {
            Some(pid) => writeln!(out, "{:<24} running  pid {pid:<8} port {port}", c.name)?,
            None => {
                writeln!(out, "{:<24} stopped", c.name)?;
                all = false;
            }
        }
    }
    if let (true, Some(s)) = (all, &s) {
        let mut probe = Probe::new()?;
        let readyz = match probe.admin(dir) {
            Ok(admin) => probe.rt.block_on(bootstrap::readyz(&admin)),
            Err(w) => w.what,
        };
        writeln!(out, "apiserver: https://127.0.0.1:{} (/readyz: {readyz})", s.ports.apiserver)?;
        writeln!(out, "kubeconfig: {}", record(dir).kubeconfig().display())?;
    }
    if let Some(s) = &s {
        for (name, state) in node_states(dir, s) {
            writeln!(out, "real node {name}: {state}")?;
        }
    }
    Ok((out, all && s.is_some()))
}

/// Each real node's name and state, as `status` prints it.
fn node_states(dir: &StateDir, s: &Cluster) -> Vec<(&'static str, String)> {
    let why = |r: &std::result::Result<(), String>| r.clone().err().unwrap_or_default();
    REAL_NODES
        .iter()
        .map(|n| {
            let state = match (s.real_nodes().contains(&n), n.broken(dir.path())) {
                (false, _) if *n == FIRST => format!("missing — {}", s.node.clone().err().unwrap_or_default()),
                (false, _) => format!("missing — {}", why(&s.node_2)),
                (true, None) => "running".to_owned(),
                (true, Some(Broken::Stopped)) => format!("stopped (cluster.sh node start {})", n.name),
                (true, Some(Broken::Partitioned)) => format!("partitioned (cluster.sh node heal {})", n.name),
            };
            (n.name, state)
        })
        .collect()
}

fn component_port(c: &Component, p: &Ports) -> String {
    let on = |n: &RealNode| if n.own.is_some() { format!(" on {}", n.ip) } else { String::new() };
    let node = REAL_NODES.iter().find(|n| n.components().contains(c)).copied().unwrap_or(FIRST);
    match *c {
        ETCD => format!("{} (peer {})", p.etcd, p.etcd_peer),
        APISERVER => p.apiserver.to_string(),
        CONTROLLER_MANAGER => p.kube_controller_manager.to_string(),
        SCHEDULER => p.kube_scheduler.to_string(),
        COREDNS => format!("53 on {NODE_IP}"),
        _ if *c == node.kubelet => format!("{} (healthz {}){}", p.kubelet, p.kubelet_healthz, on(&node)),
        _ if *c == node.kube_proxy => format!("{} (healthz){}", p.kube_proxy_healthz, on(&node)),
        _ => "-".into(),
    }
}

/// For chaos tests: the apiserver goes away (gracefully) and comes back `outage`
/// later on the same port with the same state and arguments, as in a control-plane
/// upgrade; clients must ride it out. The other components stay up and reconnect.
pub fn restart_apiserver(dir: &StateDir, outage: Duration) -> Result<()> {
    let _lock = dir.lock()?;
    let s = running(dir)?;
    stop_one(dir, &APISERVER)?;
    if !outage.is_zero() {
        log(&format!("kube-apiserver down for {:.1}s", outage.as_secs_f64()));
        std::thread::sleep(outage);
    }
    log("starting kube-apiserver");
    dir.restart(&APISERVER)?;
    let started = Instant::now();
    Probe::new()?
        .wait(dir, &s, started, true)
        .map_err(|e| anyhow!("{e}\nkube-apiserver failed to restart; 'make cluster' (up) restarts the cluster"))?;
    log(&format!("kube-apiserver ready after {:.1}s", started.elapsed().as_secs_f64()));
    Ok(())
}

/// A kubeconfig for ServiceAccount `namespace/name` with a token valid `duration`.
pub fn sa_kubeconfig(dir: &StateDir, namespace: &str, name: &str, duration: Duration) -> Result<String> {
    let s = running(dir)?;
    let mut probe = Probe::new()?;
    let admin = probe.admin(dir).map_err(|w| anyhow!("{}", w.what))?;
    let token = probe.rt.block_on(async {
        let request = TokenRequest {
            spec: TokenRequestSpec {
                expiration_seconds: Some(i64::try_from(duration.as_secs())?),
                ..TokenRequestSpec::default()
            },
            ..TokenRequest::default()
        };
        let api: Api<ServiceAccount> = Api::namespaced(admin, namespace);
        let issued = api.create_token_request(name, &PostParams::default(), &request).await?;
        anyhow::Ok(issued.status.map(|st| st.token).unwrap_or_default())
    });
    let token = token.with_context(|| format!("could not get a token for ServiceAccount {namespace}/{name}"))?;
    let pki = Pki::at(&dir.join("certs"));
    let user = format!("{namespace}-{name}");
    let config = kubeconfig::kubeconfig(&pki, s.ports.apiserver, &user, &Credentials::Token(token), Some(namespace))?;
    kubeconfig::to_yaml(&config)
}

/// What a test does to a real node (`cluster.sh node ACTION NAME`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeAction {
    /// Power loss: its kubelet, containerd, (the second node's) kube-proxy and every
    /// container process killed in the same instant.
    Stop,
    /// After a stop: its daemons started again as they were; kubelet restarts the pods
    /// still bound to it.
    Start,
    /// Cut off the network (the second node only: the first shares the machine's
    /// network namespace with the control plane); its processes run on.
    Partition,
    /// After a partition: back on the network.
    Heal,
}

/// For tests of losing a node: breaks or mends real node `name`, and after a mend
/// waits until the cluster (that node included) is healthy again. A broken node is
/// marked in its directory, so that the health checks, `status` and `running` leave
/// it out until it is mended; `up` mends it too.
pub fn node(dir: &StateDir, action: NodeAction, name: &str) -> Result<()> {
    let _lock = dir.lock()?;
    let s = running(dir)?;
    let Some(n) = RealNode::by_name(name).filter(|n| s.real_nodes().contains(n)) else {
        let names: Vec<&str> = s.real_nodes().iter().map(|n| n.name).collect();
        bail!(
            "no real node '{name}' in this cluster (it runs: {})",
            if names.is_empty() { "none".into() } else { names.join(", ") }
        );
    };
    let broken = n.broken(dir.path());
    match (action, broken) {
        (NodeAction::Stop, None) => stop_node(dir, n),
        (NodeAction::Partition, None) => partition_node(dir, &s, n),
        (NodeAction::Start, Some(Broken::Stopped)) | (NodeAction::Heal, Some(Broken::Partitioned)) => {
            let started = Instant::now();
            mend(dir, &s, n)?;
            Probe::new()?
                .wait(dir, &s, started, false)
                .map_err(|e| anyhow!("{e}\n{} did not come back; 'make cluster' (up) tries again", n.name))?;
            log(&format!("{} back and the cluster healthy after {:.1}s", n.name, started.elapsed().as_secs_f64()));
            Ok(())
        }
        (NodeAction::Start | NodeAction::Heal, None) => {
            log(&format!("{} is not broken; nothing to do", n.name));
            Ok(())
        }
        (_, Some(b)) => bail!(
            "{} is {}: '{}' it first",
            n.name,
            b.marker(),
            if b == Broken::Stopped { "node start" } else { "node heal" }
        ),
    }
}

fn mark(dir: &StateDir, n: &RealNode, b: Broken) -> Result<()> {
    std::fs::write(n.path(dir.path()).join(b.marker()), "")
        .with_context(|| format!("marking {} {}", n.name, b.marker()))
}

fn stop_node(dir: &StateDir, n: &RealNode) -> Result<()> {
    let t0 = Instant::now();
    // Marked first: a concurrent `running` must not take the dead daemons for a
    // broken cluster.
    mark(dir, n, Broken::Stopped)?;
    n.freeze(true);
    let daemons: Vec<u32> = n.killed_by_stop().iter().filter_map(|c| dir.pid(c)).collect();
    let containers = n.container_pids();
    for pid in daemons.iter().chain(&containers).chain(&shims(dir, n)) {
        signal_pid(*pid, Signal::SIGKILL);
    }
    n.freeze(false);
    stop_containers(dir, n);
    await_reaped(&daemons, Duration::from_secs(5));
    log(&format!(
        "{} stopped: {} daemons and {} container processes killed in {:.1}s",
        n.name,
        daemons.len(),
        containers.len(),
        t0.elapsed().as_secs_f64()
    ));
    Ok(())
}

fn partition_node(dir: &StateDir, s: &Cluster, n: &RealNode) -> Result<()> {
    if n.own.is_none() {
        bail!(
            "{} shares the machine's network namespace with the control plane: only {} can be partitioned",
            n.name,
            SECOND.name
        );
    }
    mark(dir, n, Broken::Partitioned)?;
    node_step(dir, Some(&s.ports), n, "partition")?;
    log(&format!("{} partitioned: nothing passes between it and the rest of the cluster", n.name));
    Ok(())
}

/// Starts a node's kubelet again after a power loss, and again while it exits within
/// its first seconds, as systemd's `Restart=on-failure` does on a real node: containerd
/// answers on its socket before its CRI has recovered its containers, and a kubelet that
/// asks it then ("server is not initialized yet") exits at once.
fn restart_kubelet(dir: &StateDir, kubelet: &Component) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let pid = dir.restart(kubelet)?;
        let settled = Instant::now() + Duration::from_secs(2);
        while Instant::now() < settled && crate::supervise::running(pid) {
            std::thread::sleep(Duration::from_millis(50));
        }
        if crate::supervise::running(pid) {
            return Ok(());
        }
        let tail = dir.log_tail(kubelet.name, 1);
        if Instant::now() > deadline {
            bail!("{} exits at start, still after 30 s; its last line:\n{tail}", kubelet.name);
        }
        log(&format!("{} exited at start ({}); starting it again", kubelet.name, tail.trim()));
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Undoes a test's stop or partition of real node `n` (nothing when it is whole).
fn mend(dir: &StateDir, s: &Cluster, n: &RealNode) -> Result<()> {
    match n.broken(dir.path()) {
        None => return Ok(()),
        Some(Broken::Stopped) => {
            log(&format!("starting {} again", n.name));
            if n.own.is_some() {
                node_step(dir, Some(&s.ports), n, "power-on")?;
            }
            dir.restart(&n.containerd)?;
            wait_containerd(dir, n)?;
            for c in n.killed_by_stop().iter().filter(|c| **c != n.containerd) {
                if *c == n.kubelet {
                    restart_kubelet(dir, c)?;
                } else {
                    dir.restart(c)?;
                }
            }
        }
        Some(Broken::Partitioned) => {
            log(&format!("healing {}'s partition", n.name));
            node_step(dir, Some(&s.ports), n, "heal")?;
        }
    }
    for b in [Broken::Stopped, Broken::Partitioned] {
        let _ = std::fs::remove_file(n.path(dir.path()).join(b.marker()));
    }
    Ok(())
}
