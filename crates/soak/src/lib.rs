//! The fault soak (`scripts/soak`): seeded churn and faults against the whole plane, and a
//! checker that judges every write in the API server's audit log.
//!
//! The checker (`audit` → `history` → `check`, with the rules of `docs/parity.md` in `rules`)
//! is a second, independent model: it shares no code with the engine it judges.

pub mod audit;
pub mod check;
pub mod drive;
pub mod faults;
pub mod history;
pub mod rules;
pub mod toxi;
