//! Which object a command is about: `NAME` (a PostgreSQL), `KIND/NAME` or `KIND NAME`,
//! the kind as kubectl accepts it (kind, singular, plural or short name, optionally
//! `.group`), resolved against the CRDs bosun serves.

use kube::core::{ApiResource, GroupVersionKind};

/// A kind bosun serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kind {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    /// What a user may call it: singular, plural, kind and short names, lower case.
    names: Vec<String>,
}

impl Kind {
    pub fn resource(&self) -> ApiResource {
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(&self.group, &self.version, &self.kind), &self.plural)
    }

    pub fn is_postgresql(&self) -> bool {
        self.kind == "PostgreSQL"
    }

    /// `singular.group`, as an error or a file name says it.
    pub fn display(&self) -> String {
        format!("{}.{}", self.kind.to_lowercase(), self.group)
    }
}

/// The kinds of bosun's CRDs, in their order (a bare `webapp` is the first group's).
pub fn all() -> Vec<Kind> {
    bosun_controller::kinds::crds()
        .into_iter()
        .filter_map(|crd| {
            let spec = crd.spec;
            let version = spec.versions.iter().find(|v| v.storage).or(spec.versions.first())?.name.clone();
            let names = spec.names;
            let mut called = vec![names.kind.to_lowercase(), names.plural.clone()];
            called.extend(names.singular.clone());
            called.extend(names.short_names.clone().unwrap_or_default());
            Some(Kind { group: spec.group, version, kind: names.kind, plural: names.plural, names: called })
        })
        .collect()
}

/// The kind a user means by `word` (`webapp`, `webapps.example.com`, `pg`, …).
pub fn find(word: &str) -> anyhow::Result<Kind> {
    let word = word.to_lowercase();
    let kinds = all();
    let found = kinds.iter().find(|k| {
        k.names
            .iter()
            .any(|n| *n == word || word.strip_prefix(n.as_str()).and_then(|g| g.strip_prefix('.')) == Some(&k.group))
    });
    match found {
        Some(kind) => Ok(kind.clone()),
        None => {
            let mut known: Vec<String> = kinds.iter().map(|k| k.kind.to_lowercase()).collect();
            known.dedup();
            anyhow::bail!("bosun knows no kind {word:?} (it knows {})", known.join(", "))
        }
    }
}

/// An object named on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub kind: Kind,
    pub name: String,
}

impl Target {
    /// `[NAME]` (a PostgreSQL), `[KIND/NAME]` or `[KIND, NAME]`.
    pub fn parse(words: &[String]) -> anyhow::Result<Target> {
        let (kind, name) = match words {
            [one] => match one.split_once('/') {
                Some((kind, name)) => (kind, name),
                None => ("postgresql", one.as_str()),
            },
            [kind, name] => (kind.as_str(), name.as_str()),
            _ => anyhow::bail!("name one object: NAME (a PostgreSQL), KIND/NAME or KIND NAME"),
        };
        if name.is_empty() || name.contains('/') {
            anyhow::bail!("{name:?} is not an object's name");
        }
        Ok(Target { kind: find(kind)?, name: name.to_owned() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(w: &[&str]) -> Vec<String> {
        w.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_bare_name_is_a_postgresql_and_kinds_are_found_as_kubectl_finds_them() {
        let t = Target::parse(&words(&["test-db"])).unwrap();
        assert_eq!((t.kind.kind.as_str(), t.name.as_str()), ("PostgreSQL", "test-db"));
        let t = Target::parse(&words(&["webapp/demo-app"])).unwrap();
        assert_eq!((t.kind.group.as_str(), t.kind.kind.as_str()), ("apps.example.com", "WebApp"));
        let t = Target::parse(&words(&["webapps.example.com", "demo"])).unwrap();
        assert_eq!(t.kind.group, "example.com");
        for word in ["AppStack", "appstacks", "backup", "restores", "voteconfig", "postgresqls", "ecommerceplatform"] {
            assert!(find(word).is_ok(), "{word}");
        }
    }

    #[test]
    fn an_unknown_kind_or_a_bad_name_is_one_clear_line() {
        let e = Target::parse(&words(&["deployment/web"])).unwrap_err().to_string();
        assert!(e.starts_with("bosun knows no kind \"deployment\" (it knows "), "{e}");
        assert!(e.contains("postgresql") && !e.contains('\n'), "{e}");
        assert!(Target::parse(&words(&["webapp/"])).is_err());
        assert!(Target::parse(&words(&["webapp/a/b"])).is_err());
    }
}
