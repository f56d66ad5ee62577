//! xorshift64: the bench programs' inputs (sensor noise, orders, records),
//! the same sequence on every run from one seed.

#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    /// The next value (the generator never ends: no `Iterator`).
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Below `n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Uniform in [-1, 1).
    pub fn signed(&mut self) -> f32 {
        ((self.next() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}
