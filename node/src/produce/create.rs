//! Topic creation on first write (issue #4: "the first write to a new topic creates it"):
//! through Raft with the node's defaults, waiting until this node applied it so the writer
//! knows at once who leads it.

use crate::replication::PlacementView;

/// Creates a topic through Raft with the defaults when the writer first sees it (issue #4:
/// "the first write to a new topic creates it"), and waits until this node has applied it, so
/// the writer knows at once who leads it.
#[derive(Clone)]
pub struct TopicCreator {
    /// The Raft member.
    pub cluster: zper_raft::ClusterNode,
    /// Its runtime, to block on the proposal from a writer thread.
    pub runtime: tokio::runtime::Handle,
    /// The placement view to refresh.
    pub view: PlacementView,
    /// `retain_hours` of the topics it creates: this node's (`None`: the metadata default).
    pub retain_hours: Option<u32>,
}

/// Longest a writer waits for a new topic to be created and applied here.
pub const CREATE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

impl TopicCreator {
    /// Ensures `topic` is in the metadata (creating it with the defaults if needed) and in
    /// this node's placement view.
    ///
    /// Errors: the creation did not commit (no quorum, no live node) or was not applied here
    /// within [`CREATE_TIMEOUT`]; a message for the log.
    pub fn ensure(&self, topic: &str) -> Result<(), String> {
        // The view refreshes every few ms: look at the applied metadata itself first.
        self.view.refresh(&self.cluster);
        if self.view.fragment(topic).is_some() {
            return Ok(());
        }
        use zper_raft::metadata::MetadataError;
        let deadline = std::time::Instant::now() + CREATE_TIMEOUT;
        loop {
            let command = zper_raft::metadata::Command::CreateTopic {
                name: topic.to_owned(),
                fragments: None,
                replication_factor: None,
                retain_hours: self.retain_hours,
                policy: Default::default(),
                now_ms: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64),
            };
            let cluster = self.cluster.clone();
            let result = self.runtime.block_on(async move {
                tokio::time::timeout(CREATE_TIMEOUT, cluster.propose(command)).await
            });
            let retry = match result {
                Ok(Ok(Ok(_))) | Ok(Ok(Err(MetadataError::TopicExists(_)))) => break,
                // No live node yet (this node registers just after it starts): wait a little.
                Ok(Ok(Err(e @ MetadataError::NotEnoughNodes { .. }))) => e.to_string(),
                Ok(Ok(Err(e))) => return Err(e.to_string()),
                Ok(Err(e)) => return Err(e.to_string()),
                Err(_) => return Err("creation did not commit in time".into()),
            };
            if std::time::Instant::now() >= deadline {
                return Err(retry);
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        while std::time::Instant::now() < deadline {
            self.view.refresh(&self.cluster);
            if self.view.fragment(topic).is_some() {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        Err("created, but not applied here in time".into())
    }
}
