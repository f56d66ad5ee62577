//! A pkq handle kept in place inside a struct the caller owns (a ticket, a
//! batch): no allocation per task. The struct's state word says whether it
//! holds one; its storage words hold it.

use crate::boundary::Fail;

/// The state word of a struct that holds its item ("pkqheld!").
const LIVE: u64 = 0x706b_7168_656c_6421;

/// A caller's struct with room for one `Item` in place.
///
/// # Safety
/// `parts` returns the struct's own state word and a pointer to storage
/// that is large and aligned enough for an `Item` (each implementation
/// asserts it at compile time) and lives as long as the struct.
pub(crate) unsafe trait Held {
    type Item;

    /// The state word and the storage.
    fn parts(&mut self) -> (&mut u64, *mut Self::Item);

    /// Whether it holds an item.
    fn is_live(&mut self) -> bool {
        *self.parts().0 == LIVE
    }

    /// Marks it empty without dropping what it held (a caller's struct of
    /// unknown contents, or one just taken).
    fn forget(&mut self) {
        *self.parts().0 = 0;
    }

    /// Puts `item` into it; it must be empty (a held item would be leaked,
    /// never used twice).
    fn fill(&mut self, item: Self::Item) {
        let (state, storage) = self.parts();
        // SAFETY: the storage is large and aligned enough (the trait's
        // contract) and holds no item the write could lose but by a leak.
        unsafe { storage.write(item) };
        *state = LIVE;
    }

    /// The item held, in place.
    fn live(&mut self) -> Result<&mut Self::Item, Fail> {
        let (state, storage) = self.parts();
        if *state != LIVE {
            return Err(Fail::NotLive);
        }
        // SAFETY: `LIVE`: `fill` wrote an item there and nothing took it.
        Ok(unsafe { &mut *storage })
    }

    /// Takes the item out; it is empty after.
    fn take(&mut self) -> Result<Self::Item, Fail> {
        let (state, storage) = self.parts();
        if *state != LIVE {
            return Err(Fail::NotLive);
        }
        *state = 0;
        // SAFETY: it was live (checked above) and is marked empty: read
        // once.
        Ok(unsafe { storage.read() })
    }

    /// Drops the item it holds, if any.
    fn release(&mut self) {
        if self.is_live() {
            drop(self.take());
        }
    }
}
