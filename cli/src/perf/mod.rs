//! `zper perf`: throughput and latency tools in the spirit of ZPER's ProducerPerformance and
//! ConsumerPerformance (spec `zper.md` §10) and kafka-producer-perf-test, plus the baselines the
//! benchmark compares against (raw libzmq PUSH/PULL, fdatasync latency).
//!
//! Messages are two frames like the original tool's: a 5-byte header (`00` + a 4-byte big-endian
//! sequence number instead of the CRC, so acks can be counted) and the payload of `x` bytes; a
//! 100-byte payload is stored as 109 bytes, as in §10.2. Every tool prints one summary line of
//! `key=value` fields; with an ack mode the producer counts only messages the broker acknowledged
//! as durable.

mod baseline;
mod consume;
mod dolly;
mod etcd;
mod metadata;
mod produce;
mod report;
mod subscribe;

use anyhow::Result;
use clap::Subcommand;
use zper_client::Endpoints;

/// Perf subcommands.
#[derive(Debug, Subcommand)]
pub enum PerfCommand {
    /// Produce messages and report msg/s, MB/s (and p50/p99 latency in mode 2).
    Produce(produce::ProduceArgs),
    /// Consume a topic from the earliest offset and report msg/s, MB/s.
    Consume(consume::ConsumeArgs),
    /// Baseline: raw libzmq PUSH -> PULL over loopback TCP, same message count and size.
    Raw(baseline::RawArgs),
    /// Baseline: latency of one small append + fdatasync in a directory.
    Fsync(baseline::FsyncArgs),
    /// Raft metadata commits/s and latency through the HTTP admin API (create/delete topics);
    /// with --retry-ms, the time to the first commit (run right after killing the leader).
    Metadata(metadata::MetadataArgs),
    /// Dolly Puts/s and latency: pipelined Puts from many DEALERs over one or more nodes.
    DollyPut(dolly::DollyPerfArgs),
    /// Dolly Gets/s and latency (of keys an earlier dolly-put wrote).
    DollyGet(dolly::DollyPerfArgs),
    /// etcd v3 Puts/s and latency over gRPC, shaped as dolly-put (issue #16's side-by-side
    /// benchmark, bench/etcd.sh).
    EtcdPut(etcd::EtcdPerfArgs),
    /// Records/s pushed to K subscribers of a group (issue #7), or with --fetch read by K FETCH
    /// pollers: the same topic, every reader reads N messages.
    Subscribe(subscribe::SubscribePerfArgs),
}

/// Runs a perf subcommand. Ctrl-C stops it with a partial report (`interrupted=true`), then
/// the process exits 130.
pub fn run(cmd: PerfCommand, targets: &Endpoints) -> Result<()> {
    report::catch_interrupt()?;
    let result = match cmd {
        PerfCommand::Produce(a) => produce::run(a, targets),
        PerfCommand::Consume(a) => consume::run(a, targets),
        PerfCommand::Raw(a) => baseline::raw(a),
        PerfCommand::Fsync(a) => baseline::fsync(a),
        PerfCommand::Metadata(a) => metadata::run(a, targets),
        PerfCommand::DollyPut(a) => dolly::perf(a, zper_wire::dolly::Method::Put, targets),
        PerfCommand::DollyGet(a) => dolly::perf(a, zper_wire::dolly::Method::Get, targets),
        PerfCommand::Subscribe(a) => subscribe::run(a, targets),
        PerfCommand::EtcdPut(a) => etcd::perf(a),
    };
    if report::interrupted() {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        if let Err(e) = &result {
            let _ = writeln!(std::io::stderr(), "zper: interrupted: {e:#}");
        }
        std::process::exit(130);
    }
    result
}
