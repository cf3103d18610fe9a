//! The process: its command line, `run` (a controller per leadership term, the shutdown),
//! the HTTP server (health, readiness, metrics), the API client and the logs.

pub mod api_client;
pub mod cli;
pub mod hedged_reads;
pub mod http;
pub mod run;
pub mod telemetry;
