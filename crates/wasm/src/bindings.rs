//! The host side of `wit/module.wit`, generated. The imports that may wait (the request
//! body, the client of a streamed answer, the disk) are async on the host: the module's
//! fiber parks, not the worker. The others are plain calls, cheaper. The `handle` export is
//! async.

wasmtime::component::bindgen!({
    world: "module",
    path: "../../wit",
    imports: {
        "ramjet:module/http.read-body": async,
        "ramjet:module/http.write": async,
        "ramjet:module/http.flush": async,
        "ramjet:module/files.size": async,
        "ramjet:module/files.send": async,
        "ramjet:module/files.read": async,
        "ramjet:module/files.find": async,
        "ramjet:module/journal.append": async,
        "ramjet:module/journal.send": async,
        "ramjet:module/journal.clear": async,
        "ramjet:module/upstream.request": async,
    },
    exports: { default: async },
    // The request handed to `handle` borrows the connection's buffer: nothing is copied
    // on the host side before it is lowered into the instance.
    ownership: Borrowing { duplicate_if_necessary: true },
});
