//! How many files may be in flight at once against the relay's windows.

use std::sync::Arc;

use relay_transport::quic::Windows;
use tokio::sync::Semaphore;

/// Bytes in flight against the relay connections' windows, in 64 KiB units: a
/// file takes min(size, stream window), at least one unit; the run's
/// connections (`--relay-connections`) each bring one connection window.
pub struct InFlight {
    units: Arc<Semaphore>,
    stream_units: u64,
    total_units: u64,
}

const IN_FLIGHT_UNIT: u64 = 64 << 10;

impl InFlight {
    pub fn new(windows: &Windows, connections: usize) -> Self {
        let connections = u64::try_from(connections.max(1)).unwrap_or(1);
        let per_connection = (windows.connection_window / IN_FLIGHT_UNIT).max(1);
        let total_units = per_connection.saturating_mul(connections);
        Self {
            units: Arc::new(Semaphore::new(
                usize::try_from(total_units)
                    .unwrap_or(usize::MAX)
                    .min(Semaphore::MAX_PERMITS),
            )),
            // A file is on one connection: its stream fits that one's window.
            stream_units: (windows.stream_window / IN_FLIGHT_UNIT).clamp(1, per_connection),
            total_units,
        }
    }

    fn units_for(&self, size: u64) -> u32 {
        let units = size
            .div_ceil(IN_FLIGHT_UNIT)
            .clamp(1, self.stream_units)
            .min(self.total_units);
        u32::try_from(units).unwrap_or(u32::MAX)
    }

    pub async fn acquire(&self, size: u64) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.units
            .clone()
            .acquire_many_owned(self.units_for(size))
            .await
            .ok()
    }
}
