//! Reference-counted interning. Most pods share one toleration list (the two default
//! tolerations) and a handful of namespaces, so each distinct value is stored once and pods
//! hold a 4-byte id.

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::Arc;

use hashbrown::HashMap;

#[derive(Debug)]
pub(crate) struct Interner<T: ?Sized + Hash + Eq> {
    slots: Vec<Option<(Arc<T>, u32)>>,
    index: HashMap<Arc<T>, u32>,
    free: Vec<u32>,
}

impl<T: ?Sized + Hash + Eq> Default for Interner<T> {
    fn default() -> Self {
        Interner {
            slots: Vec::new(),
            index: HashMap::new(),
            free: Vec::new(),
        }
    }
}

impl<T: ?Sized + Hash + Eq> Interner<T> {
    /// The id of `value`, adding it (built by `make`) if new; takes one reference.
    pub(crate) fn acquire<Q>(&mut self, value: &Q, make: impl FnOnce(&Q) -> Arc<T>) -> u32
    where
        Arc<T>: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        if let Some(&id) = self.index.get(value) {
            if let Some((_, refs)) = &mut self.slots[id as usize] {
                *refs += 1;
            }
            return id;
        }
        let arc = make(value);
        let id = match self.free.pop() {
            Some(id) => {
                self.slots[id as usize] = Some((arc.clone(), 1));
                id
            }
            None => {
                self.slots.push(Some((arc.clone(), 1)));
                (self.slots.len() - 1) as u32
            }
        };
        self.index.insert(arc, id);
        id
    }

    /// Drops one reference; the value is forgotten when none is left.
    pub(crate) fn release(&mut self, id: u32) {
        let slot = &mut self.slots[id as usize];
        let Some((arc, refs)) = slot else { return };
        *refs -= 1;
        if *refs == 0 {
            self.index.remove(&**arc);
            *slot = None;
            self.free.push(id);
        }
    }

    pub(crate) fn get(&self, id: u32) -> &Arc<T> {
        match &self.slots[id as usize] {
            Some((arc, _)) => arc,
            // Ids only come from `acquire` and are released once, by their owner.
            None => unreachable!("interned id {id} used after release"),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_and_frees() {
        let mut i: Interner<str> = Interner::default();
        let a = i.acquire("a", |s| Arc::from(s));
        let a2 = i.acquire("a", |s| Arc::from(s));
        let b = i.acquire("b", |s| Arc::from(s));
        assert_eq!(a, a2);
        assert_ne!(a, b);
        assert_eq!(i.len(), 2);
        i.release(a);
        assert_eq!(&**i.get(a), "a");
        i.release(a);
        assert_eq!(i.len(), 1);
        let c = i.acquire("c", |s| Arc::from(s));
        assert_eq!(c, a, "freed slot is reused");
        assert_eq!(&**i.get(c), "c");
    }
}
