//! The languages suite as one test binary: each file of this directory is a
//! module (its tests keep the file's name as a filter, `parity::`), so the
//! host, wasmtime and the components are linked once. Without feature
//! `languages` every module but `probe` is empty.

mod bindings;
mod eval;
mod examples;
mod faults;
mod parity;
mod probe;
mod templates;
mod tour;
