//! Giving freed heap memory back to the kernel.

/// Return the allocator's free pages to the kernel (glibc `malloc_trim(0)`: the top of the
/// heap, and whole free pages inside it). After many connections leave their tasks at once
/// (parking), their freed memory would otherwise stay resident. Takes a few milliseconds
/// with a large heap: call it rarely, never per request.
pub fn trim_heap() {
    // SAFETY: malloc_trim only walks and releases the allocator's own free lists; it takes
    // the allocator's locks and has no preconditions on the caller.
    unsafe {
        libc::malloc_trim(0);
    }
}
