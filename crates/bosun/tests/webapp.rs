//! WebApp end to end, on the local control plane, for both API groups.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // a test fails by panicking

use std::time::Duration;

use bosun_api::webapp::{Phase, WebAppKind, apps_v1, example_v1};
use bosun_testing::{Env, e2e};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;

fn webapp<K: WebAppKind>(name: &str, spec: serde_json::Value) -> K {
    serde_json::from_value(json!({
        "apiVersion": K::api_version(&()),
        "kind": "WebApp",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .expect("webapp")
}

fn is_ready<K: WebAppKind>(w: &K) -> bool {
    w.current_status().is_some_and(|s| {
        s.observed_generation == w.meta().generation
            && s.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True")
    })
}

fn available(replicas: i32) -> impl Fn(&Deployment) -> bool {
    move |d| d.status.as_ref().and_then(|s| s.available_replicas) == Some(replicas)
}

/// The sample from the spec converges: Deployment 3/3, Service, `phase: Running`, Ready.
async fn sample_converges<K: WebAppKind>(env: &Env, name: &str, spec: serde_json::Value, image: &str) {
    env.apply(&webapp::<K>(name, spec)).await;
    let w: K = env.wait_for(name, "Ready=True", is_ready::<K>).await;
    let status = w.current_status().expect("status");
    assert_eq!(status.phase, Some(Phase::Running));
    assert_eq!(status.available_replicas, 3);
    assert_eq!(status.ready_replicas, 3);

    let d: Deployment = env.wait_for(name, "3 available replicas", available(3)).await;
    let owner = &d.owner_references()[0];
    assert_eq!((owner.kind.as_str(), owner.name.as_str(), owner.controller), ("WebApp", name, Some(true)));
    let pod = d.spec.expect("spec").template;
    assert_eq!(pod.metadata.expect("metadata").labels.expect("labels")["app"], name);
    let container = &pod.spec.expect("pod spec").containers[0];
    assert_eq!((container.name.as_str(), container.image.as_deref()), ("app", Some(image)));

    let svc: Service = env.api::<Service>().get(name).await.expect("service");
    let spec = svc.spec.expect("service spec");
    assert_eq!(spec.selector.expect("selector")["app"], name);
    let port = &spec.ports.expect("ports")[0];
    assert_eq!(port.port, 80);
    assert_eq!(port.target_port, Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(80)));
    for label in ["app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/managed-by"] {
        assert!(svc.metadata.labels.as_ref().is_some_and(|l| l.contains_key(label)), "Service lacks label {label}");
    }

    // What the README promises: kubectl wait works on the condition.
    let kind = format!("webapp.{}/{name}", K::group(&()));
    let (ok, out) = env.kubectl(&["wait", "--for=condition=Ready", &kind, "--timeout=10s"]);
    assert!(ok, "kubectl wait failed: {out}");
}

#[tokio::test]
async fn samples_converge_in_both_groups() {
    e2e("samples", |env| async move {
        let bosun = env.start_bosun(&[]).await;
        sample_converges::<apps_v1::WebApp>(
            &env,
            "demo-app",
            json!({"image": "nginx:1.25", "replicas": 3, "port": 80}),
            "nginx:1.25",
        )
        .await;
        sample_converges::<example_v1::WebApp>(
            &env,
            "my-webapp",
            json!({"replicas": 3, "image": "nginx:1.21", "port": 80}),
            "nginx:1.21",
        )
        .await;
        drop(bosun);
    })
    .await;
}

/// Scale to 5 and change the image: the Deployment and the status follow.
async fn follows_updates<K: WebAppKind>(env: &Env) {
    env.apply(&webapp::<K>("web", json!({"image": "nginx:1.25", "replicas": 3}))).await;
    env.wait_for::<K>("web", "Ready=True", is_ready::<K>).await;

    env.apply(&webapp::<K>("web", json!({"image": "nginx:1.27", "replicas": 5}))).await;
    let w: K = env
        .wait_for("web", "Ready=True at 5 replicas", |w: &K| {
            is_ready(w) && w.current_status().is_some_and(|s| s.available_replicas == 5)
        })
        .await;
    assert_eq!(w.current_status().and_then(|s| s.phase), Some(Phase::Running));
    let d: Deployment = env.wait_for("web", "5 available replicas", available(5)).await;
    let spec = d.spec.expect("spec");
    assert_eq!(spec.replicas, Some(5));
    assert_eq!(spec.template.spec.expect("pod spec").containers[0].image.as_deref(), Some("nginx:1.27"));
}

#[tokio::test]
async fn updates_are_followed_in_both_groups() {
    e2e("updates", |env| async move {
        let _bosun = env.start_bosun(&[]).await;
        follows_updates::<apps_v1::WebApp>(&env).await;
        env.api::<apps_v1::WebApp>().delete("web", &DeleteParams::default()).await.expect("delete");
        env.wait_gone::<Deployment>("web").await;
        follows_updates::<example_v1::WebApp>(&env).await;
    })
    .await;
}

#[tokio::test]
async fn drift_is_corrected_and_deletion_collects_children() {
    e2e("drift", |env| async move {
        let _bosun = env.start_bosun(&[]).await;
        env.apply(&webapp::<apps_v1::WebApp>("drifty", json!({"image": "nginx:1.25", "replicas": 2}))).await;
        env.wait_for::<apps_v1::WebApp>("drifty", "Ready=True", is_ready).await;

        // Someone deletes the Service: it comes back.
        let services = env.api::<Service>();
        let old_uid = services.get("drifty").await.expect("service").uid();
        services.delete("drifty", &DeleteParams::default()).await.expect("delete service");
        env.wait_for::<Service>("drifty", "the Service to be recreated", |s| s.uid() != old_uid).await;

        // Someone scales the Deployment by hand: bosun puts its replicas back.
        let patch = json!({"spec": {"replicas": 7}});
        env.api::<Deployment>()
            .patch("drifty", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("scale by hand");
        env.wait_for::<Deployment>("drifty", "replicas reverted to 2", |d| {
            d.spec.as_ref().and_then(|s| s.replicas) == Some(2)
        })
        .await;
        env.wait_for::<apps_v1::WebApp>("drifty", "Ready=True again", is_ready).await;

        // Deleting the WebApp garbage-collects both children.
        env.api::<apps_v1::WebApp>().delete("drifty", &DeleteParams::default()).await.expect("delete webapp");
        env.wait_gone::<Deployment>("drifty").await;
        env.wait_gone::<Service>("drifty").await;
    })
    .await;
}

/// Each bad object and the field its rejection must name.
fn bad_input() -> Vec<(&'static str, serde_json::Value, &'static str)> {
    vec![
        ("apps", json!({"image": "nginx", "replicas": 0}), "spec.replicas"),
        ("apps", json!({"image": "nginx", "replicas": -3}), "spec.replicas"),
        ("apps", json!({"image": "nginx", "port": 70000}), "spec.port"),
        ("apps", json!({"image": "nginx", "port": 0}), "spec.port"),
        ("apps", json!({"replicas": 2}), "spec.image"),
        ("apps", json!({"image": ""}), "spec.image"),
        ("apps", json!({"image": "nginx latest"}), "spec.image"),
        ("apps", json!({"image": "nginx", "replicas": "three"}), "spec.replicas"),
        ("apps", json!({"image": "nginx", "port": "http"}), "spec.port"),
        ("apps", json!({"image": "nginx", "env": {"A": "b"}}), "spec.env"),
        ("example", json!({"image": "nginx", "replicas": 11}), "spec.replicas"),
        ("example", json!({"image": "nginx"}), "spec.replicas"),
        ("example", json!({"image": "nginx", "replicas": 0}), "spec.replicas"),
    ]
}

#[tokio::test]
async fn bad_input_is_rejected_naming_the_field_and_disturbs_nothing() {
    e2e("bad-input", |env| async move {
        let mut bosun = env.start_bosun(&[]).await;
        env.apply(&webapp::<apps_v1::WebApp>("good", json!({"image": "nginx:1.25", "replicas": 2}))).await;
        let good: apps_v1::WebApp = env.wait_for("good", "Ready=True", is_ready).await;

        for (i, (group, spec, field)) in bad_input().into_iter().enumerate() {
            let object = json!({"metadata": {"name": format!("bad-{i}")}, "spec": spec});
            let result = match group {
                "apps" => env.create_raw::<apps_v1::WebApp>(object).await,
                _ => env.create_raw::<example_v1::WebApp>(object).await,
            };
            let err = result.expect_err(&format!("{group} WebApp with spec {spec} was accepted"));
            assert!(err.to_string().contains(field), "rejection of {spec} does not name {field}: {err}");
        }
        // A name that cannot be a Service name is refused up front.
        let err = env
            .create_raw::<apps_v1::WebApp>(json!({"metadata": {"name": "1st.app"}, "spec": {"image": "nginx"}}))
            .await
            .expect_err("a WebApp named 1st.app was accepted");
        assert!(err.to_string().contains("metadata.name"), "{err}");

        // What only the apiserver's Deployment validation catches becomes Ready=False
        // with the reason and the field, without a crash or a retry storm.
        let invalid = json!({"image": "nginx", "env": [{"name": "NOT=VALID", "value": "x"}]});
        env.apply(&webapp::<apps_v1::WebApp>("invalid", invalid)).await;
        let w: apps_v1::WebApp = env
            .wait_for("invalid", "Ready=False with reason InvalidSpec", |w: &apps_v1::WebApp| {
                w.current_status().is_some_and(|s| {
                    s.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "False" && c.reason == "InvalidSpec")
                })
            })
            .await;
        let status = w.status.expect("status");
        assert_eq!(status.phase, Some(Phase::Failed));
        let ready = status.conditions.iter().find(|c| c.type_ == "Ready").expect("Ready");
        assert!(ready.message.contains("env[0].name"), "message does not name the field: {}", ready.message);
        // kstatus: Failed at once (Stalled), not InProgress until a GitOps timeout.
        let stalled = status.conditions.iter().find(|c| c.type_ == "Stalled").expect("Stalled on an invalid spec");
        assert_eq!((stalled.status.as_str(), stalled.reason.as_str()), ("True", "InvalidSpec"));
        assert!(!status.conditions.iter().any(|c| c.type_ == "Reconciling"), "{:?}", status.conditions);

        // Fixing the spec recovers it: kstatus Current, neither Stalled nor Reconciling.
        env.apply(&webapp::<apps_v1::WebApp>("invalid", json!({"image": "nginx", "replicas": 1}))).await;
        let w = env.wait_for::<apps_v1::WebApp>("invalid", "Ready=True after the fix", is_ready).await;
        let types: Vec<_> = w.status.unwrap().conditions.into_iter().map(|c| c.type_).collect();
        assert!(!types.iter().any(|t| t == "Stalled" || t == "Reconciling"), "{types:?}");

        // The good WebApp was never disturbed and the operator is still running.
        let after: apps_v1::WebApp = env.api().get("good").await.expect("good");
        assert!(is_ready(&after));
        assert_eq!(after.resource_version(), good.resource_version(), "the good WebApp was rewritten");
        assert!(bosun.is_running(), "bosun exited:\n{}", bosun.log_tail(30));
    })
    .await;
}

#[tokio::test]
async fn steady_state_is_silent() {
    e2e("steady", |env| async move {
        let _bosun = env.start_bosun(&[]).await;
        env.apply(&webapp::<example_v1::WebApp>("quiet", json!({"image": "nginx:1.25", "replicas": 3}))).await;
        env.wait_for::<example_v1::WebApp>("quiet", "Ready=True", is_ready).await;
        env.wait_for::<Deployment>("quiet", "3 available replicas", available(3)).await;
        // Let the last status updates of the rollout settle before taking the baseline.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let versions = || async {
            (
                env.api::<example_v1::WebApp>().get("quiet").await.expect("webapp").resource_version(),
                env.api::<Deployment>().get("quiet").await.expect("deployment").resource_version(),
                env.api::<Service>().get("quiet").await.expect("service").resource_version(),
            )
        };
        let before = versions().await;
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(versions().await, before, "something was written during 30 idle seconds");
    })
    .await;
}

/// The README's tour as a newcomer takes it on the local cluster: the WebApp sample,
/// applied as it is in a namespace of their own (nothing asked of its placement), runs
/// its pods on the real node, and its Service answers HTTP 200 to a pod's curl. (The
/// fake nodes hold only the namespaces that ask for them, as every other test's does.)
#[tokio::test]
async fn the_tour_sample_answers_http_from_the_real_node() {
    e2e("webapp-tour", |env| async move {
        use bosun_testing::node::{REAL_NODES, images, require_real_node};
        use k8s_openapi::api::core::v1::{Namespace, Pod};
        require_real_node(&env.client).await;
        let ns = env.namespace_labelled("tour", &[]).await;
        let placed = kube::Api::<Namespace>::all(env.client.clone()).get(&ns).await.unwrap();
        let selector = placed.annotations().get("scheduler.alpha.kubernetes.io/node-selector").cloned();
        assert_eq!(selector.as_deref(), Some("bosun.dev/real-node=true"), "a new namespace is placed on the real node");

        let watch = format!("--namespaces={ns}");
        let _bosun = env.start_bosun(&[&watch]).await;
        let sample = bosun_testing::repo_root().join("config/samples/apps.example.com_v1_webapp.yaml");
        let (ok, out) = env.kubectl(&["apply", "--namespace", &ns, "-f", sample.to_str().unwrap()]);
        assert!(ok, "{out}");
        let (ok, out) = env.kubectl(&[
            "wait",
            "--namespace",
            &ns,
            "--for=condition=Ready",
            "webapp.apps.example.com/demo-app",
            "--timeout=180s",
        ]);
        assert!(ok, "the sample's nginx pods are not Ready on the real node: {out}\n{}", env.kubectl(&["get", "pods,events", "-n", &ns, "-o", "wide"]).1);
        let pods = kube::Api::<Pod>::namespaced(env.client.clone(), &ns).list(&Default::default()).await.unwrap();
        let nodes: Vec<_> = pods.items.iter().filter_map(|p| p.spec.as_ref()?.node_name.clone()).collect();
        assert!(nodes.len() == 3 && nodes.iter().all(|n| REAL_NODES.contains(&n.as_str())), "the sample's pods: {nodes:?}");

        // What the README shows: curl from a pod, through the Service's name (a pod
        // that runs to its end, then its log: no attach to race with its start).
        let curl = json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "curl"},
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "curl", "image": images::TOOLBOX, "imagePullPolicy": "Never",
                "command": ["curl", "-sS", "-i", "--retry", "10", "--retry-all-errors", "--retry-delay", "1", "http://demo-app/"],
            }]},
        });
        let pods = kube::Api::<Pod>::namespaced(env.client.clone(), &ns);
        pods.create(&Default::default(), &serde_json::from_value(curl).unwrap()).await.unwrap();
        let (ok, out) = env.kubectl(&[
            "wait",
            "--namespace",
            &ns,
            "--for=jsonpath={.status.phase}=Succeeded",
            "pod/curl",
            "--timeout=120s",
        ]);
        let (_, log) = env.kubectl(&["logs", "--namespace", &ns, "curl"]);
        let out = format!("{out}{log}");
        assert!(ok, "curl http://demo-app/: {out}");
        // curl retries while kube-proxy has not yet programmed the new Service (a
        // refused connection, printed first): the answer is what counts.
        assert!(log.lines().any(|l| l.starts_with("HTTP/1.1 200 OK")), "{out}");
        assert!(out.contains("Welcome to nginx!"), "nginx's page: {out}");
        assert!(out.to_lowercase().contains("x-served-by: demo-app-"), "answered by one of the sample's pods: {out}");
    })
    .await;
}

