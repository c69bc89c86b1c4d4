//! The local Kubernetes control plane (`hack/controlplane/cluster.sh
//! up|down|status|kubeconfig|env|sa-kubeconfig|restart-apiserver`): etcd,
//! kube-apiserver, kube-controller-manager and kube-scheduler built from the pinned
//! upstream sources (`hack/controlplane/build.sh`), plus kwok, which plays the
//! kubelets of a few fake nodes (pods become Running/Ready, Job pods Succeed, claims
//! get bound) without any container runtime; and beside them one real node:
//! containerd, runc, kubelet, kube-proxy and CoreDNS, for the pods that must really
//! run. This module starts, checks and stops them all on [`supervise`]; the machine
//! steps of the node (its network rules, sysctls, cgroups, configuration files) are
//! `hack/controlplane/node.sh`'s, the images `hack/images.sh`'s.
//!
//! The state directory's layout is [`crate::cluster`]'s. Progress goes to stderr;
//! stdout only carries what a caller may capture (a kubeconfig path, an export line,
//! a ServiceAccount's kubeconfig).
//!
//! [`supervise`]: crate::supervise

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
/// Where kwok's volume stages put hostPath volumes; ours go into the state directory.
const KWOK_VOLUME_ROOT: &str = "/tmp/kwok-local-path-provisioner";
// The real node (one per machine: its bridge, address and DNS port are machine-wide).
pub const NODE_NAME: &str = "bosun-node";
pub const NODE_LABEL: &str = "bosun.dev/real-node";
pub const NODE_IP: &str = "10.245.0.1";
/// A namespace's label choosing where its pods run: `fake` (the kwok nodes) or `real`
/// (the real node). Without it, a namespace made while the real node runs gets the real
/// node (see `bootstrap::placement_policy`).
pub const NODES_LABEL: &str = "bosun.dev/nodes";
const NODE_CIDR: &str = "10.245.0.0/24";
const NODE_BRIDGE: &str = "bosun0";
/// Which cluster's state directory the machine's real node belongs to.
const NODE_OWNER: &str = "/run/bosun-node.owner";

pub const ETCD: Component = Component::named("etcd");
pub const APISERVER: Component = Component::named("kube-apiserver");
pub const CONTROLLER_MANAGER: Component = Component::named("kube-controller-manager");
pub const SCHEDULER: Component = Component::named("kube-scheduler");
pub const KWOK: Component = Component::named("kwok");
pub const CONTAINERD: Component = Component::named("containerd");
pub const KUBELET: Component = Component::named("kubelet");
pub const KUBE_PROXY: Component = Component::named("kube-proxy");
pub const COREDNS: Component = Component::named("coredns");
const CONTROL_PLANE: [Component; 5] = [ETCD, APISERVER, CONTROLLER_MANAGER, SCHEDULER, KWOK];
const NODE: [Component; 4] = [CONTAINERD, KUBELET, KUBE_PROXY, COREDNS];

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
    CONTROL_PLANE.into_iter().chain(NODE).collect()
}

