//! End-to-end scenarios against a real kube-apiserver: the generated CRD, the RBAC of
//! `deploy/rbac.yaml` and the reconciler binary run as its ServiceAccount.
//!
//! Run through `e2e-tests/cluster-tests.sh`: the tests share one API server and every
//! reconciler acts on every baseline, so they run serially (`--test-threads=1`); each test
//! starts from a cluster without NamespaceBaselines and uses names unique to the run.
//! Key figures are printed as `FIGURE ...` lines (run with `--nocapture` to see them).

mod common;
mod s10_plan;
mod s11_doors_holes;
mod s12_admission_chain;
mod s13_every_namespace;
mod s14_openreports;
mod s15_policy_server;
mod s16_pod_create_cost;
mod s17_in_process_gate;
mod s1_crd;
mod s2_s3_wall;
mod s4_quiet;
mod s5_spec;
mod s6_leader;
mod s7_rbac;
mod s8_invalid;
mod s9_apiserver;
mod s9_common;
mod s9_conflict;
mod s9_faults;
mod s9_kill;
