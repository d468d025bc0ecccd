//! Where each sequence's keys and values live: a whole row of a contiguous cache, or blocks of
//! the paged pool. A sequence holds the blocks its written positions need plus the ones the
//! next step will write; the driver grows them before each step and, when the pool runs out,
//! preempts a younger sequence to make room (it recomputes later).
//!
//! The prefix cache: once a sequence has written a block entirely with prompt tokens, the block
//! is published under a hash of the whole prompt up to that block's end, while the sequence still
//! runs, and kept after it is released. A later prompt with the same prefix reuses those blocks
//! instead of recomputing them. The hash only finds a candidate: a block is reused only when its
//! own tokens equal the prompt's and the block before it is the one already reused, so by
//! induction the whole prefix is equal token for token, and a hash collision (FNV-1a's can be
//! crafted) is a miss, never another prompt's keys and values. Kept blocks with no reader are
//! evicted least recently used first when the free list runs out.

use std::collections::{BTreeSet, HashMap};

use super::{DriverError, Layout};

/// The KV store of a serving driver.
#[derive(Debug, Default)]
pub(crate) struct KvPool {
    /// Positions per block; 0 for the contiguous layout.
    block_tokens: usize,
    /// Table entries per row: capacity / block_tokens.
    table_len: usize,
    /// The pool's last block: every padding token writes there and every unused table entry
    /// names it; never reserved.
    scratch: u32,
    free: Vec<u32>,
    /// Published prompt blocks by prefix hash.
    cached: HashMap<u64, CachedBlock>,
    /// The prefix hash each published block is kept under.
    published: HashMap<u32, u64>,
    /// Readers of each block a sequence holds (cached blocks can have several).
    readers: HashMap<u32, usize>,
    /// The cached blocks nobody reads, as (last use, prefix hash), oldest first: what eviction
    /// takes. Kept beside `cached` so counting and evicting do not walk the whole cache (a
    /// full pool of a 64-row server holds thousands of cached blocks).
    idle: BTreeSet<(u64, u64)>,
    /// Bumped at each use, for least-recently-used eviction.
    clock: u64,
    stats: PrefixCacheStats,
}

#[derive(Clone, Debug)]
struct CachedBlock {
    block: u32,
    last_used: u64,
    /// The block's own tokens, compared before reuse.
    tokens: Vec<u32>,
    /// The block holding the prompt's previous block (`None` for a prompt's first block).
    prev: Option<u32>,
}

/// What the prefix cache has done, for the metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrefixCacheStats {
    /// Prompt blocks looked up at admission.
    pub queried_blocks: u64,
    /// Of those, blocks reused.
    pub hit_blocks: u64,
    /// Lookups whose hash matched a block of other tokens (a collision), refused.
    pub refused_collisions: u64,
}

/// A sequence's reservation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Reservation {
    pub blocks: Vec<u32>,
    /// Leading prompt tokens whose keys and values are already in reused blocks.
    pub reused_tokens: usize,
}

impl KvPool {
    /// Refuses a paged layout that cannot serve `capacity` positions.
    pub fn check(block_tokens: usize, blocks: usize, capacity: usize) -> Result<(), DriverError> {
        let per_seq = capacity.div_ceil(block_tokens.max(1));
        if block_tokens == 0 || !capacity.is_multiple_of(block_tokens) || blocks < per_seq + 1 {
            return Err(DriverError::PagedLayout {
                block_tokens,
                blocks,
                capacity,
            });
        }
        Ok(())
    }

    pub fn new(layout: Layout, capacity: usize) -> KvPool {
        match layout {
            Layout::Contiguous => KvPool::default(),
            Layout::Paged {
                block_tokens,
                blocks,
            } => {
                let scratch = blocks.saturating_sub(1) as u32;
                KvPool {
                    block_tokens,
                    table_len: capacity / block_tokens.max(1),
                    scratch,
                    // Popped from the back: hand out low blocks first.
                    free: (0..scratch).rev().collect(),
                    ..KvPool::default()
                }
            }
        }
    }

    /// Positions per block (0 for the contiguous layout).
    pub fn block_tokens(&self) -> usize {
        self.block_tokens
    }

