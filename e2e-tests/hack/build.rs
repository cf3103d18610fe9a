// A build script, so that cargo considers the build dependencies.
fn main() {}
