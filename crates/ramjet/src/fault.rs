//! Test-only fault injection (cargo feature `fault-injection`, never in a release build):
//! a producer wrapper whose path `/__ramjet_fault/spin` makes the worker spin forever
//! without returning to its event loop, so a test can show that TERM still ends the
//! process within `timeouts.shutdown` (issue 11).

use ramjet_pipeline::{Content, Later, Outcome, Request};

/// The path that spins the worker that reads it.
const SPIN: &[u8] = b"/__ramjet_fault/spin";

/// Wraps the real producer; every other path goes to it untouched.
pub struct Faults<C>(pub C);

impl<C: Content> Content for Faults<C> {
    fn produce<'r>(&'r self, req: &'r Request<'r>) -> Result<Outcome, Later<'r>> {
        if req.path == SPIN {
            tracing::warn!("fault injection: this worker now spins forever");
            loop {
                std::hint::spin_loop();
            }
        }
        self.0.produce(req)
    }

    fn on_reload(&self) {
        self.0.on_reload();
    }

    fn on_tick(&self) {
        self.0.on_tick();
    }
}
