//! Workers, listeners, timers, signals and shutdown; `sys` holds every syscall.
//!
//! Brief overview: [`bind`] opens one `SO_REUSEPORT` listener per worker per address;
//! [`start`] runs N worker threads, each with its own tokio `current_thread` runtime and
//! `LocalSet`, accepting on its own listeners and handing each connection to its [`Worker`];
//! [`Server`] is the handle the main thread uses to reload and stop them; [`signals`] turns
//! Unix signals into [`signals::Signal`]s. The worker knows nothing of HTTP.

pub mod busy;
pub mod child;
pub mod group_commit;
mod lazy_timer;
mod listen;
pub mod signals;
mod spares;
pub mod sys;
mod worker;

pub use lazy_timer::LazyTimer;
pub use listen::{adopt, bind, claim_all, Listeners};
pub use spares::Spares;
pub use worker::{start, Handed, Injector, Server, Worker};
