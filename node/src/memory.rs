//! The node's memory budget (issue #13, defect 5): every endpoint that builds large replies
//! for a peer (reader FETCH and stream replies, replication fetches) first asks
//! [`MemoryBudget::allows`], and answers with a status (or a smaller reply) instead of
//! allocating past `memory_budget`.
//!
//! What is counted is the heap as the allocator reports it (jemalloc's `stats.allocated`: the
//! `zper` binary's global allocator and, since issue #16, also the C allocator of RocksDB and
//! libzmq): replies waiting in libzmq's queues are Rust allocations handed over without a
//! copy, so bytes a slow or absent client has not read yet are counted until libzmq has written
//! them out; RocksDB's memtables and caches count too (RocksDB bounds them by its own options,
//! a few tens of MB). In a process whose global allocator is not jemalloc (unit tests of this
//! library) the heap reads as 0 and nothing is refused.
//!
//! The budget may be passed by at most the replies being built at that moment (reader
//! workers × `max_message`), which is why the check is made with the reply's size.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// How often the allocator's statistics are refreshed when a request comes near the ceiling,
/// ms (refreshing merges every arena's statistics under their locks, so it is not done per
/// request).
const REFRESH_MS: u64 = 5;
/// How old a reading may be while it, what was allowed since and the request stay under half
/// the ceiling, ms: at 5 ms, refreshing cost about 2% of a 2-core machine's CPU under 64 Dolly
/// clients.
const REFRESH_FAR_MS: u64 = 100;

/// A process-wide ceiling on heap bytes, shared by the endpoints.
#[derive(Debug)]
pub struct MemoryBudget {
    /// The ceiling, bytes (`memory_budget`).
    limit: u64,
    /// Requests answered with a status (or a smaller reply) because of the ceiling.
    refused: AtomicU64,
}

impl MemoryBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: u64) -> MemoryBudget {
        MemoryBudget {
            limit,
            refused: AtomicU64::new(0),
        }
    }

    /// The ceiling, bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Whether `extra` more bytes fit under the ceiling now. A false answer is counted (see
    /// [`MemoryBudget::refused`]).
    ///
    /// Far below the ceiling (the last reading, plus every request allowed since it, plus this
    /// one, under half the ceiling) a reading up to [`REFRESH_FAR_MS`] old decides; otherwise one
    /// at most [`REFRESH_MS`] old. Counting what was allowed since the reading keeps a burst of
    /// requests in one stale interval from passing the ceiling (CI, with only the reading
    /// checked: 3 x 60 unread 8 MiB FETCHes took a node to 301 MiB under a 128 MiB budget).
    pub fn allows(&self, extra: u64) -> bool {
        let seen = heap_bytes_at_most(REFRESH_FAR_MS);
        let since = ALLOWED_SINCE_READ.load(Ordering::Relaxed);
        let far = seen.saturating_add(since).saturating_add(extra) <= self.limit / 2;
        let ok = far || heap_bytes().saturating_add(extra) <= self.limit;
        if ok {
            ALLOWED_SINCE_READ.fetch_add(extra, Ordering::Relaxed);
        } else {
            self.refused.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }

    /// How many times [`MemoryBudget::allows`] said no.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

/// Bytes [`MemoryBudget::allows`] let through since the allocator's statistics were last read
/// (they are in the next reading, once allocated).
static ALLOWED_SINCE_READ: AtomicU64 = AtomicU64::new(0);

/// Heap bytes allocated through jemalloc, at most [`REFRESH_MS`] old; 0 when jemalloc is not
/// the process's allocator or its statistics cannot be read.
pub fn heap_bytes() -> u64 {
    heap_bytes_at_most(REFRESH_MS)
}

/// [`heap_bytes`], read at most `max_age_ms` ago.
fn heap_bytes_at_most(max_age_ms: u64) -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    static REFRESHED_MS: AtomicU64 = AtomicU64::new(u64::MAX);
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = START.get_or_init(Instant::now).elapsed().as_millis() as u64;
    let at = REFRESHED_MS.load(Ordering::Relaxed);
    if at == u64::MAX || now.saturating_sub(at) >= max_age_ms {
        REFRESHED_MS.store(now, Ordering::Relaxed);
        if tikv_jemalloc_ctl::epoch::advance().is_ok() {
            if let Ok(bytes) = tikv_jemalloc_ctl::stats::allocated::read() {
                LAST.store(bytes as u64, Ordering::Relaxed);
                ALLOWED_SINCE_READ.store(0, Ordering::Relaxed);
            }
        }
    }
    LAST.load(Ordering::Relaxed)
}

