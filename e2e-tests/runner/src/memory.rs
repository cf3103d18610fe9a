//! Host-allocated linear memory whose size the host can read: wasmtime keeps an instance's
//! memory behind the store that `wasmtime-provider` owns, so the only way for the host to
//! see how large the guest's heap has grown is to allocate that memory itself
//! ([`wasmtime::MemoryCreator`]).
//!
//! The memory is a plain zeroed heap allocation that moves when it outgrows its capacity,
//! so the engine must be configured with no reservation and no guard region (explicit
//! bounds checks, base pointer reloaded after growth): see [`configure`]. That costs some
//! speed and changes nothing the guest can observe, which is why it is opt-in
//! ([`crate::HostOptions::track_memory`]). One more cost: without copy-on-write
//! initialisation, instantiating runs epoch-instrumented code before the store has a
//! deadline, so epoch interruption is off in this mode and the evaluation deadline is
//! checked when a call returns (a runaway guest is not stopped, only reported).

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use wasmtime_provider::wasmtime;

/// Alignment of the allocation (a host page: more than any wasm access needs).
const ALIGN: usize = 4096;

/// Reads the byte size of the most recently created memory: the live instance's (a
/// replaced instance's memory is created before the old one is dropped).
#[derive(Debug, Clone, Default)]
pub struct Gauge {
    current: Arc<Mutex<Arc<AtomicUsize>>>,
    created: Arc<AtomicUsize>,
}

impl Gauge {
    /// Bytes of linear memory of the live instance.
    pub fn bytes(&self) -> usize {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .load(Ordering::SeqCst)
    }

    /// Memories created so far (one per instance).
    pub fn memories_created(&self) -> usize {
        self.created.load(Ordering::SeqCst)
    }

    fn track(&self) -> Arc<AtomicUsize> {
        let size = Arc::new(AtomicUsize::new(0));
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = size.clone();
        self.created.fetch_add(1, Ordering::SeqCst);
        size
    }
}

/// Sets up `config` so that every linear memory is a [`TrackedMemory`] reported to `gauge`.
pub fn configure(config: &mut wasmtime::Config, gauge: &Gauge) {
    config
        .with_host_memory(Arc::new(Creator {
            gauge: gauge.clone(),
        }))
        .memory_reservation(0)
        .memory_guard_size(0)
        .memory_reservation_for_growth(0)
        .guard_before_linear_memory(false)
        .memory_may_move(true)
        // Copy-on-write initialisation needs wasmtime's own mmap-based memories.
        .memory_init_cow(false)
        // Without copy-on-write, instantiation runs instrumented code before
        // wasmtime-provider sets a store's first epoch deadline (a store starts at 0): with
        // epoch interruption every instantiation would trap. The deadline is then checked
        // by the host when each call returns (see `PolicyHost::call`).
        .epoch_interruption(false);
}

struct Creator {
    gauge: Gauge,
}

// SAFETY: the memories are owned by wasmtime once returned and only touched by it: see
// `TrackedMemory`.
unsafe impl wasmtime::MemoryCreator for Creator {
    fn new_memory(
        &self,
        _ty: wasmtime::MemoryType,
        minimum: usize,
        maximum: Option<usize>,
        reserved_size_in_bytes: Option<usize>,
        guard_size_in_bytes: usize,
    ) -> Result<Box<dyn wasmtime::LinearMemory>, String> {
        if reserved_size_in_bytes.is_some_and(|reserved| reserved > 0) || guard_size_in_bytes > 0 {
            return Err(format!(
                "tracked memory needs no reservation and no guard region (got {reserved_size_in_bytes:?} reserved, {guard_size_in_bytes} guard): use memory::configure"
            ));
        }
        let size = self.gauge.track();
        TrackedMemory::new(minimum, maximum, size).map(|memory| Box::new(memory) as _)
    }
}

/// A zeroed heap allocation serving as one linear memory; bytes past `size` stay zero (the
/// guest cannot write there, and the memory never shrinks), so growing within the
/// capacity needs no clearing.
struct TrackedMemory {
    base: NonNull<u8>,
    capacity: usize,
    size: usize,
    maximum: Option<usize>,
    gauge: Arc<AtomicUsize>,
}

// SAFETY: the allocation is exclusively owned by this value; wasmtime serialises access.
unsafe impl Send for TrackedMemory {}
// SAFETY: as above: `&self` methods only read the fields.
unsafe impl Sync for TrackedMemory {}

fn layout(capacity: usize) -> Result<Layout, String> {
    Layout::from_size_align(capacity.max(ALIGN), ALIGN).map_err(|error| error.to_string())
}

fn allocate(capacity: usize) -> Result<NonNull<u8>, String> {
    let layout = layout(capacity)?;
    // SAFETY: the layout has a non-zero size.
    NonNull::new(unsafe { alloc_zeroed(layout) })
        .ok_or_else(|| format!("cannot allocate {capacity} bytes of linear memory"))
}

impl TrackedMemory {
    fn new(
        minimum: usize,
        maximum: Option<usize>,
        gauge: Arc<AtomicUsize>,
    ) -> Result<Self, String> {
        let base = allocate(minimum)?;
        gauge.store(minimum, Ordering::SeqCst);
        Ok(Self {
            base,
            capacity: minimum.max(ALIGN),
            size: minimum,
            maximum,
            gauge,
        })
    }
}

impl Drop for TrackedMemory {
    fn drop(&mut self) {
        if let Ok(layout) = layout(self.capacity) {
            // SAFETY: allocated in `allocate` with this very layout.
            unsafe { dealloc(self.base.as_ptr(), layout) };
        }
    }
}

// SAFETY: `as_ptr` points at `capacity >= size` zero-initialised bytes owned by this value;
// growth beyond the capacity moves the memory, which the engine allows (memory_may_move).
unsafe impl wasmtime::LinearMemory for TrackedMemory {
    fn byte_size(&self) -> usize {
        self.size
    }

    fn byte_capacity(&self) -> usize {
        self.capacity
    }

    fn grow_to(&mut self, new_size: usize) -> wasmtime::Result<()> {
        if self.maximum.is_some_and(|maximum| new_size > maximum) {
            wasmtime::bail!("linear memory maximum exceeded");
        }
        if new_size > self.capacity {
            // Double (within the maximum) so that a growing heap moves rarely.
            let doubled = self.capacity.saturating_mul(2);
            let capacity =
                new_size.max(self.maximum.map_or(doubled, |maximum| doubled.min(maximum)));
            let base = allocate(capacity).map_err(wasmtime::Error::msg)?;
            // SAFETY: both regions are valid for `size` bytes and distinct allocations.
            unsafe { std::ptr::copy_nonoverlapping(self.base.as_ptr(), base.as_ptr(), self.size) };
            if let Ok(old) = layout(self.capacity) {
                // SAFETY: the old allocation, with its layout.
                unsafe { dealloc(self.base.as_ptr(), old) };
            }
            self.base = base;
            self.capacity = capacity;
        }
        self.size = new_size;
        self.gauge.store(new_size, Ordering::SeqCst);
        Ok(())
    }

    fn as_ptr(&self) -> *mut u8 {
        self.base.as_ptr()
    }
}
