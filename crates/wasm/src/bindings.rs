//! The host side of `wit/module.wit`, generated. Every import is async on the host (a
//! module waiting for the request body or for the client parks its fiber, not the
//! worker), and so is the `handle` export.

wasmtime::component::bindgen!({
    world: "module",
    path: "../../wit",
    imports: { default: async },
    exports: { default: async },
});