    pub fn paged(&self) -> bool {
        self.block_tokens > 0
    }

    /// Blocks that a new reservation could take now (free plus evictable).
    pub fn available(&self) -> usize {
        self.free.len() + self.idle.len()
    }

    /// Blocks a sequence of `total` positions needs.
    pub fn blocks_for(&self, total: usize) -> usize {
        if self.paged() {
            total.div_ceil(self.block_tokens)
        } else {
            0
        }
    }

    /// Reserves blocks for `total` positions of a sequence starting with `prompt`, reusing cached
    /// prefix blocks when `share` allows. `None` when there is no room.
    pub fn reserve(&mut self, prompt: &[u32], total: usize, share: bool) -> Option<Reservation> {
        if !self.paged() {
            return Some(Reservation::default());
        }
        let need = self.blocks_for(total);
        let bt = self.block_tokens;
        // The last prompt token is always computed (its logits pick the first new token), so
        // only blocks strictly before it are reused.
        let mut reused: Vec<u32> = Vec::new();
        if share {
            for (i, (hash, tokens)) in prefix_hashes(prompt, bt)
                .zip(prompt.chunks_exact(bt))
                .enumerate()
            {
                if (i + 1) * bt >= prompt.len() {
                    break;
                }
                self.stats.queried_blocks += 1;
                let Some(c) = self.cached.get(&hash) else {
                    break;
                };
                if c.tokens != tokens || c.prev != reused.last().copied() {
                    self.stats.refused_collisions += 1;
                    break;
                }
                self.stats.hit_blocks += 1;
                reused.push(c.block);
            }
        }
        let fresh = need - reused.len();
        let idle_reused = reused
            .iter()
            .filter(|b| !self.readers.contains_key(b))
            .count();
        if fresh > self.free.len() + self.idle.len() - idle_reused {
            return None;
        }
        self.clock += 1;
        for &b in &reused {
            if let Some(&hash) = self.published.get(&b)
                && let Some(c) = self.cached.get_mut(&hash)
            {
                // Read from now on: no longer evictable.
                self.idle.remove(&(c.last_used, hash));
                c.last_used = self.clock;
            }
            *self.readers.entry(b).or_default() += 1;
        }
        let mut blocks = reused.clone();
        while blocks.len() < need {
            let b = match self.free.pop() {
                Some(b) => b,
                None => self.evict()?,
            };
            *self.readers.entry(b).or_default() += 1;
            blocks.push(b);
        }
        Some(Reservation {
            reused_tokens: reused.len() * bt,
            blocks,
        })
    }

    /// Blocks sequences can ever hold (every block but the scratch block).
    pub fn usable(&self) -> usize {
        self.scratch as usize
    }

    /// Extends a sequence's blocks to cover `positions`, from the free list or by evicting
    /// unread cached blocks. False when the pool ran out first (the blocks taken are kept).
    pub fn grow(&mut self, blocks: &mut Vec<u32>, positions: usize) -> bool {
        let need = self.blocks_for(positions);
        while blocks.len() < need {
            let b = match self.free.pop() {
                Some(b) => b,
                None => match self.evict() {
                    Some(b) => b,
                    None => return false,
                },
            };
            *self.readers.entry(b).or_default() += 1;
            blocks.push(b);
        }
        true
    }

    /// Takes the least recently used cached block nobody reads.
    fn evict(&mut self) -> Option<u32> {
        loop {
            let (_, hash) = self.idle.pop_first()?;
            if let Some(c) = self.cached.remove(&hash) {
                self.published.remove(&c.block);
                return Some(c.block);
            }
        }
    }

