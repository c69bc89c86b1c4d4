//! What the runner benchmarks (`make bench-backup`, `make bench-pitr`) share: sizes,
//! a measured `bosun` run, the shared PostgreSQL server and a table of a given size.

pub mod runner;
