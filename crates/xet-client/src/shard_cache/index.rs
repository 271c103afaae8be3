//! The in-memory chunk index of a shard cache: built from the lookup tables of the cached
//! shards, searched by truncated chunk hash (raw, and keyed with each live HMAC key), extended by
//! inserts, with a few parsed shards kept in memory.

use std::collections::{HashMap, VecDeque};
use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::Arc;

use super::*;
use xet_format::hash::keyed_chunk_hash;
use xet_format::shard::{shard_file_name, LookupTables, Shard};
use xet_format::{ChunkHash, HmacKey, ShardHash};

/// One cached shard known to the index.
#[derive(Debug)]
pub(super) struct Slot {
    pub(super) hash: ShardHash,
    pub(super) key: HmacKey,
    pub(super) expiry: u64,
    /// Deleted or found unusable; never a candidate again.
    pub(super) dead: bool,
    /// Its mtime was set by a hit of this process already.
    pub(super) touched: bool,
}

/// The in-memory chunk index; see the module documentation.
#[derive(Debug, Default)]
pub(super) struct Index {
    pub(super) slots: Vec<Slot>,
    pub(super) by_hash: HashMap<ShardHash, u32>,
    /// Truncated stored chunk hashes, sorted, and the slot of each (parallel vectors).
    pub(super) keys: Vec<u64>,
    pub(super) key_slots: Vec<u32>,
    /// Shards inserted after the index was built: truncated stored hash → slots.
    pub(super) recent: HashMap<u64, Vec<u32>>,
    /// Distinct non-zero HMAC keys, each with the latest expiry of a shard using it.
    pub(super) hmac_keys: Vec<(HmacKey, u64)>,
}

impl Index {
    pub(super) fn add_slot(&mut self, hash: ShardHash, key: HmacKey, expiry: u64) -> u32 {
        let id = self.slots.len() as u32;
        self.slots.push(Slot {
            hash,
            key,
            expiry,
            dead: false,
            touched: false,
        });
        self.by_hash.insert(hash, id);
        if !key.is_zero() {
            match self.hmac_keys.iter_mut().find(|(k, _)| *k == key) {
                Some((_, e)) => *e = (*e).max(expiry),
                None => self.hmac_keys.push((key, expiry)),
            }
        }
        id
    }

    /// Slots whose shard may hold a chunk with this truncated stored hash.
    pub(super) fn candidates(&self, truncated: u64) -> impl Iterator<Item = u32> + '_ {
        let start = self.keys.partition_point(|&k| k < truncated);
        let end = start + self.keys[start..].partition_point(|&k| k == truncated);
        self.key_slots[start..end]
            .iter()
            .copied()
            .chain(self.recent.get(&truncated).into_iter().flatten().copied())
    }
}

#[derive(Debug, Default)]
pub(super) struct State {
    pub(super) index: Option<Index>,
    /// Recently parsed shards, most recent last.
    pub(super) loaded: VecDeque<(ShardHash, Arc<Shard>)>,
    /// The directory's size as last measured plus what this process inserted since.
    pub(super) approx_bytes: Option<u64>,
}

impl State {
    pub(super) fn remember(&mut self, hash: ShardHash, shard: Arc<Shard>) {
        self.loaded.retain(|(h, _)| *h != hash);
        let mut chunks = shard.num_chunks();
        self.loaded.push_back((hash, shard));
        chunks += self
            .loaded
            .iter()
            .rev()
            .skip(1)
            .map(|(_, s)| s.num_chunks())
            .sum::<usize>();
        while self.loaded.len() > 1
            && (self.loaded.len() > LOADED_CAPACITY || chunks > LOADED_MAX_CHUNKS)
        {
            if let Some((_, s)) = self.loaded.pop_front() {
                chunks -= s.num_chunks();
            }
        }
    }

    pub(super) fn forget(&mut self, hash: &ShardHash) {
        self.loaded.retain(|(h, _)| h != hash);
        if let Some(index) = &mut self.index {
            if let Some(&id) = index.by_hash.get(hash) {
                index.slots[id as usize].dead = true;
            }
        }
    }
}

/// What the index needs of one cached shard.
pub(super) struct IndexedFile {
    pub(super) key: HmacKey,
    pub(super) expiry: u64,
    /// The truncated stored hash of every chunk.
    pub(super) keys: Vec<u64>,
}

