//! Where the registry comes from. Each source keeps the [`Store`](crate::state::Store) up to
//! date; the rest of the control plane only ever reads the store.

pub mod file;
