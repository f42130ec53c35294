//! Every syscall ramjet makes outside tokio and std, in one place.
//!
//! Contract: functions here are thin, synchronous and non-blocking unless their name says
//! `blocking_`; callers on the event loop must only call the non-blocking ones. `unsafe` is
//! allowed only in this module, and every use carries a `// SAFETY:` line.

mod activation;
mod clock;
mod connect;
mod file;
mod inotify;
mod mapping;
mod memory;
mod process;
mod ready_set;
mod receive;
mod residency;
mod send;
mod socket;
mod spawner;
pub mod upgrade;
mod walk;

pub use activation::take_activated_listeners;
pub use clock::unix_seconds;
pub use connect::{connect_outcome, start_connect};
pub use file::{
    append_cached, blocking_read_dir, is_symlink_loop, needs_blocking_open, open_beneath,
    open_beneath_cached, open_cached, open_owner_matched, read_at, read_at_cached, read_cached,
    read_vectored_cached, stat_beneath, FileStat, OpenPolicy,
};
pub use inotify::{Change, DirWatch};
pub use mapping::Mapping;
pub use memory::trim_heap;
pub use process::{child_pidfd, cloexec_inherited, pin_to_cpu, raise_nofile_limit, send_signal};
pub use ready_set::ReadySet;
pub use receive::recv_discard;
pub use residency::{blocking_warm, drop_from_page_cache, is_resident, was_read_in};
pub use send::{send_now, sendfile, writev_more};
pub use socket::{
    bind_address_no_port, corked, data_segments_in, defer_accept, duplicate, max_segment, paced,
    peer_on_this_host, set_congestion_control, set_cork, set_unsent_limit, shutdown_write,
    unsent_bytes, unsent_limit,
};
pub use spawner::{pipe, Program, Spawner};
pub use walk::openat2_available;
