//! The page's answers, each from the core's own functions: a request's verdict (`evaluate`),
//! the wall a baseline installs (`wall`), the holes and DNS doors of pasted objects
//! (`cluster`), an example as YAML (`convert`).

pub mod cluster;
pub mod convert;
pub mod evaluate;
pub mod wall;