    /// Publishes the blocks of a running sequence that its prompt's tokens have filled (`fed`
    /// positions written), so prompts arriving meanwhile with the same prefix share them. A
    /// block whose hash is already taken stays private.
    pub fn publish(&mut self, blocks: &[u32], prompt: &[u32], fed: usize) {
        let bt = self.block_tokens;
        if bt == 0 {
            return;
        }
        let full = prompt.len().min(fed) / bt;
        let mut prev = None;
        for (i, (hash, tokens)) in prefix_hashes(prompt, bt)
            .zip(prompt.chunks_exact(bt))
            .take(full)
            .enumerate()
        {
            let Some(&b) = blocks.get(i) else { break };
            match self.published.get(&b) {
                // Already published (by this sequence earlier, or reused from the cache).
                Some(_) => {}
                None if self.cached.contains_key(&hash) => {
                    // The prefix is published in another block: this one stays private, and
                    // so does everything after it (their `prev` would not match).
                    return;
                }
                None => {
                    self.cached.insert(
                        hash,
                        CachedBlock {
                            block: b,
                            last_used: self.clock,
                            tokens: tokens.to_vec(),
                            prev,
                        },
                    );
                    self.published.insert(b, hash);
                    if !self.readers.contains_key(&b) {
                        self.idle.insert((self.clock, hash));
                    }
                }
            }
            prev = Some(b);
        }
    }

    /// What the prefix cache has done so far.
    pub fn stats(&self) -> PrefixCacheStats {
        self.stats
    }

    /// Returns a sequence's blocks. Blocks `prompt` filled completely (and whose tokens were fed,
    /// `fed` positions) are kept for the prefix cache when `share` allows; the others are freed
    /// once nobody reads them.
    pub fn release(&mut self, blocks: &[u32], prompt: &[u32], fed: usize, share: bool) {
        if share {
            self.publish(blocks, prompt, fed);
        }
        self.clock += 1;
        for &b in blocks {
            let Some(n) = self.readers.get_mut(&b) else {
                continue;
            };
            *n -= 1;
            if *n > 0 {
                continue;
            }
            self.readers.remove(&b);
            match self.published.get(&b) {
                Some(&hash) => {
                    if let Some(c) = self.cached.get_mut(&hash) {
                        c.last_used = self.clock;
                        self.idle.insert((self.clock, hash));
                    }
                }
                None => self.free.push(b),
            }
        }
    }

    /// Row `blocks`' table, padded with the scratch block.
    pub fn table(&self, blocks: &[u32]) -> Vec<i32> {
        (0..self.table_len)
            .map(|i| blocks.get(i).copied().unwrap_or(self.scratch) as i32)
            .collect()
    }

    /// The flat pool slot of position `pos` of a sequence holding `blocks`.
    pub fn slot(&self, blocks: &[u32], pos: usize) -> i32 {
        let bt = self.block_tokens.max(1);
        let block = blocks.get(pos / bt).copied().unwrap_or(self.scratch);
        (block as usize * bt + pos % bt) as i32
    }

    /// Where padding tokens write.
    pub fn scratch_slot(&self) -> i32 {
        (self.scratch as usize * self.block_tokens) as i32
    }

    /// A padding row's table: every entry the scratch block.
    pub fn scratch_table(&self) -> Vec<i32> {
        vec![self.scratch as i32; self.table_len]
    }
}

