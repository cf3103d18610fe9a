//! Structured logs through `tracing`: text for people, JSON for log pipelines. The level
//! comes from `RUST_LOG` (default `info`).

use tracing_subscriber::EnvFilter;

use crate::base::error::{Error, Result};
use crate::runtime::cli::LogFormat;

pub fn init(format: LogFormat) -> Result<()> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    let installed = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    installed.map_err(|error| Error::Telemetry(error.to_string()))
}
