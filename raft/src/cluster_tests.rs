//! Unit tests of the cluster node's Raft configuration and directory claim.

use super::*;

#[test]
fn a_follower_gets_seconds_not_a_heartbeat_to_install_a_snapshot() {
    let dir = tempfile::tempdir().expect("tempdir");
    let endpoints = NodeEndpoints::default();
    let config = ClusterConfig::single(1, endpoints, dir.path().to_owned());
    let raft = raft_config(&config).expect("valid");
    assert_eq!(raft.install_snapshot_timeout, INSTALL_SNAPSHOT_TIMEOUT_MS);
    assert!(raft.install_snapshot_timeout >= 5 * raft.election_timeout_max);
}

#[test]
fn a_raft_dir_belongs_to_one_node_id() {
    let dir = tempfile::tempdir().expect("tempdir");
    claim_dir(dir.path(), 1).expect("first claim");
    claim_dir(dir.path(), 1).expect("same id again");
    match claim_dir(dir.path(), 5) {
        Err(ClusterError::IdMismatch {
            stored, configured, ..
        }) => assert_eq!((stored, configured), (1, 5)),
        other => panic!("expected IdMismatch, got {other:?}"),
    }
    std::fs::write(dir.path().join(NODE_ID_FILE), "garbage").expect("write");
    assert!(matches!(
        claim_dir(dir.path(), 1),
        Err(ClusterError::Io { .. })
    ));
}
