//! The run-wide check of an aggregate that no key appears under two partition dates (docs/design.md §2):
//! each partition's sorted key hashes are merged, and a hash in two lists makes both partitions
//! candidates, whose partitions are read again to name the real keys (and rule out hash
//! collisions). Both partitions fail, before either is written.
//!
//! The hash space is cut into 256 ranges by the top byte, and each range's slices of the
//! lists are merged pairwise as a tree, the ranges split between two threads: the merged
//! copies stay as small as one range (a 256th of the keys), not the size of the run.

use std::collections::BTreeMap;

use crate::error::{ConflictKey, Location, PartitionError};
use crate::kind::{Context, Outcome};
use crate::prepare;

/// A key's bytes, its text, and where it was found.
type NamedKey = (Vec<u8>, String, Location);

/// A partition's sorted key hashes: in memory, or in a file of the run's spill folder once
/// the run's lists together would pass an eighth of its memory budget (a long backfill).
#[derive(Debug)]
pub enum Hashes {
    Memory(Vec<u64>),
    File(std::path::PathBuf),
}

/// Keeps `hashes` of partition `name` for the check: in memory while the budget allows
/// ([`crate::spill::Area::may_hold`]), else in a file.
pub fn keep(cx: &Context<'_>, name: &str, hashes: Vec<u64>) -> Result<Hashes, crate::error::PartitionError> {
    if cx.spill.may_hold(hashes.len() as u64 * 8) {
        return Ok(Hashes::Memory(hashes));
    }
    let path = cx.spill.folder("keys")?.join(format!("{name}.u64"));
    let fail = |e: std::io::Error| crate::error::PartitionError::Spill {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    let mut w = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&path).map_err(fail)?);
    for h in &hashes {
        std::io::Write::write_all(&mut w, &h.to_le_bytes()).map_err(fail)?;
    }
    std::io::Write::flush(&mut w).map_err(fail)?;
    Ok(Hashes::File(path))
}

/// Fails every pair of computed partitions that share a key (`done`: each outcome with the
/// sorted hashes of its keys).
pub async fn check(cx: &Context<'_>, done: &mut [(Outcome, Hashes)]) {
    let ok: Vec<usize> = (0..done.len()).filter(|&i| done[i].0.result.is_ok()).collect();
    if ok.len() < 2 {
        return;
    }
    let in_memory: Option<Vec<&[u64]>> = ok
        .iter()
        .map(|&i| match &done[i].1 {
            Hashes::Memory(v) => Some(v.as_slice()),
            Hashes::File(_) => None,
        })
        .collect();
    let mut candidates: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    match in_memory {
        Some(lists) => {
            let mut shared = shared_hashes(&lists);
            if shared.is_empty() {
                return;
            }
            shared.sort_unstable();
            shared.dedup();
            for (j, l) in lists.iter().enumerate() {
                let hits: Vec<u64> = shared.iter().copied().filter(|h| l.binary_search(h).is_ok()).collect();
                if !hits.is_empty() {
                    candidates.insert(ok[j], hits);
                }
            }
        }
        None => {
            let sources: Vec<Box<dyn Iterator<Item = u64> + '_>> = ok
                .iter()
                .map(|&i| match &done[i].1 {
                    Hashes::Memory(v) => Box::new(v.iter().copied()) as Box<dyn Iterator<Item = u64>>,
                    Hashes::File(p) => Box::new(file_hashes(p)),
                })
                .collect();
            for (j, hits) in shared_streamed(sources) {
                candidates.insert(ok[j], hits);
            }
            if candidates.is_empty() {
                return;
            }
        }
    }
    // Name the real keys (equal bytes), per partition.
    let mut found: Vec<(usize, Vec<NamedKey>)> = Vec::new();
    for (idx, hashes) in candidates {
        if let Ok(table) = cx.table(&done[idx].0.plan).await {
            let id = cx.identity(&table);
            let keys = prepare::keys_with_hashes(&table, &id, &hashes);
            found.push((idx, keys.into_iter().map(|(b, s, row)| (b, s, table.locate(row, None))).collect()));
        }
    }
    let mut by_key: BTreeMap<Vec<u8>, Vec<(usize, String, Location)>> = BTreeMap::new();
    for (idx, keys) in &found {
        for (b, s, loc) in keys {
            by_key.entry(b.clone()).or_default().push((*idx, s.clone(), loc.clone()));
        }
    }
    let mut per_partition: BTreeMap<usize, Vec<ConflictKey>> = BTreeMap::new();
    for places in by_key.values().filter(|v| v.len() > 1) {
        let at: Vec<_> = places.iter().map(|(_, _, l)| l.clone()).collect();
        for (idx, key, _) in places {
            per_partition.entry(*idx).or_default().push(ConflictKey {
                key: key.clone(),
                version: None,
                at: at.clone(),
            });
        }
    }
    for (idx, mut keys) in per_partition {
        keys.sort_by(|a, b| a.key.cmp(&b.key));
        let total = keys.len();
        keys.truncate(5);
        done[idx].0.result = Err(PartitionError::KeyUnderTwoDates { keys, total });
    }
}

/// The hashes of a file [`keep`] wrote, in order (a file that cannot be read gives none: the
/// check then finds fewer candidates, never a false one).
fn file_hashes(path: &std::path::Path) -> impl Iterator<Item = u64> {
    let mut r = std::fs::File::open(path).ok().map(|f| std::io::BufReader::with_capacity(1 << 16, f));
    std::iter::from_fn(move || {
        let mut b = [0u8; 8];
        std::io::Read::read_exact(r.as_mut()?, &mut b).ok()?;
        Some(u64::from_le_bytes(b))
    })
}