/// With `--max-rollouts-in-flight 2`, six WebApps applied at once: never more than two of
/// their Deployments exist unfinished (created, not every replica available), the third
/// is created only once one of the first two is available, and all six become Ready.
#[tokio::test]
async fn a_burst_of_webapps_is_created_no_faster_than_the_window_allows() {
    e2e("window", |env| async move {
        let mut bosun = env.start_bosun(&["--controllers=webapp", "--max-rollouts-in-flight=2"]).await;
        let names: Vec<String> = (0..6).map(|i| format!("burst-{i}")).collect();
        for name in &names {
            env.apply(&webapp::<apps_v1::WebApp>(name, json!({"image": "nginx:1.25", "replicas": 1}))).await;
        }
        let (deployments, webapps) = (env.api::<Deployment>(), env.api::<apps_v1::WebApp>());
        // Per Deployment, the poll at which it was first seen and first seen available.
        let (mut seen, mut done) = (std::collections::BTreeMap::new(), std::collections::BTreeMap::new());
        let mut most = 0;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
        for poll in 0u32.. {
            let listed = deployments.list(&Default::default()).await.expect("deployments").items;
            for d in &listed {
                seen.entry(d.name_any()).or_insert(poll);
                if available(1)(d) {
                    done.entry(d.name_any()).or_insert(poll);
                }
            }
            most = most.max(listed.iter().filter(|d| !available(1)(d)).count());
            let webapps = webapps.list(&Default::default()).await.expect("webapps").items;
            let ready = webapps.iter().filter(|w| is_ready(*w)).count();
            if ready == names.len() {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "{ready} of 6 Ready after 180 s:\n{}", bosun.log_tail(30));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(most <= 2, "{most} Deployments were rolling out at once; the window is 2");
        let mut order: Vec<u32> = seen.values().copied().collect();
        order.sort_unstable();
        let first_done = done.values().min().copied().expect("a Deployment became available");
        assert!(
            order[2] >= first_done,
            "the third Deployment (poll {}) came before any was available (poll {first_done})",
            order[2]
        );
        assert!(bosun.is_running(), "bosun exited:\n{}", bosun.log_tail(30));
    })
    .await;
}
