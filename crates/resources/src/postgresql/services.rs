//! The Services: read-write (the primary), read-only, and headless.

use super::*;

pub(super) fn service(db: &PostgreSQL, name: String, selector: BTreeMap<String, String>, headless: bool) -> Service {
    Service {
        metadata: child_meta(db, name, labels(db)),
        spec: Some(ServiceSpec {
            selector: Some(selector),
            ports: Some(vec![ServicePort {
                name: Some("postgres".to_owned()),
                port: PORT,
                target_port: Some(IntOrString::Int(PORT)),
                ..ServicePort::default()
            }]),
            cluster_ip: headless.then(|| "None".to_owned()),
            publish_not_ready_addresses: headless.then_some(true),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// The Services of `db`: `<name>` (the pod labelled primary), `<name>-headless` (the
/// StatefulSet's) and, with more than one replica, `<name>-ro` (the standbys).
pub fn desired_services(db: &PostgreSQL) -> Vec<Service> {
    let with = |key: &str, value: String| {
        let mut selector = labels(db);
        selector.insert(key.to_owned(), value);
        selector
    };
    let mut services = vec![
        service(db, db.name_any(), with(ROLE_LABEL, ROLE_PRIMARY.to_owned()), false),
        service(db, headless_name(db), labels(db), true),
    ];
    if db.spec.replicas > 1 {
        services.push(service(db, read_only_name(db), with(ROLE_LABEL, ROLE_REPLICA.to_owned()), false));
    }
    services
}
