//! Nothing: this package exists for its dependencies (see its Cargo.toml).
