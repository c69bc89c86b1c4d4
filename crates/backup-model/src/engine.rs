//! The kinds of database bosun backs up.

/// The kind of database, which decides the dump and restore tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    Postgresql,
    Mysql,
    Mongodb,
}

impl Engine {
    /// The name used in URLs, manifests and the Backup spec.
    pub fn as_str(self) -> &'static str {
        match self {
            Engine::Postgresql => "postgresql",
            Engine::Mysql => "mysql",
            Engine::Mongodb => "mongodb",
        }
    }

    /// The environment variable the engine's own tools (and the runner) read the
    /// password from.
    pub fn password_variable(self) -> &'static str {
        match self {
            Engine::Postgresql => "PGPASSWORD",
            Engine::Mysql => "MYSQL_PWD",
            Engine::Mongodb => "MONGODB_PASSWORD",
        }
    }

    /// The port its servers listen on unless told otherwise.
    pub fn default_port(self) -> u16 {
        match self {
            Engine::Postgresql => 5432,
            Engine::Mysql => 3306,
            Engine::Mongodb => 27017,
        }
    }

    /// The dump's file extension before `.zst`: what a person needs to load it by hand.
    pub fn extension(self) -> &'static str {
        match self {
            // pg_dump's custom format (pg_restore reads it), uncompressed inside.
            Engine::Postgresql => "pgdump",
            Engine::Mysql => "sql",
            Engine::Mongodb => "archive",
        }
    }
}
