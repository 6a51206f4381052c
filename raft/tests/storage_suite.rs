//! The RocksDB log store and the metadata state machine against openraft's own storage test
//! suite (`openraft::testing::Suite`), plus restart behaviour the suite does not cover.

use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::testing::{StoreBuilder, Suite};
use openraft::{RaftSnapshotBuilder, StorageError, Vote};
use tempfile::TempDir;
use zper_raft::metadata::Command;
use zper_raft::{LogStore, NodeEndpoints, NodeId, StateMachineStore, TypeConfig};

struct RocksBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, TempDir> for RocksBuilder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachineStore), StorageError<NodeId>> {
        let dir = tempfile::tempdir()
            .map_err(|e| StorageError::from(openraft::StorageIOError::write(&e)))?;
        let (log, sm) = zper_raft::open(dir.path())?;
        Ok((dir, log, sm))
    }
}

#[test]
fn passes_openraft_storage_suite() {
    Suite::test_all(RocksBuilder).expect("openraft storage suite");
}

#[tokio::test]
async fn vote_and_snapshot_survive_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let (mut log, mut sm) = zper_raft::open(dir.path()).expect("open");
        log.save_vote(&Vote::new(3, 2)).await.expect("vote");
        let entry = openraft::Entry::<TypeConfig> {
            log_id: openraft::LogId::new(openraft::CommittedLeaderId::new(3, 2), 1),
            payload: openraft::EntryPayload::Normal(Command::RegisterNode {
                id: 2,
                endpoints: NodeEndpoints {
                    name: "two".into(),
                    ..Default::default()
                },
                now_ms: 5,
                lease_ms: 10,
                incarnation: 0,
            }),
        };
        sm.apply([entry]).await.expect("apply");
        sm.build_snapshot().await.expect("snapshot");
    }
    let (mut log, mut sm) = zper_raft::open(dir.path()).expect("reopen");
    assert_eq!(log.read_vote().await.expect("read"), Some(Vote::new(3, 2)));
    let (applied, _) = sm.applied_state().await.expect("state");
    assert_eq!(applied.map(|l| l.index), Some(1));
    assert_eq!(sm.metadata().nodes[&2].endpoints.name, "two");
}
