//! Generates the prost types of `apache.rocketmq.v2` from the protos thrust ships
//! (src/thrust/_proto/apache/rocketmq/v2), with the protoc that the `protoc-bin-vendored` crate carries,
//! so that a build needs nothing but crates.io.
use std::path::PathBuf;

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../src/thrust/_proto");
    let dir = root.join("apache/rocketmq/v2");
    let protos = [dir.join("definition.proto"), dir.join("service.proto")];
    for p in &protos {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    let protoc = protoc_bin_vendored::protoc_bin_path()
        .expect("protoc-bin-vendored has no protoc for this platform");
    let include =
        protoc_bin_vendored::include_path().expect("protoc-bin-vendored has no include path");
    let mut config = prost_build::Config::new();
    config.protoc_executable(protoc);
    // bytes fields as `bytes::Bytes`: a received body is a slice of the decode buffer, copied once, into
    // the Python `bytes` the listener gets.
    config.bytes(["."]);
    config
        .compile_protos(&protos, &[root, include])
        .expect("compiling the apache.rocketmq.v2 protos");
}
