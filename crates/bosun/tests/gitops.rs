//! GitOps tools judge bosun's resources by kstatus (sigs.k8s.io/cli-utils): here
//! Helm 4, whose `--wait` is kstatus's watcher, as Flux and Argo CD use it, and
//! cli-utils' own command line, `kapply`, for every kind. A resource or a change is
//! InProgress until bosun observed it, Current once converged, and Failed at once
//! when bosun refuses it — not at the end of the wait's timeout.

#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)] // a test fails loudly

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use bosun_api::webapp::apps_v1;
use bosun_testing::{Env, built_tool, e2e};

/// A chart of one WebApp (with `spec`) and one VoteConfig, in `dir`.
fn chart(dir: &Path, webapp_spec: &str) {
    std::fs::create_dir_all(dir.join("templates")).unwrap();
    std::fs::write(dir.join("Chart.yaml"), "apiVersion: v2\nname: shop\nversion: 0.1.0\n").unwrap();
    let templates = format!(
        "apiVersion: apps.example.com/v1\nkind: WebApp\nmetadata: {{name: web}}\nspec: {webapp_spec}\n---\n\
         apiVersion: voting.schoolofdevops.com/v1\nkind: VoteConfig\nmetadata: {{name: pets}}\n\
         spec: {{options: [{{id: a, label: Cats}}, {{id: b, label: Dogs}}]}}\n"
    );
    std::fs::write(dir.join("templates/resources.yaml"), templates).unwrap();
}

/// `helm4 VERB shop DIR --wait` in the test's namespace: whether it succeeded, its
/// output, and how long it took.
fn helm4(env: &Env, verb: &str, dir: &PathBuf, timeout: Duration) -> (bool, String, Duration) {
    let started = Instant::now();
    let out = Command::new(built_tool("helm4"))
        .args([verb, "shop"])
        .arg(dir)
        .args(["--namespace", &env.ns, "--wait", "--timeout", &format!("{}s", timeout.as_secs()), "--kubeconfig"])
        .arg(bosun_testing::kubeconfig_path())
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text, started.elapsed())
}

