//! The shared test kit (`testkit/`), for every test file of this directory.
#![allow(unused_imports)]

pub use zper_testkit::*;

pub mod run;