/// The components `c` runs.
fn components(c: &Cluster) -> Vec<Component> {
    let mut all = CONTROL_PLANE.to_vec();
    if c.node.is_ok() {
        all.extend(NODE);
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

/// `node.sh STEP` with the cluster's shape (the one copy of it is here) and, once
/// there are any, its ports.
fn node_step(dir: &StateDir, ports: Option<&Ports>, step: &str) -> Result<String> {
    let mut cmd = Command::new(script("node.sh"));
    cmd.arg(step).env("BOSUN_CLUSTER_DIR", dir.path()).envs([
        ("NODE_NAME", NODE_NAME),
        ("NODE_BRIDGE", NODE_BRIDGE),
        ("NODE_CIDR", NODE_CIDR),
        ("NODE_IP", NODE_IP),
        ("NODE_LABEL", NODE_LABEL),
        ("SERVICE_CIDR", SERVICE_CIDR),
        ("FIRST_SERVICE_IP", FIRST_SERVICE_IP),
        ("DNS_SERVICE_IP", DNS_SERVICE_IP),
        ("CLUSTER_DOMAIN", CLUSTER_DOMAIN),
    ]);
    if let Some(p) = ports {
        cmd.env("APISERVER_PORT", p.apiserver.to_string())
            .env("KUBELET_PORT", p.kubelet.to_string())
            .env("KUBELET_HEALTHZ_PORT", p.kubelet_healthz.to_string());
    }
    run(&mut cmd).with_context(|| format!("the real node's step '{step}'"))
}

/// Whether this cluster gets the real node: the node build's `bin` directory, or why
/// this machine cannot run it.
fn pick_node(dir: &StateDir) -> std::result::Result<PathBuf, String> {
    let why = node_step(dir, None, "unsupported").map_err(|e| format!("{e:#}"))?;
    if !why.trim().is_empty() {
        return Err(why.trim().to_owned());
    }
    build(Some("node")).map_err(|_| "building kubelet, kube-proxy and CoreDNS failed".to_owned())
}

/// The executable a component runs: containerd is Debian's, the node's own
/// components come from the node build, the rest from the control plane build.
fn program(c: &Component, s: &Cluster) -> Result<PathBuf> {
    match *c {
        CONTAINERD => which("containerd"),
        KUBELET | KUBE_PROXY | COREDNS => {
            Ok(s.node.as_ref().map_err(|why| anyhow!("no real node: {why}"))?.join(c.name))
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

fn path(p: PathBuf) -> String {
    p.display().to_string()
}

// --- start ---------------------------------------------------------------------------

fn start_cluster(dir: &StateDir, bin: &Path, node: std::result::Result<PathBuf, String>) -> Result<Cluster> {
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
    let s = Cluster { ports, bin: bin.to_owned(), node };
    save(dir, &s)?;
    // The real node's bridge carries the address the apiserver advertises, so it
    // comes first; a machine that cannot run containers gets the rest.
    if s.node.is_ok() {
        node_step(dir, Some(&s.ports), "network-up")?;
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
    if s.node.is_ok() {
        node_certs(dir, &s)?;
    }
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
    if s.node.is_ok() {
        start_node(dir, &s)?;
    }
    Ok(s)
}

/// A kubeconfig of the local apiserver as IDENTITY's client certificate, mode 600.
fn write_kubeconfig(dir: &StateDir, s: &Cluster, identity: &str, out: &Path) -> Result<()> {
    let pki = Pki::at(&dir.join("certs"));
    let config =
        kubeconfig::kubeconfig(&pki, s.ports.apiserver, identity, &Credentials::Certificate(identity.into()), None)?;
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

/// Client certificates of the node's components (signed by the cluster's CA), and
/// the kubeconfigs of those that call the apiserver.
fn node_certs(dir: &StateDir, s: &Cluster) -> Result<()> {
    Pki::at(&dir.join("certs")).clients(&pki::node(NODE_NAME)).context("certificate generation failed")?;
    for c in ["node", "kube-proxy", "coredns"] {
        write_kubeconfig(dir, s, c, &dir.join(format!("kubeconfigs/{c}.kubeconfig")))?;
    }
    Ok(())
}

/// After the control plane: the node's configuration, containerd, the images,
/// kubelet, kube-proxy, CoreDNS.
fn start_node(dir: &StateDir, s: &Cluster) -> Result<()> {
    node_step(dir, Some(&s.ports), "configs")?;
    let node = |f: &str| path(dir.join("node").join(f));
    start(dir, s, &CONTAINERD, vec!["--config".into(), node("containerd.toml"), "--log-level".into(), "warn".into()])?;
    let socket = record(dir).containerd_socket();
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
            break;
        }
        if dir.pid(&CONTAINERD).is_none() {
            bail!("containerd exited; see {}", dir.log("containerd").display());
        }
        if Instant::now() > deadline {
            bail!(
                "containerd does not answer on {} after 30 s; see {}",
                socket.display(),
                dir.log("containerd").display()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let images_log = std::fs::File::create(dir.log("images"))?;
    let what = format!("building and importing the real node's images (log: {})", dir.log("images").display());
    let imported = crate::supervise::speaking(&what, Some(&dir.log("images")), log, || {
        Command::new(repo_root().join("hack/images.sh"))
            .arg("import")
            .arg("--address")
            .arg(&socket)
            .stdin(Stdio::null())
            .stdout(images_log.try_clone()?)
            .stderr(images_log)
            .status()
    })?;
    if !imported.success() {
        bail!(
            "importing the images into the real node failed; see {}:\n{}",
            dir.log("images").display(),
            dir.log_tail("images", 20)
        );
    }
    start(
        dir,
        s,
        &KUBELET,
        vec![
            format!("--config={}", node("kubelet.yaml")),
            format!("--kubeconfig={}", path(dir.join("kubeconfigs/node.kubeconfig"))),
            format!("--root-dir={}", node("kubelet")),
            format!("--cert-dir={}", node("kubelet/pki")),
            format!("--hostname-override={NODE_NAME}"),
            format!("--node-ip={NODE_IP}"),
            format!("--node-labels={NODE_LABEL}=true"),
            "--v=1".into(),
        ],
    )?;
    start(
        dir,
        s,
        &KUBE_PROXY,
        vec![
            format!("--kubeconfig={}", path(dir.join("kubeconfigs/kube-proxy.kubeconfig"))),
            "--proxy-mode=nftables".into(),
            format!("--hostname-override={NODE_NAME}"),
            format!("--nodeport-addresses={NODE_CIDR}"),
            format!("--metrics-bind-address=127.0.0.1:{}", s.ports.kube_proxy_metrics),
            format!("--healthz-bind-address=127.0.0.1:{}", s.ports.kube_proxy_healthz),
            "--conntrack-max-per-core=0".into(),
            "--conntrack-tcp-timeout-established=0".into(),
            "--conntrack-tcp-timeout-close-wait=0".into(),
            "--v=1".into(),
        ],
    )?;
    start(dir, s, &COREDNS, vec!["-conf".into(), node("Corefile")])?;
    // Tells node.sh's `unsupported` of another cluster that this node is in use.
    std::fs::write(dir.join("node/up"), "")?;
    Ok(())
}

/// A running cluster started without the real node gets it once the machine can run
/// it (e.g. after hack/prerequisites.sh installed containerd): the node's network,
/// certificates and daemons start, and kube-apiserver restarts with the node's
/// settings. etcd and everything stored in it stay. When the machine still cannot,
/// the reason is found anew and recorded.
fn add_node(dir: &StateDir, mut s: Cluster) -> Result<Cluster> {
    let before = s.node.clone().err().unwrap_or_default();
    match pick_node(dir) {
        Err(why) => {
            s.node = Err(why);
            save(dir, &s)?;
        }
        Ok(node_bin) => {
            log(&format!("real node was missing ({before}); this machine can run it now: adding it"));
            node_step(dir, Some(&s.ports), "network-up")?;
            s.node = Ok(node_bin);
            save(dir, &s)?;
            node_certs(dir, &s)?;
            stop_one(dir, &APISERVER)?;
            start_apiserver(dir, &s)?;
            start_node(dir, &s)?;
        }
    }
    Ok(s)
}

// --- stop ------------------------------------------------------------------------------

/// Every process of the cluster at once (nothing needs an orderly shutdown: the data
/// is thrown away), SIGKILL after 5 s; then the node's containers, and what the node
/// left on the machine (node.sh's teardown).
fn stop_all(dir: &StateDir) -> Result<()> {
    dir.stop(&all(), |_| Signal::SIGTERM, Duration::from_secs(5))?;
    stop_containers(dir);
    node_step(dir, None, "teardown")?;
    Ok(())
}

/// Whether the machine's real node is this cluster's (one per machine).
fn node_owned(dir: &StateDir) -> bool {
    dir.join("node").exists()
        || std::fs::read_to_string(NODE_OWNER).is_ok_and(|owner| Path::new(owner.trim()) == dir.path())
}

/// The processes of the real node's containers: every process in a `kubepods`
/// cgroup, in whichever hierarchies this machine mounts (v1 controllers, a hybrid's
/// `unified/`, or a pure v2 tree).
fn container_pids() -> Vec<u32> {
    let roots = std::fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .filter_map(|e| Some(e.ok()?.path().join("kubepods")))
        .chain([PathBuf::from("/sys/fs/cgroup/kubepods")]);
    let mut pids = Vec::new();
    let mut todo: Vec<PathBuf> = roots.filter(|r| r.is_dir()).collect();
    while let Some(d) = todo.pop() {
        let procs = std::fs::read_to_string(d.join("cgroup.procs")).unwrap_or_default();
        pids.extend(procs.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
        let children = std::fs::read_dir(&d).into_iter().flatten().filter_map(|e| e.ok());
        todo.extend(children.map(|e| e.path()).filter(|p| p.is_dir()));
    }
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// The node's containers and their shims, which outlive containerd: killed once
/// kubelet and containerd are gone (nothing restarts them then), containers first so
/// that none outlives its shim. Then node.sh's teardown finds only files, mounts and
/// rules to remove.
fn stop_containers(dir: &StateDir) {
    if !node_owned(dir) {
        return;
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let pids = container_pids();
        if pids.is_empty() || Instant::now() > deadline {
            break;
        }
        for pid in pids {
            signal_pid(pid, Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let address = format!("-address {}", record(dir).containerd_socket().display());
    let shims = processes(|exe, cmdline| exe == "containerd-shim-runc-v2" && cmdline.contains(&address));
    for pid in &shims {
        signal_pid(*pid, Signal::SIGKILL);
    }
    await_reaped(&shims, Duration::from_secs(5));
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
        dir.wait_healthy(|| components(s), check, started, timeout, log, explain)
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
            if s.node.is_ok() { s } else { add_node(dir, s)? }
        }
        None => {
            dir.clear(&all(), stop_all, log)?;
            let node = pick_node(dir);
            log(&format!("starting control plane in {}", dir.path().display()));
            start_cluster(dir, &bin, node)?
        }
    };
    let mut probe = Probe::new()?;
    let mut result = probe.wait(dir, &s, started, false);
    if result.as_ref().is_err_and(Unhealthy::port_conflict) {
        log("port conflict; restarting with other ports");
        stop_all(dir)?;
        dir.remove()?;
        s = start_cluster(dir, &bin, s.node.clone())?;
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
    match &s.node {
        Ok(_) => log(&format!(
            "real node {NODE_NAME}: Ready (pods with node selector {NODE_LABEL}=true and its toleration run there)"
        )),
        Err(why) => log(&format!("real node: MISSING — {why}; tests that need it will fail")),
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
            let c = components(s);
            dir.alive(&c) == c.len() && record(dir).kubeconfig().exists()
        })
        .ok_or_else(|| anyhow!("no local cluster running; start it with 'make cluster'"))
}

/// The components, pids and ports; Ok(true) when all run.
pub fn status(dir: &StateDir) -> Result<(String, bool)> {
    let mut out = format!("state directory: {}\n", dir.path().display());
    let s = record(dir).cluster();
    let list = s.as_ref().map(components).unwrap_or_else(|| CONTROL_PLANE.to_vec());
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
    if let Some(Err(why)) = s.as_ref().map(|s| &s.node) {
        writeln!(out, "real node: missing — {why}")?;
    }
    Ok((out, all && s.is_some()))
}

fn component_port(c: &Component, p: &Ports) -> String {
    match *c {
        ETCD => format!("{} (peer {})", p.etcd, p.etcd_peer),
        APISERVER => p.apiserver.to_string(),
        CONTROLLER_MANAGER => p.kube_controller_manager.to_string(),
        SCHEDULER => p.kube_scheduler.to_string(),
        KUBELET => format!("{} (healthz {})", p.kubelet, p.kubelet_healthz),
        KUBE_PROXY => format!("{} (healthz)", p.kube_proxy_healthz),
        COREDNS => format!("53 on {NODE_IP}"),
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