/// Reads what the index needs of one cached shard. `None` for a shard with nothing to find (no
/// xorb blocks); keyed shards past their deletion time are deleted and give `None` too.
pub(super) fn index_file(
    path: &Path,
    hash: &ShardHash,
    now: u64,
) -> Result<Option<IndexedFile>, CacheError> {
    let mut f = File::open(path).map_err(CacheError::io("cannot open", path))?;
    let layout = read_layout_from(&mut f, path)?;
    if expired_long_ago(&layout, now) {
        tracing::debug!(path = %path.display(), "deleting an expired cached shard");
        let _ = fs::remove_file(path);
        return Ok(None);
    }
    if !layout.has_xorbs() {
        return Ok(None);
    }
    let keys = if layout.chunk_lookup_num_entry > 0 {
        let range = layout.chunk_lookup_range();
        let mut table = vec![0u8; (range.end - range.start) as usize];
        f.seek(SeekFrom::Start(range.start))
            .and_then(|_| f.read_exact(&mut table))
            .map_err(CacheError::io("cannot read", path))?;
        layout
            .chunk_lookup_keys(&table)
            .map_err(|source| CacheError::Corrupt {
                path: path.to_path_buf(),
                source,
            })?
    } else {
        // Not written by us (we always write the tables): read it whole.
        let shard = read_shard(path, hash)?;
        shard
            .xorbs
            .iter()
            .flat_map(|x| x.chunks.iter().map(|c| c.hash.truncated()))
            .collect()
    };
    Ok(Some(IndexedFile {
        key: layout.meta.hmac_key,
        expiry: layout.meta.key_expiry,
        keys,
    }))
}

impl ShardCache {
    /// Stores `shard` (any form of model: our upload shard or a dedup answer, keyed or not)
    /// under its hash, atomically, and adds it to this cache's index. Storing a shard that is
    /// already there only marks it used. May prune the directory afterwards (see the module
    /// documentation). Returns the shard's hash.
    pub fn insert_shard(&self, shard: &Shard) -> Result<ShardHash, CacheError> {
        let mut sorted = shard.clone();
        sorted.sort();
        let (bytes, hash) = sorted
            .to_complete_bytes_and_hash(LookupTables::ALL)
            .map_err(|source| CacheError::Serialize {
                dir: self.dir.clone(),
                source,
            })?;
        let path = self.dir.join(shard_file_name(&hash));
        let written = if path.exists() {
            touch(&path);
            false
        } else {
            write_atomically(&self.dir, &path, &bytes)?;
            true
        };

        let over = {
            let mut state = self.state();
            if let Some(index) = &mut state.index {
                match index.by_hash.get(&hash) {
                    Some(&id) => {
                        let slot = &mut index.slots[id as usize];
                        slot.dead = false;
                        slot.touched = true;
                    }
                    None => {
                        let id = index.add_slot(hash, sorted.meta.hmac_key, sorted.meta.key_expiry);
                        index.slots[id as usize].touched = true;
                        for x in &sorted.xorbs {
                            for c in &x.chunks {
                                let ids = index.recent.entry(c.hash.truncated()).or_default();
                                if ids.last() != Some(&id) {
                                    ids.push(id);
                                }
                            }
                        }
                    }
                }
            }
            state.remember(hash, Arc::new(sorted));
            if written {
                if let Some(b) = &mut state.approx_bytes {
                    *b += bytes.len() as u64;
                }
            }
            state.approx_bytes.is_none_or(|b| b > self.max_bytes)
        };
        if over {
            // Measure (another process may have pruned already) and prune if really over.
            let stats = self.stats()?;
            if stats.bytes > self.max_bytes {
                self.prune_keeping(self.max_bytes / 10 * 9, Some(&hash))?;
            } else {
                self.state().approx_bytes = Some(stats.bytes);
            }
        }
        Ok(hash)
    }

