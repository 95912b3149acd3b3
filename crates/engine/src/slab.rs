//! Slot storage with stable `u32` ids, allocated in fixed-size chunks.
//!
//! A plain `Vec` doubles its capacity as it grows, so 150,000 pods would pay for room for
//! 262,144; whole chunks waste at most one chunk. Freed slots are reused.

const CHUNK: usize = 1024;

#[derive(Debug)]
pub(crate) struct Slab<T> {
    chunks: Vec<Box<[Option<T>]>>,
    /// Slots below this index have been handed out at least once.
    used: usize,
    free: Vec<u32>,
    len: usize,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            chunks: Vec::new(),
            used: 0,
            free: Vec::new(),
            len: 0,
        }
    }
}

impl<T> Slab<T> {
    pub(crate) fn insert(&mut self, value: T) -> u32 {
        self.len += 1;
        let id = match self.free.pop() {
            Some(id) => id as usize,
            None => {
                if self.used == self.chunks.len() * CHUNK {
                    self.chunks.push((0..CHUNK).map(|_| None).collect());
                }
                self.used += 1;
                self.used - 1
            }
        };
        self.chunks[id / CHUNK][id % CHUNK] = Some(value);
        id as u32
    }

    pub(crate) fn remove(&mut self, id: u32) -> Option<T> {
        let value = self.slot_mut(id)?.take();
        if value.is_some() {
            self.free.push(id);
            self.len -= 1;
        }
        value
    }

    pub(crate) fn get(&self, id: u32) -> Option<&T> {
        let id = id as usize;
        self.chunks.get(id / CHUNK)?[id % CHUNK].as_ref()
    }

    pub(crate) fn get_mut(&mut self, id: u32) -> Option<&mut T> {
        self.slot_mut(id)?.as_mut()
    }

    fn slot_mut(&mut self, id: u32) -> Option<&mut Option<T>> {
        let id = id as usize;
        Some(&mut self.chunks.get_mut(id / CHUNK)?[id % CHUNK])
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Occupied slots with their ids, in id order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u32, &T)> + '_ {
        self.chunks
            .iter()
            .flat_map(|c| c.iter())
            .take(self.used)
            .enumerate()
            .filter_map(|(id, slot)| slot.as_ref().map(|v| (id as u32, v)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_and_reused() {
        let mut s = Slab::default();
        let ids: Vec<u32> = (0..3000).map(|i| s.insert(i)).collect();
        assert_eq!(s.len(), 3000);
        assert_eq!(s.get(ids[2500]), Some(&2500));
        assert_eq!(s.remove(ids[10]), Some(10));
        assert_eq!(s.remove(ids[10]), None);
        assert_eq!(s.get(ids[10]), None);
        assert_eq!(s.insert(77), ids[10]);
        *s.get_mut(ids[11]).unwrap_or(&mut 0) = 5;
        assert_eq!(s.get(ids[11]), Some(&5));
        assert_eq!(s.iter().count(), 3000);
        assert_eq!(s.get(99_999), None);
    }
}