/// FNV-1a hashes of `prompt` up to the end of each full block, each chained on the one before.
fn prefix_hashes(prompt: &[u32], bt: usize) -> impl Iterator<Item = u64> + '_ {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    prompt.chunks_exact(bt).map(move |block| {
        for &t in block {
            for byte in t.to_le_bytes() {
                h ^= u64::from(byte);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        }
        h
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(blocks: usize) -> KvPool {
        KvPool::new(
            Layout::Paged {
                block_tokens: 4,
                blocks,
            },
            16,
        )
    }

    #[test]
    fn reservations_take_distinct_blocks_and_release_returns_them() {
        let mut p = pool(9); // 8 usable + scratch
        let a = p.reserve(&[1, 2, 3], 10, false).unwrap();
        let b = p.reserve(&[4, 5, 6], 16, false).unwrap();
        assert_eq!(a.blocks.len(), 3);
        assert_eq!(b.blocks.len(), 4);
        assert!(a.blocks.iter().all(|x| !b.blocks.contains(x) && *x != 8));
        assert_eq!(p.available(), 1);
        assert!(p.reserve(&[7], 8, false).is_none(), "two blocks, one free");
        p.release(&a.blocks, &[1, 2, 3], 3, false);
        assert_eq!(p.available(), 4);
        assert_eq!(p.table(&a.blocks)[3], 8, "padded with the scratch block");
        assert_eq!(p.slot(&b.blocks, 5), (b.blocks[1] * 4 + 1) as i32);
    }

    #[test]
    fn a_released_prompt_prefix_is_reused_and_evicted_only_when_unread() {
        let mut p = pool(9);
        let prompt: Vec<u32> = (0..11).collect();
        let a = p.reserve(&prompt, 12, true).unwrap();
        assert_eq!(a.reused_tokens, 0);
        p.release(&a.blocks, &prompt, 11, true);
        // Blocks 0 and 1 of the prompt (tokens 0..8) are kept; the third was partial.
        let b = p.reserve(&prompt, 12, true).unwrap();
        assert_eq!(b.reused_tokens, 8);
        assert_eq!(&b.blocks[..2], &a.blocks[..2]);
        // A prompt that differs in its second block reuses only the first.
        let mut other = prompt.clone();
        other[5] = 99;
        let c = p.reserve(&other, 12, true).unwrap();
        assert_eq!(c.reused_tokens, 4);
        assert_eq!(c.blocks[0], a.blocks[0]);
        assert_ne!(c.blocks[1], a.blocks[1]);
        // Read blocks are never evicted: 8 usable, b holds 3, c holds 2 more (one shared).
        assert_eq!(p.available(), 8 - 3 - 2);
        p.release(&b.blocks, &prompt, 11, true);
        p.release(&c.blocks, &other, 11, true);
        // Everything is free or evictable again, and a large reservation evicts what it must.
        assert_eq!(p.available(), 8);
        let d = p.reserve(&[42; 3], 32, true).unwrap();
        assert_eq!(d.blocks.len(), 8);
        assert_eq!(d.reused_tokens, 0);
        p.assert_consistent();
    }

    #[test]
    fn a_prompt_that_is_all_cached_still_computes_its_last_token() {
        let mut p = pool(9);
        let prompt: Vec<u32> = (0..8).collect();
        let a = p.reserve(&prompt, 12, true).unwrap();
        p.release(&a.blocks, &prompt, 8, true);
        let b = p.reserve(&prompt, 12, true).unwrap();
        assert_eq!(
            b.reused_tokens, 4,
            "the block holding the last token is recomputed"
        );
    }

    #[test]
    fn a_colliding_hash_is_refused_and_the_prompt_computed_afresh() {
        let mut p = pool(9);
        let victim: Vec<u32> = (0..9).collect();
        let a = p.reserve(&victim, 12, true).unwrap();
        p.release(&a.blocks, &victim, 9, true);
        // An attacker's prompt whose first block hashes like the victim's: file the victim's
        // cached block under the attacker's prefix hash, as a crafted collision would find it.
        let attacker: Vec<u32> = vec![7, 7, 7, 7, 1, 2, 3, 4, 5];
        let attacker_hash = prefix_hashes(&attacker, 4).next().unwrap();
        let victim_hash = prefix_hashes(&victim, 4).next().unwrap();
        let entry = p.cached.remove(&victim_hash).unwrap();
        p.cached.insert(attacker_hash, entry);
        let b = p.reserve(&attacker, 12, true).unwrap();
        assert_eq!(
            b.reused_tokens, 0,
            "a hash match over other tokens is a miss"
        );
        assert!(!b.blocks.contains(&a.blocks[0]));
        assert_eq!(p.stats().refused_collisions, 1);
    }

    #[test]
    fn a_later_block_is_reused_only_after_its_own_predecessor() {
        let mut p = pool(9);
        let first: Vec<u32> = (0..9).collect();
        let a = p.reserve(&first, 12, true).unwrap();
        p.release(&a.blocks, &first, 9, true);
        // Same second block, other first block: its second block's prefix hash differs anyway,
        // but even a forged entry under the right hash names the wrong predecessor.
        let second: Vec<u32> = vec![9, 9, 9, 9, 4, 5, 6, 7, 8];
        let mut hashes = prefix_hashes(&second, 4);
        let (h0, h1) = (hashes.next().unwrap(), hashes.next().unwrap());
        let forged = p
            .cached
            .get(&prefix_hashes(&first, 4).nth(1).unwrap())
            .cloned()
            .unwrap();
        p.cached.insert(h1, forged);
        let b = p.reserve(&second, 12, true).unwrap();
        assert_eq!(b.reused_tokens, 0);
        assert!(!p.cached.contains_key(&h0) || p.cached[&h0].tokens == second[..4]);
    }

    #[test]
    fn a_running_sequence_shares_its_filled_prompt_blocks() {
        let mut p = pool(9);
        let prompt: Vec<u32> = (0..11).collect();
        let a = p.reserve(&prompt, 12, true).unwrap();
        // Two blocks written so far: they are published while `a` still runs.
        p.publish(&a.blocks, &prompt, 8);
        let b = p.reserve(&prompt, 12, true).unwrap();
        assert_eq!(b.reused_tokens, 8);
        assert_eq!(&b.blocks[..2], &a.blocks[..2]);
        assert_eq!(p.stats().hit_blocks, 2);
        // Both release; the shared blocks stay cached, the rest are free again.
        p.release(&a.blocks, &prompt, 11, true);
        p.release(&b.blocks, &prompt, 11, true);
        assert_eq!(p.available(), 8);
        let c = p.reserve(&prompt, 12, true).unwrap();
        assert_eq!(c.reused_tokens, 8);
        p.assert_consistent();
    }

    impl KvPool {
        /// The idle set is exactly the cached blocks nobody reads, and every block is free,
        /// read or cached (or the scratch block).
        fn assert_consistent(&self) {
            let idle: BTreeSet<(u64, u64)> = self
                .cached
                .iter()
                .filter(|(_, c)| !self.readers.contains_key(&c.block))
                .map(|(&h, c)| (c.last_used, h))
                .collect();
            assert_eq!(self.idle, idle);
            let mut seen: Vec<u32> = self.free.clone();
            seen.extend(self.readers.keys());
            seen.extend(
                self.cached
                    .values()
                    .map(|c| c.block)
                    .filter(|b| !self.readers.contains_key(b)),
            );
            seen.sort_unstable();
            assert_eq!(seen, (0..self.scratch).collect::<Vec<_>>());
        }
    }

    #[test]
    fn eviction_takes_the_least_recently_released_block_and_the_books_balance() {
        let mut p = pool(17); // 16 usable
        // Sequences over a few shared prefixes, released in a scrambled order, then a large
        // reservation that must evict.
        let prompts: Vec<Vec<u32>> = (0..6u32)
            .map(|i| {
                let mut v: Vec<u32> = (0..4).map(|t| 100 + (i % 3) * 10 + t).collect();
                v.extend((0..5).map(|t| 1000 + i * 10 + t));
                v
            })
            .collect();
        let mut held = Vec::new();
        for (i, prompt) in prompts.iter().enumerate() {
            let r = p.reserve(prompt, 12, true).unwrap();
            p.publish(&r.blocks, prompt, prompt.len());
            p.assert_consistent();
            held.push((i, r));
            if held.len() == 3 {
                for (j, r) in held.drain(..).rev() {
                    p.release(&r.blocks, &prompts[j], prompts[j].len(), true);
                    p.assert_consistent();
                }
            }
        }
        assert_eq!(p.available(), 16);
        // The first-released cached block is the first evicted.
        let oldest = *p.idle.first().unwrap();
        let block = p.cached[&oldest.1].block;
        let mut blocks = Vec::new();
        let free = p.free.len();
        assert!(p.grow(&mut blocks, 4 * (free + 1)));
        assert_eq!(*blocks.last().unwrap(), block);
        p.assert_consistent();
        assert_eq!(p.available(), 16 - free - 1);
    }

    #[test]
    fn layouts_that_cannot_serve_the_capacity_are_refused() {
        assert!(KvPool::check(16, 9, 128).is_ok());
        assert!(KvPool::check(16, 8, 128).is_err(), "no scratch block left");
        assert!(KvPool::check(0, 8, 128).is_err());
        assert!(
            KvPool::check(24, 64, 128).is_err(),
            "capacity not a multiple"
        );
    }
}