#[tokio::test]
async fn helm_4_waits_until_bosun_converged_and_fails_at_once_on_a_refused_spec() {
    e2e("gitops", |env| async move {
        let _bosun = env.start_bosun(&["--controllers=webapp,voteconfig"]).await;
        let dir = std::env::temp_dir().join(format!("{}-chart", env.ns));
        chart(&dir, "{image: nginx, replicas: 1, port: 80}");
        let (ok, out, _) = helm4(&env, "install", &dir, Duration::from_secs(120));
        assert!(ok, "helm4 install --wait: {out}");

        // A spec change: the new generation is InProgress until bosun observed it, and
        // the wait ends when the WebApp is Ready at that generation (Current).
        chart(&dir, "{image: nginx, replicas: 2, port: 80}");
        let (ok, out, _) = helm4(&env, "upgrade", &dir, Duration::from_secs(120));
        assert!(ok, "helm4 upgrade --wait: {out}");
        let w = env.api::<apps_v1::WebApp>().get("web").await.unwrap();
        let status = w.status.as_ref().expect("a status");
        assert_eq!(status.observed_generation, w.metadata.generation, "Helm returned before bosun observed the change");
        assert!(status.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True"), "{:?}", status.conditions);

        // A spec only the apiserver's Deployment validation refuses: Stalled, so the
        // wait fails as soon as bosun says so, far inside its timeout.
        let timeout = Duration::from_secs(240);
        chart(&dir, "{image: nginx, replicas: 1, port: 80, env: [{name: NOT=VALID, value: x}]}");
        let (ok, out, took) = helm4(&env, "upgrade", &dir, timeout);
        assert!(!ok, "helm4 upgrade --wait accepted a refused spec: {out}");
        assert!(out.contains("Failed") && out.contains("web"), "{out}");
        assert!(took < timeout / 4, "the wait ran {took:?} of its {timeout:?}: not failed fast\n{out}");
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await;
}

/// A package of manifests as cli-utils' `kapply` keeps one: a directory with an
/// inventory, applied into the test's namespace. kapply's status events are kstatus's
/// own verdicts (the library Flux, Argo CD, Helm 4 and kpt use).
struct Package {
    dir: PathBuf,
    ns: String,
}

/// One run of kapply: whether it succeeded (or was stopped, having seen enough), how
/// long it took, its output, and the kstatus verdicts it printed.
struct Run {
    ok: bool,
    took: Duration,
    text: String,
    statuses: Statuses,
}

impl Package {
    fn new(env: &Env) -> Package {
        let dir = std::env::temp_dir().join(format!("{}-kstatus", env.ns));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let package = Package { dir, ns: env.ns.clone() };
        let init = package.kapply(&["init"], &[]);
        assert!(init.ok, "kapply init: {}", init.text);
        package
    }

    /// `kapply VERB DIR ARGS` in the test's namespace, its JSON events parsed as they
    /// come; stopped early once `enough` holds of the verdicts seen.
    fn kapply(&self, verb: &[&str], args: &[&str]) -> Run {
        self.kapply_until(verb, args, |_| false)
    }

    fn kapply_until(&self, verb: &[&str], args: &[&str], enough: impl Fn(&Statuses) -> bool) -> Run {
        use std::io::BufRead;
        let started = Instant::now();
        let mut child = Command::new(built_tool("kapply"))
            .args(verb)
            .arg(&self.dir)
            .args(args)
            .args(["--namespace", &self.ns, "--kubeconfig"])
            .arg(bosun_testing::kubeconfig_path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let errors = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
        let (mut text, mut statuses, mut stopped) = (String::new(), Statuses::new(), false);
        for line in std::io::BufReader::new(child.stdout.take().unwrap()).lines() {
            let Ok(line) = line else { break };
            text.push_str(&line);
            text.push('\n');
            let Ok(event) = serde_json::from_str::<serde_json::Value>(&line) else { continue };
            if event["type"] != "status" {
                continue;
            }
            let field = |k: &str| event[k].as_str().unwrap_or_default().to_owned();
            let seen = statuses.entry(format!("{}/{}", field("kind"), field("name"))).or_default();
            let verdict = (field("status"), field("message"));
            if seen.last() != Some(&verdict) {
                seen.push(verdict);
            }
            if enough(&statuses) {
                stopped = true;
                let _ = child.kill();
                break;
            }
        }
        let status = child.wait().unwrap();
        text.push_str(&errors.join().unwrap());
        Run { ok: status.success() || stopped, took: started.elapsed(), text, statuses }
    }

    /// Apply `manifests` and wait up to `timeout` for every resource to be Current.
    fn apply(&self, manifests: &str, timeout: Duration) -> Run {
        self.apply_until(manifests, timeout, |_| false)
    }

    /// Apply `manifests` and wait up to `timeout` for every resource to be Current, or
    /// until `enough` holds of the verdicts seen. (kapply's own wait misses a Failed
    /// verdict that arrives while it still applies: it then waits out its timeout.)
    fn apply_until(&self, manifests: &str, timeout: Duration, enough: impl Fn(&Statuses) -> bool) -> Run {
        std::fs::write(self.dir.join("resources.yaml"), manifests).unwrap();
        let timeout = format!("--reconcile-timeout={}s", timeout.as_secs());
        self.kapply_until(&["apply"], &[&timeout, "--status-events", "--output=json"], enough)
    }

    /// Poll every resource's status until all are Current, up to `timeout`.
    fn until_current(&self, timeout: Duration) -> Run {
        let timeout = format!("--timeout={}s", timeout.as_secs());
        self.kapply(&["status"], &["--poll-until=current", "--poll-period=250ms", "--output=json", &timeout])
    }
}

/// kstatus verdicts per `Kind/name`, in order (changes only): (status, message).
type Statuses = std::collections::BTreeMap<String, Vec<(String, String)>>;

impl Drop for Package {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The kinds of this test, one each, as `spec` has them.
struct Specs {
    demo_size: u32,
    config: &'static str,
    pg: &'static str,
    backup_secret: &'static str,
    schedule: &'static str,
    database: &'static str,
    frontends: u32,
    webapp_env: &'static str,
    question: &'static str,
    /// More documents, each starting `---`.
    extra: &'static str,
}

fn every_kind(s: &Specs) -> String {
    let Specs { demo_size, config, pg, backup_secret, schedule, database, frontends, webapp_env, question, extra } = s;
    format!(
        r#"apiVersion: demo.example.com/v1
kind: DemoVolume
metadata: {{name: demo-volume}}
spec: {{name: demo-volume, size: {demo_size}}}
---
apiVersion: config.example.com/v1
kind: AppConfig
metadata: {{name: myapp}}
spec: {{application: myapp, environment: staging, config: {{DB_HOST: "{config}"}}}}
---
apiVersion: database.example.com/v1
kind: PostgreSQL
metadata: {{name: test-db}}
spec: {{version: "15", replicas: 1, {pg}}}
---
apiVersion: backup.example.com/v1
kind: Backup
metadata: {{name: nightly}}
spec:
  source: {{type: postgresql, connection: {{host: test-db, port: 5432, database: postgres, secretRef: {{name: {backup_secret}}}}}}}
  destination: {{type: s3, bucket: backups}}
  schedule: "{schedule}"
---
apiVersion: app.example.com/v1
kind: AppStack
metadata: {{name: shop}}
spec:
  database: {{{database}, storage: 1Gi}}
  cache: {{enabled: false}}
  backend: {{image: "localhost/redis:7", replicas: 1, port: 6379}}
  frontend: {{image: "localhost/redis:7", replicas: {frontends}, port: 6379}}
---
apiVersion: platform.example.com/v1
kind: EcommercePlatform
metadata: {{name: store}}
spec:
  environment: development
  frontend: {{replicas: {frontends}, image: "localhost/redis:7"}}
  backend: {{replicas: 1, image: "localhost/redis:7"}}
  database: {{{database}, storage: 1Gi}}
  cache: {{enabled: false}}
  monitoring: {{enabled: false}}
---
apiVersion: apps.example.com/v1
kind: WebApp
metadata: {{name: web}}
spec: {{image: "localhost/redis:7", replicas: {frontends}, port: 6379{webapp_env}}}
---
apiVersion: example.com/v1
kind: WebApp
metadata: {{name: legacy}}
spec: {{image: "localhost/redis:7", replicas: {frontends}, port: 6379{webapp_env}}}
---
apiVersion: voting.schoolofdevops.com/v1
kind: VoteConfig
metadata: {{name: pets}}
spec: {{question: "{question}", options: [{{id: a, label: Cats}}, {{id: b, label: Dogs}}]}}
{extra}"#
    )
}

/// Every kind, judged by kstatus's own command line: a new resource is InProgress until bosun observed it (even with
/// bosun down), then Current; a spec change likewise; and each refusal is Failed at
/// once, with bosun's reason. On the fake nodes: kstatus reads conditions, not pods.
#[tokio::test]
async fn every_kind_is_in_progress_until_observed_then_current_and_failed_on_a_refusal() {
    e2e("kstatus", |env| async move {
        let package = Package::new(&env);
        let kinds = [
            "WebApp/web",
            "WebApp/legacy",
            "VoteConfig/pets",
            "DemoVolume/demo-volume",
            "AppConfig/myapp",
            "PostgreSQL/test-db",
            "Backup/nightly",
            "AppStack/shop",
            "EcommercePlatform/store",
        ];
        let first = Specs {
            demo_size: 1,
            config: "db.internal",
            pg: "storage: 1Gi",
            backup_secret: "test-db-credentials",
            schedule: "0 2 * * *",
            database: r#"type: postgresql, version: "15""#,
            frontends: 1,
            webapp_env: "",
            question: "Cats or dogs?",
            extra: "",
        };
        // Created while bosun is down: InProgress (generation 1, observed 0), never Current.
        let run = package.apply(&every_kind(&first), Duration::from_secs(8));
        assert!(!run.ok, "kapply found every kind Current before bosun ran:\n{}", run.text);
        for kind in kinds {
            assert_eq!(
                run.statuses.get(kind).and_then(|s| s.last()).map(|s| s.0.as_str()),
                Some("InProgress"),
                "{kind}: {:?}",
                run.statuses.get(kind)
            );
        }
        let bosun = env.start_bosun(&[]).await;
        let run = package.until_current(Duration::from_secs(240));
        assert!(run.ok, "not every kind Current: {}\n{}", run.text, bosun.log_tail(40));
        for kind in kinds {
            let seen = &run.statuses[kind];
            assert_eq!(seen.last().map(|s| s.0.as_str()), Some("Current"), "{kind}: {seen:?}");
            eprintln!("kstatus: {kind} after its creation: {seen:?}");
        }
        // A stack's components start one after another: bosun said Reconciling (its own
        // words) on the way. The others converge within a poll on the fake nodes.
        for kind in ["AppStack/shop", "EcommercePlatform/store"] {
            let seen = &run.statuses[kind];
            assert!(
                seen.iter().any(|(s, m)| s == "InProgress" && !m.contains("observed generation")),
                "{kind} never read Reconciling: {seen:?}"
            );
        }

        // A spec change while bosun is down: InProgress (generation 2, observed 1) until
        // bosun observed it, then Current at that generation.
        drop(bosun);
        let second = Specs {
            demo_size: 2,
            config: "db2.internal",
            pg: "storage: 2Gi, failoverDelay: 45s",
            schedule: "0 3 * * *",
            frontends: 2,
            question: "Dogs or cats?",
            ..first
        };
        let run = package.apply(&every_kind(&second), Duration::from_secs(8));
        assert!(!run.ok, "kapply found a change Current that no one observed:\n{}", run.text);
        for kind in kinds {
            let last = run.statuses.get(kind).and_then(|s| s.last());
            assert!(
                last.is_some_and(
                    |(s, m)| s == "InProgress" && m.contains("generation is 2, but latest observed generation is 1")
                ),
                "{kind}: {last:?}"
            );
        }
        let bosun = env.start_bosun(&[]).await;
        let run = package.until_current(Duration::from_secs(240));
        assert!(run.ok, "the change did not become Current: {}\n{}", run.text, bosun.log_tail(40));

        // Refusals, a Restore of a Backup that does not exist, and a VoteConfig whose
        // ConfigMap's name someone else holds: Failed at once.
        let (ok, out) = env.kubectl(&["create", "configmap", "taken-config", "--from-literal=mine=yes"]);
        assert!(ok, "{out}");
        let extra = "---\napiVersion: backup.example.com/v1\nkind: Restore\nmetadata: {name: back}\nspec:\n  \
                     backupRef: {name: no-such-backup}\n  target: {type: postgresql, connection: {host: test-db, \
                     port: 5432, database: app, secretRef: {name: test-db-credentials}}}\n---\n\
                     apiVersion: voting.schoolofdevops.com/v1\nkind: VoteConfig\nmetadata: {name: taken}\n\
                     spec: {options: [{id: a, label: A}, {id: b, label: B}]}\n";
        let refused = Specs {
            demo_size: 1,
            config: "db.{{ nope }}.internal",
            pg: "storage: 1Gi, failoverDelay: 45s",
            backup_secret: "no-such-secret",
            database: r#"type: mysql, version: "8.0""#,
            webapp_env: ", env: [{name: NOT=VALID, value: x}]",
            extra,
            ..second
        };
        let expected = [
            ("DemoVolume", "demo-volume", "demovolumes", "ShrinkRefused"),
            ("AppConfig", "myapp", "appconfigs", "TemplateError"),
            ("PostgreSQL", "test-db", "postgresqls", "ShrinkRefused"),
            ("Backup", "nightly", "backups.backup.example.com", "CredentialsMissing"),
            ("AppStack", "shop", "appstacks", "DatabaseTypeChangeRefused"),
            ("EcommercePlatform", "store", "ecommerceplatforms", "DatabaseTypeChangeRefused"),
            ("Restore", "back", "restores.backup.example.com", "BackupNotFound"),
            ("WebApp", "web", "webapps.apps.example.com", "InvalidSpec"),
            ("WebApp", "legacy", "webapps.example.com", "InvalidSpec"),
            ("VoteConfig", "taken", "voteconfigs", "NameConflict"),
        ];
        let failed = |statuses: &Statuses| {
            expected.iter().all(|(kind, name, _, _)| {
                statuses.get(&format!("{kind}/{name}")).and_then(|s| s.last()).is_some_and(|s| s.0 == "Failed")
            })
        };
        let timeout = Duration::from_secs(240);
        let run = package.apply_until(&every_kind(&refused), timeout, failed);
        assert!(failed(&run.statuses), "not every refusal Failed:\n{}", run.text);
        assert!(
            run.took < timeout / 4,
            "the refusals took {:?} of {timeout:?}: not failed fast\n{}",
            run.took,
            run.text
        );
        for (kind, name, resource, reason) in expected {
            let seen = &run.statuses[&format!("{kind}/{name}")];
            assert_eq!(seen.last().map(|s| s.0.as_str()), Some("Failed"), "{kind}/{name}: {seen:?}");
            let stalled = env.kubectl(&[
                "get",
                resource,
                name,
                "-o",
                r#"jsonpath={.status.conditions[?(@.type=="Stalled")].reason}"#,
            ]);
            assert_eq!(stalled.1, reason, "{kind}/{name} Stalled: {seen:?}");
        }
        eprintln!("kstatus: {} refusals Failed {:.1} s after kapply apply", expected.len(), run.took.as_secs_f64());
    })
    .await;
}
