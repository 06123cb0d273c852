//! The log lines of in-process relays, captured for one test only: a runtime
//! whose every thread (workers and blocking pool) has the capture as its
//! thread's default subscriber, so tests beside it in the same process keep
//! theirs (none) and their lines never mix in. One subscriber serves all of
//! the runtime's threads: a span entered on one thread is known on the next
//! one its task moves to, so every line keeps its transfer's fields.

use std::sync::{Arc, Mutex};

use tracing::Dispatch;
use tracing_subscriber::filter::LevelFilter;

/// What a test's relays logged at INFO and above, as text.
#[derive(Clone, Default)]
pub struct LogCapture(Arc<Mutex<Vec<u8>>>);

impl LogCapture {
    /// A two-worker runtime (as `#[tokio::test(flavor = "multi_thread")]`)
    /// whose threads log into this capture, and the capture's dispatcher for
    /// any other thread of the test.
    pub fn runtime(&self) -> (tokio::runtime::Runtime, Dispatch) {
        let dispatch = Dispatch::new(self.subscriber());
        let each_thread = dispatch.clone();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .on_thread_start(move || {
                // The guard would restore the thread's previous default when
                // dropped; the thread ends with the runtime, so it is kept.
                std::mem::forget(tracing::dispatcher::set_default(&each_thread));
            })
            .build()
            .unwrap_or_else(|e| panic!("runtime: {e}"));
        (runtime, dispatch)
    }

    /// Runs `test` on `runtime()`, with the calling thread capturing too.
    pub fn block_on<F: std::future::Future>(&self, test: F) -> F::Output {
        let (runtime, dispatch) = self.runtime();
        let _here = tracing::dispatcher::set_default(&dispatch);
        // Each callsite caches whether any subscriber wants it. A callsite that
        // another test's thread registered while this capture's dispatcher was
        // being registered can keep the interest computed without it ("never"),
        // and its lines would be lost here; now that the dispatcher is
        // registered, computing every callsite's interest again includes it.
        tracing::callsite::rebuild_interest_cache();
        runtime.block_on(test)
    }

    /// The captured lines that name `what`.
    pub fn lines_about(&self, what: &str) -> Vec<String> {
        let log = self.0.lock().unwrap_or_else(|p| p.into_inner());
        String::from_utf8_lossy(&log)
            .lines()
            .filter(|l| l.contains(what))
            .map(str::to_string)
            .collect()
    }

    fn subscriber(&self) -> impl tracing::Subscriber + Send + Sync + 'static {
        let capture = self.clone();
        tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(LevelFilter::INFO)
            .with_writer(move || capture.clone())
            .finish()
    }
}

impl std::io::Write for LogCapture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