/// Merges sorted, duplicate-free hash sequences; for each sequence, the hashes it shares with
/// another (streamed: memory independent of their length).
pub fn shared_streamed(mut sources: Vec<Box<dyn Iterator<Item = u64> + '_>>) -> BTreeMap<usize, Vec<u64>> {
    use std::cmp::Reverse;
    let mut heap: std::collections::BinaryHeap<Reverse<(u64, usize)>> =
        sources.iter_mut().enumerate().filter_map(|(j, s)| s.next().map(|h| Reverse((h, j)))).collect();
    let mut hits: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    let mut same: Vec<usize> = Vec::new();
    while let Some(Reverse((h, j))) = heap.pop() {
        same.clear();
        same.push(j);
        while let Some(&Reverse((h2, j2))) = heap.peek() {
            if h2 != h {
                break;
            }
            heap.pop();
            same.push(j2);
        }
        if same.len() > 1 {
            for &k in &same {
                hits.entry(k).or_default().push(h);
            }
        }
        for &k in &same {
            if let Some(next) = sources[k].next() {
                heap.push(Reverse((next, k)));
            }
        }
    }
    hits
}

/// Ranges of the hash space merged one at a time.
const RANGES: usize = 256;

/// The hashes found in more than one of the sorted, duplicate-free `lists`.
pub fn shared_hashes(lists: &[&[u64]]) -> Vec<u64> {
    if lists.len() < 2 {
        return Vec::new();
    }
    // Where each range starts in each list.
    let bounds: Vec<Vec<usize>> = lists
        .iter()
        .map(|l| (0..=RANGES).map(|r| l.partition_point(|&h| ((h >> 56) as usize) < r)).collect())
        .collect();
    let ranges = |from: usize, to: usize| {
        let mut shared = Vec::new();
        for r in from..to {
            let slices: Vec<&[u64]> = lists.iter().zip(&bounds).map(|(l, b)| &l[b[r]..b[r + 1]]).collect();
            merged(&slices, &mut shared);
        }
        shared
    };
    let (mut low, high) = std::thread::scope(|s| {
        let low = s.spawn(|| ranges(0, RANGES / 2));
        let high = ranges(RANGES / 2, RANGES);
        (low.join().unwrap_or_else(|e| std::panic::resume_unwind(e)), high)
    });
    low.extend(high);
    low
}

/// The sorted union of `lists`, adding every hash found in two of them to `shared`.
fn merged(lists: &[&[u64]], shared: &mut Vec<u64>) -> Vec<u64> {
    match lists {
        [] => Vec::new(),
        [one] => one.to_vec(),
        _ => {
            let (l, r) = lists.split_at(lists.len() / 2);
            let (a, b) = (merged(l, shared), merged(r, shared));
            let mut out = Vec::with_capacity(a.len() + b.len());
            let (mut i, mut j) = (0, 0);
            // Without a branch on the order of two random hashes (a misprediction every other
            // step); equal hashes are rare.
            while i < a.len() && j < b.len() {
                let (x, y) = (a[i], b[j]);
                if x == y {
                    shared.push(x);
                    out.push(x);
                    i += 1;
                    j += 1;
                    continue;
                }
                let take_a = x < y;
                out.push(if take_a { x } else { y });
                i += take_a as usize;
                j += !take_a as usize;
            }
            out.extend_from_slice(&a[i..]);
            out.extend_from_slice(&b[j..]);
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_exactly_the_shared_hashes() {
        let lists: Vec<Vec<u64>> = vec![vec![1, 5, 9], vec![2, 5, 10], vec![3, 11], vec![4, 9, 12], vec![]];
        let refs: Vec<&[u64]> = lists.iter().map(Vec::as_slice).collect();
        let mut got = shared_hashes(&refs);
        got.sort_unstable();
        assert_eq!(got, [5, 9]);
        assert!(shared_hashes(&refs[..1]).is_empty());
        assert!(shared_hashes(&[&[1, 2][..], &[3, 4][..]]).is_empty());
    }

    #[test]
    fn agrees_with_counting_across_ranges() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        // Spread over the whole hash space, with some values in several lists.
        let common: Vec<u64> = (0..500).map(|_| rng.random()).collect();
        let lists: Vec<Vec<u64>> = (0..7)
            .map(|_| {
                let mut l: Vec<u64> = (0..3000).map(|_| rng.random()).collect();
                l.extend(common.iter().filter(|_| rng.random_bool(0.3)));
                l.extend([0, u64::MAX].iter().filter(|_| rng.random_bool(0.5)));
                l.sort_unstable();
                l.dedup();
                l
            })
            .collect();
        let mut counts = std::collections::HashMap::new();
        lists.iter().flatten().for_each(|&h| *counts.entry(h).or_insert(0) += 1);
        let mut want: Vec<u64> = counts.into_iter().filter(|&(_, c)| c > 1).map(|(h, _)| h).collect();
        want.sort_unstable();
        let refs: Vec<&[u64]> = lists.iter().map(Vec::as_slice).collect();
        let mut got = shared_hashes(&refs);
        got.sort_unstable();
        got.dedup();
        assert_eq!(got, want);
        // Streamed, per list: the same hashes, each in the lists that hold it.
        let streamed = shared_streamed(
            lists.iter().map(|l| Box::new(l.iter().copied()) as Box<dyn Iterator<Item = u64>>).collect(),
        );
        for (j, l) in lists.iter().enumerate() {
            let mine: Vec<u64> = want.iter().copied().filter(|h| l.binary_search(h).is_ok()).collect();
            assert_eq!(streamed.get(&j).cloned().unwrap_or_default(), mine, "list {j}");
        }
    }
}
