/// Size limits applied while parsing a request head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest request target accepted; longer gets 414.
    pub max_target: usize,
    /// Largest request head (request line + header fields) accepted; larger gets 431.
    pub max_head: usize,
}

/// nginx's `large_client_header_buffers 4 8k` lets an 8 KiB request line through.
pub const DEFAULT_MAX_TARGET: usize = 8 * 1024;
/// Enough for long cookies; Apache's LimitRequestFieldSize (8 KiB) times two.
pub const DEFAULT_MAX_HEAD: usize = 16 * 1024;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_target: DEFAULT_MAX_TARGET,
            max_head: DEFAULT_MAX_HEAD,
        }
    }
}