    /// Adds to this cache's index the shards other processes wrote since it was built (agents of
    /// the same push finishing their uploads). Cheap when nothing changed: one directory listing.
    /// Returns how many shards were added. Before the index is built there is nothing to do
    /// (the first lookup builds it from the directory).
    pub fn refresh(&self) -> Result<usize, CacheError> {
        let now = xet_protocol::util::now_unix();
        let entries = self.scan()?;
        let mut state = self.state();
        let Some(index) = &mut state.index else {
            return Ok(0);
        };
        let mut added = 0;
        for entry in entries {
            if index.by_hash.contains_key(&entry.hash) {
                continue;
            }
            let found = match index_file(&entry.path, &entry.hash, now) {
                Ok(Some(found)) => found,
                Ok(None) => continue,
                Err(e) if e.is_not_found() => continue,
                Err(e) => {
                    discard(&entry.path, &e);
                    continue;
                }
            };
            let id = index.add_slot(entry.hash, found.key, found.expiry);
            for k in found.keys {
                let ids = index.recent.entry(k).or_default();
                if ids.last() != Some(&id) {
                    ids.push(id);
                }
            }
            added += 1;
        }
        Ok(added)
    }

    /// A cached shard whose xorb section holds `chunk` (a raw chunk hash; keyed shards are
    /// searched with the keyed form under their key, and skipped once expired). Builds the
    /// index on the first call; see the module documentation for what it costs and misses.
    /// Damaged files met on the way are removed with a warning.
    pub fn lookup(&self, chunk: &ChunkHash) -> Result<Option<Arc<Shard>>, CacheError> {
        let now = xet_protocol::util::now_unix();
        let mut state = self.state();
        if state.index.is_none() {
            let (index, bytes) = self.build_index(now)?;
            state.index = Some(index);
            state.approx_bytes.get_or_insert(bytes);
        }
        let Some(index) = &state.index else {
            return Ok(None);
        };
        let mut candidates: Vec<u32> = index
            .candidates(chunk.truncated())
            .filter(|&id| index.slots[id as usize].key.is_zero())
            .collect();
        for (key, expiry) in &index.hmac_keys {
            if now > *expiry {
                continue;
            }
            let keyed = keyed_chunk_hash(key, chunk).truncated();
            candidates.extend(index.candidates(keyed).filter(|&id| {
                let slot = &index.slots[id as usize];
                slot.key == *key && now <= slot.expiry
            }));
        }
        candidates.dedup();
        for id in candidates {
            let Some(index) = &state.index else { break };
            let slot = &index.slots[id as usize];
            if slot.dead {
                continue;
            }
            let (hash, touched) = (slot.hash, slot.touched);
            let Some(shard) = self.load(&mut state, &hash) else {
                state.forget(&hash);
                continue;
            };
            if shard.find_chunk(chunk).is_none() {
                // A collision of truncated hashes.
                continue;
            }
            if !touched {
                touch(&self.dir.join(shard_file_name(&hash)));
                if let Some(index) = &mut state.index {
                    index.slots[id as usize].touched = true;
                }
            }
            return Ok(Some(shard));
        }
        Ok(None)
    }

    /// The parsed shard `hash`, from memory or disk; `None` (after a warning and removing the
    /// file, if it is damaged) when it cannot be used.
    pub(super) fn load(&self, state: &mut State, hash: &ShardHash) -> Option<Arc<Shard>> {
        if let Some((_, s)) = state.loaded.iter().find(|(h, _)| h == hash) {
            return Some(s.clone());
        }
        let path = self.dir.join(shard_file_name(hash));
        match read_shard(&path, hash) {
            Ok(shard) => {
                let shard = Arc::new(shard);
                state.remember(*hash, shard.clone());
                Some(shard)
            }
            Err(e) => {
                discard(&path, &e);
                None
            }
        }
    }

    /// Reads the header, footer and chunk lookup table of every cached shard. Also returns the
    /// size of the directory as scanned.
    pub(super) fn build_index(&self, now: u64) -> Result<(Index, u64), CacheError> {
        let mut index = Index::default();
        let mut pairs: Vec<(u64, u32)> = Vec::new();
        let entries = self.scan()?;
        let bytes = entries.iter().map(|e| e.len).sum();
        for entry in entries {
            let found = match index_file(&entry.path, &entry.hash, now) {
                Ok(Some(found)) => found,
                Ok(None) => continue,
                Err(e) => {
                    discard(&entry.path, &e);
                    continue;
                }
            };
            let id = index.add_slot(entry.hash, found.key, found.expiry);
            pairs.extend(found.keys.into_iter().map(|k| (k, id)));
        }
        pairs.sort_unstable();
        pairs.dedup();
        (index.keys, index.key_slots) = pairs.into_iter().unzip();
        Ok((index, bytes))
    }
}
