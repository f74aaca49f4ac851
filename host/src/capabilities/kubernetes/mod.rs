//! The `kubernetes` capability (owned by k8s-cap; this file only registers `transfer`
//! until theirs is merged).

pub mod transfer;
