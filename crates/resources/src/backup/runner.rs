//! The runner contract: the variables (bosun_backup_model::contract) and the pod every run of
//! the runner gets.

use super::*;

/// The variable holding the database user, which the database URL refers to.
pub(super) const USERNAME_VARIABLE: &str = "BOSUN_DB_USERNAME";

pub(super) fn secret_key(secret: &str, key: &str) -> Option<EnvVarSource> {
    Some(EnvVarSource {
        secret_key_ref: Some(SecretKeySelector { name: secret.to_owned(), key: key.to_owned(), optional: Some(false) }),
        ..EnvVarSource::default()
    })
}

pub(super) fn value(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar { name: name.to_owned(), value: Some(value.into()), value_from: None }
}

/// Percent-encode what is not unreserved in a URL path segment.
pub(super) fn encode_segment(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The variables that reach `db`: the user and password by reference to its Secret,
/// and its URL under `url_variable`, which names the user through the kubelet's
/// `$(VAR)` expansion (so the user is never copied out of the Secret either).
pub fn database_env(db: &Source, url_variable: &str) -> Vec<EnvVar> {
    let c = &db.connection;
    let secret = &c.secret_ref.name;
    let port = c.port.unwrap_or(db.type_.default_port());
    let url =
        format!("{}://$({USERNAME_VARIABLE})@{}:{port}/{}", db.type_.as_str(), c.host, encode_segment(&c.database));
    vec![
        EnvVar { name: USERNAME_VARIABLE.to_owned(), value: None, value_from: secret_key(secret, "username") },
        EnvVar {
            name: engine_of(db.type_).password_variable().to_owned(),
            value: None,
            value_from: secret_key(secret, "password"),
        },
        value(url_variable, url),
    ]
}

/// The runner's `--destination` for `d`.
pub fn destination_url(d: &Destination) -> String {
    let prefix = d.prefix.as_deref().unwrap_or_default().trim_matches('/');
    let join = |base: String| if prefix.is_empty() { base } else { format!("{base}/{prefix}") };
    match d.type_ {
        DestinationType::S3 => join(format!("s3://{}", d.bucket)),
        DestinationType::Gcs => join(format!("gs://{}", d.bucket)),
        DestinationType::Azure => join(format!("azure://{}", d.bucket)),
        DestinationType::Pvc => join(format!("file://{PVC_MOUNT}")),
    }
}

/// What a container needs to reach a destination: variables (the URL, the folder,
/// the endpoint, and the Secret's keys as the provider's variables), and the
/// Secret's and the claim's volumes and mounts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Reach {
    pub env: Vec<EnvVar>,
    pub env_from: Option<Vec<EnvFromSource>>,
    pub volumes: Vec<Volume>,
    pub mounts: Vec<VolumeMount>,
}

/// The variable `name` holding the pod's namespace (the downward API).
pub fn namespace_env(name: &str) -> EnvVar {
    let namespace = EnvVarSource {
        field_ref: Some(ObjectFieldSelector { field_path: "metadata.namespace".to_owned(), api_version: None }),
        ..EnvVarSource::default()
    };
    EnvVar { name: name.to_owned(), value: None, value_from: Some(namespace) }
}

/// The variables that give the runner the encryption keys of `d` (none without
/// encryption); the Secret's key is mounted by [`reach`]'s volumes. The message name
/// needs `BOSUN_BACKUP_NAMESPACE` defined before them.
pub fn encryption_env(d: &Destination) -> Vec<EnvVar> {
    let Some(encryption) = &d.encryption else { return Vec::new() };
    let secret = &encryption.secret_ref.name;
    vec![
        value(contract::BACKUP_ENCRYPTION_KEY_FILE, format!("{ENCRYPTION_MOUNT}/{ENCRYPTION_KEY}")),
        // What the runner's messages call it; the namespace by the kubelet's expansion.
        value(
            contract::BACKUP_ENCRYPTION_KEY_NAME,
            format!("Secret $(BOSUN_BACKUP_NAMESPACE)/{secret} (key {ENCRYPTION_KEY})"),
        ),
    ]
}