/// Lets jemalloc return freed memory to the system from its own thread (so a node's resident
/// size falls again after a burst, without waiting for more allocations). Called once by the
/// binary; failures are ignored (the allocator may not be jemalloc).
pub fn return_freed_memory_in_background() {
    let _ = tikv_jemalloc_ctl::background_thread::write(true);
}

/// The allocator's view of the heap on `/metrics` (issue #16: a node's RSS stayed near 300 MB
/// after a load while its live Rust heap was 16 MB; these showed whose memory it was):
/// - `zper_memory_heap_allocated_bytes`: live allocations (jemalloc `stats.allocated`, what
///   [`MemoryBudget`] counts; RocksDB's and libzmq's included in the `zper` binary);
/// - `zper_memory_heap_resident_bytes`: pages jemalloc holds in memory (`stats.resident`),
///   freed ones not yet returned included;
/// - `zper_memory_heap_retained_bytes`: address space jemalloc keeps unmapped for reuse
///   (`stats.retained`; not resident).
///
/// `process_resident_memory_bytes` minus the resident heap is memory outside jemalloc: thread
/// stacks, the binary, and the C allocator's where jemalloc does not replace it. All read 0
/// when jemalloc is not the process's allocator.
pub struct HeapCollector {
    allocated: prometheus::IntGauge,
    resident: prometheus::IntGauge,
    retained: prometheus::IntGauge,
}

impl HeapCollector {
    /// The three gauges.
    ///
    /// Errors: only if a metric name were invalid (they are static).
    pub fn new() -> prometheus::Result<HeapCollector> {
        let g = |name: &str, help: &str| prometheus::IntGauge::new(name, help);
        Ok(HeapCollector {
            allocated: g(
                "zper_memory_heap_allocated_bytes",
                "Live heap allocations, RocksDB's and libzmq's included in the zper binary (jemalloc stats.allocated), bytes.",
            )?,
            resident: g(
                "zper_memory_heap_resident_bytes",
                "Heap pages the allocator holds in memory, freed ones not yet returned included (jemalloc stats.resident), bytes.",
            )?,
            retained: g(
                "zper_memory_heap_retained_bytes",
                "Address space the allocator keeps unmapped for reuse (jemalloc stats.retained), bytes.",
            )?,
        })
    }

    fn gauges(&self) -> [&prometheus::IntGauge; 3] {
        [&self.allocated, &self.resident, &self.retained]
    }
}

impl prometheus::core::Collector for HeapCollector {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        self.gauges().into_iter().flat_map(|g| g.desc()).collect()
    }

    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        use tikv_jemalloc_ctl::stats;
        let fresh = tikv_jemalloc_ctl::epoch::advance().is_ok();
        let read = |r: tikv_jemalloc_ctl::Result<usize>| {
            if fresh {
                r.map_or(0, |b| b as i64)
            } else {
                0
            }
        };
        self.allocated.set(read(stats::allocated::read()));
        self.resident.set(read(stats::resident::read()));
        self.retained.set(read(stats::retained::read()));
        self.gauges()
            .into_iter()
            .flat_map(|g| g.collect())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_says_no_past_its_limit_and_counts_it() {
        // In unit tests the heap reads as jemalloc's count (0 when it is not the allocator).
        let b = MemoryBudget::new(1 << 20);
        assert!(b.allows(0) || heap_bytes() > 1 << 20);
        assert!(!b.allows(u64::MAX / 2));
        assert!(b.refused() >= 1);
        assert_eq!(b.limit(), 1 << 20);
    }

    #[test]
    fn the_heap_collector_reports_three_gauges() {
        use prometheus::core::Collector;
        let c = HeapCollector::new().expect("collector");
        let names: Vec<String> = c.collect().iter().map(|f| f.name().to_owned()).collect();
        assert_eq!(
            names,
            [
                "zper_memory_heap_allocated_bytes",
                "zper_memory_heap_resident_bytes",
                "zper_memory_heap_retained_bytes"
            ]
        );
    }
}
