//! The adapters both wings use: Kubernetes objects cut to what is read (`slim`) and turned
//! into engine observations (`convert`; the DRA objects both at once: `device`), user files
//! (`input`), the opt-in policies and label selectors (`policy`, `selector`), the client
//! (`client`), and wall-clock time and durations (`time`). They decide nothing.

pub mod client;
pub mod convert;
pub mod device;
pub mod input;
pub mod policy;
pub mod proto;
pub mod selector;
pub mod slim;
pub mod time;