/// How to reach the destination `d` of the folder `<namespace>/<name>` (the
/// namespace is the pod's own, given by the downward API).
pub fn reach(d: &Destination, name: &str) -> Reach {
    let mut env = vec![
        value(contract::BACKUP_DESTINATION, destination_url(d)),
        namespace_env(contract::BACKUP_NAMESPACE),
        value(contract::BACKUP_NAME, name),
    ];
    env.extend(d.endpoint.as_ref().map(|e| value(contract::BACKUP_ENDPOINT, e.clone())));
    env.extend(d.region.as_ref().map(|r| value(contract::BACKUP_REGION, r.clone())));
    env.extend(encryption_env(d));
    let env_from = d.secret_ref.as_ref().map(|s| {
        vec![EnvFromSource {
            secret_ref: Some(SecretEnvSource { name: s.name.clone(), optional: Some(false) }),
            ..EnvFromSource::default()
        }]
    });
    let (mut volumes, mut mounts) = (Vec::new(), Vec::new());
    if let Some(secret) = &d.secret_ref {
        volumes.push(Volume {
            name: "destination-credentials".to_owned(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret.name.clone()),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        });
        mounts.push(VolumeMount {
            name: "destination-credentials".to_owned(),
            mount_path: CREDENTIALS_MOUNT.to_owned(),
            read_only: Some(true),
            ..VolumeMount::default()
        });
    }
    if let Some(encryption) = &d.encryption {
        volumes.push(Volume {
            name: "encryption-key".to_owned(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(encryption.secret_ref.name.clone()),
                items: Some(vec![KeyToPath {
                    key: ENCRYPTION_KEY.to_owned(),
                    path: ENCRYPTION_KEY.to_owned(),
                    mode: None,
                }]),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        });
        mounts.push(VolumeMount {
            name: "encryption-key".to_owned(),
            mount_path: ENCRYPTION_MOUNT.to_owned(),
            read_only: Some(true),
            ..VolumeMount::default()
        });
    }
    if d.type_ == DestinationType::Pvc {
        volumes.push(Volume {
            name: "backups".to_owned(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: d.bucket.clone(),
                read_only: None,
            }),
            ..Volume::default()
        });
        mounts.push(VolumeMount {
            name: "backups".to_owned(),
            mount_path: PVC_MOUNT.to_owned(),
            ..VolumeMount::default()
        });
    }
    Reach { env, env_from, volumes, mounts }
}

/// The pod of one run: `container` runs `bosun <args>` in `image` with `env`, as an
/// unprivileged user on a read-only root, without a ServiceAccount token.
pub(super) fn run_pod(
    container: &str,
    image: &str,
    args: &[&str],
    d: &Destination,
    mut env: Vec<EnvVar>,
    backup: &str,
    restart_policy: &str,
) -> PodSpec {
    let Reach { env: dest_env, env_from, mut volumes, mut mounts } = reach(d, backup);
    env.extend(dest_env);
    env.push(value(contract::RESULT_FILE, RESULT_FILE));
    env.push(value("TMPDIR", "/tmp"));
    env.push(value("HOME", "/tmp"));
    volumes.insert(
        0,
        Volume {
            name: "tmp".to_owned(),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: Some("Memory".to_owned()),
                size_limit: Some(Quantity("16Mi".to_owned())),
            }),
            ..Volume::default()
        },
    );
    mounts.insert(0, VolumeMount { name: "tmp".to_owned(), mount_path: "/tmp".to_owned(), ..VolumeMount::default() });
    PodSpec {
        restart_policy: Some(restart_policy.to_owned()),
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(RUN_AS),
            run_as_group: Some(RUN_AS),
            fs_group: Some(RUN_AS),
            seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".to_owned(), localhost_profile: None }),
            ..PodSecurityContext::default()
        }),
        containers: vec![Container {
            name: container.to_owned(),
            image: Some(image.to_owned()),
            image_pull_policy: Some("IfNotPresent".to_owned()),
            command: Some(vec!["bosun".to_owned()]),
            args: Some(args.iter().map(|a| (*a).to_owned()).collect()),
            env: Some(env),
            env_from,
            volume_mounts: Some(mounts),
            termination_message_path: Some(RESULT_FILE.to_owned()),
            termination_message_policy: Some("File".to_owned()),
            resources: Some(ResourceRequirements {
                requests: Some(BTreeMap::from([
                    ("cpu".to_owned(), Quantity("50m".to_owned())),
                    ("memory".to_owned(), Quantity("64Mi".to_owned())),
                ])),
                limits: Some(BTreeMap::from([("memory".to_owned(), Quantity("512Mi".to_owned()))])),
                ..ResourceRequirements::default()
            }),
            security_context: Some(SecurityContext {
                allow_privilege_escalation: Some(false),
                read_only_root_filesystem: Some(true),
                capabilities: Some(Capabilities { drop: Some(vec!["ALL".to_owned()]), add: None }),
                ..SecurityContext::default()
            }),
            ..Container::default()
        }],
        volumes: Some(volumes),
        ..PodSpec::default()
    }
}
