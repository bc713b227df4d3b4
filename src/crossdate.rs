//! The run-wide check of an aggregate that no key appears under two partition dates (docs/design.md §2):
//! each partition's sorted key hashes are merged, and a hash in two lists makes both partitions
//! candidates, whose partitions are read again to name the real keys (and rule out hash
//! collisions). Both partitions fail, before either is written.
//!
//! The hash space is cut into ranges by the top bits (256, more for a long run), and each
//! range's slices of the lists (in memory, or read in blocks from files) are merged pairwise
//! as a tree, the ranges split between two threads: the merged copies stay as small as one
//! range, not the size of the run.

use std::collections::BTreeMap;

use crate::error::{ConflictKey, Location, PartitionError};
use crate::kind::{Context, Outcome};
use crate::plan::PartitionPlan;
use crate::prepare;

/// A key's bytes, its text, and where it was found.
type NamedKey = (Vec<u8>, String, Location);

/// A partition's sorted key hashes: in memory, or in a file of the run's spill folder once
/// the run's lists together would pass an eighth of its memory budget (a long backfill).
#[derive(Debug)]
pub enum Hashes {
    Memory(Vec<u64>),
    /// The file and how many hashes were written to it.
    File(std::path::PathBuf, usize),
}

/// The types of a partition's key columns, as its key bytes depend on them: the hashes of
/// two partitions compare only when these are equal. Types that give the same bytes for the
/// same key count as one: the text encodings (utf8, large utf8, utf8 view), decimals of one
/// scale whatever their precision, timestamps of one unit whatever their zone (instants).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyTypes(Vec<(String, String)>);

impl KeyTypes {
    /// The types of the `key` columns in `record` (a column it lacks is left out: that
    /// partition has failed).
    pub fn of(record: &arrow::datatypes::Schema, key: &[String]) -> Self {
        use arrow::datatypes::DataType;
        let name = |t: &DataType| match t {
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "utf8".to_string(),
            DataType::Decimal128(_, s) => format!("decimal(_,{s})"),
            DataType::Timestamp(u, Some(_)) => format!("{}", DataType::Timestamp(*u, Some("UTC".into()))),
            other => other.to_string(),
        };
        KeyTypes(
            key.iter()
                .filter_map(|k| record.field_with_name(k).ok().map(|f| (k.clone(), name(f.data_type()))))
                .collect(),
        )
    }

    /// The first key column typed otherwise in `other`: its name, its type here and there.
    fn differs(&self, other: &KeyTypes) -> Option<(String, String, String)> {
        let there = |k: &str| other.0.iter().find(|(o, _)| o == k).map(|(_, t)| t.clone());
        self.0.iter().find_map(|(k, t)| match there(k) {
            Some(u) if &u != t => Some((k.clone(), t.clone(), u)),
            _ => None,
        })
    }
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
    Ok(Hashes::File(path, hashes.len()))
}

/// A date of the range this run does not compute (skipped as unchanged, or held by another
/// run): its keys, for [`check`].
pub struct Guard {
    pub plan: PartitionPlan,
    pub hashes: Hashes,
    pub types: KeyTypes,
}

/// The hashes and key types of each of `plans`, read from their input; or why a date's could
/// not be read (its date and the error).
pub async fn guards(
    cx: &Context<'_>,
    plans: &[PartitionPlan],
) -> Vec<Result<Guard, (chrono::NaiveDate, PartitionError)>> {
    use futures::StreamExt;
    futures::stream::iter(plans.iter().cloned())
        .map(|plan| async move {
            let estimate = match cx.flat {
                Some(_) => 0,
                None => crate::spill::estimate(cx.plan.decoder.format, &plan.inputs),
            };
            let _held = cx.spill.reserve(estimate).await;
            let date = plan.date;
            // A retried run's other date committed from its input: with none now (removed since),
            // the keys its partition holds are unknown.
            if plan.inputs.is_empty() && cx.opts.guard_dates.contains(&date) {
                let reason = "its input holds no objects now (removed since it was committed?), so the keys its \
                              partition holds cannot be read. Restore its input, or run the retried dates with \
                              --date to commit them without checking them against it"
                    .to_string();
                return Err((date, PartitionError::Other(reason)));
            }
            let table = cx.table(&plan).await.map_err(|e| (date, e))?;
            let id = cx.identity(&table);
            let types = KeyTypes::of(table.schema(), &id.key);
            let hashes = tokio::task::spawn_blocking(move || prepare::all_key_hashes(&table, &id))
                .await
                .map_err(|e| (date, PartitionError::Other(format!("the key pass failed: {e}"))))?;
            let hashes = keep(cx, &format!("{}.guard", plan.dir), hashes).map_err(|e| (date, e))?;
            Ok(Guard { plan, hashes, types })
        })
        .buffer_unordered(cx.opts.concurrency.max(1))
        .collect()
        .await
}

/// Fails every pair of computed partitions that share a key (`done`: each outcome with the
/// sorted hashes of its keys and the types they were taken over, sorted by date), and every
/// computed partition that shares a key with one of the `guards` (which are not this run's to
/// fail).
///
/// Keys of different types give different bytes for what may be one key (`1001` as int32
/// and as int64, or as int64 and as text), so such partitions cannot be compared: when the
/// dates (computed or guards) do not all have one set of key types, every computed date
/// fails, naming the types, before any is written. A date typed like most dates (the
/// earliest, on a tie) is named against the earliest date typed otherwise; any other date
/// against the most common types.
pub async fn check(
    cx: &Context<'_>,
    done: &mut [(Outcome, Hashes, KeyTypes)],
    guards: Vec<Result<Guard, (chrono::NaiveDate, PartitionError)>>,
) {
    let n = done.len();
    // A guard whose keys could not be read: no computed date can be shown free of its keys.
    let (guards, unread): (Vec<_>, Vec<_>) = guards.into_iter().partition(Result::is_ok);
    let guards: Vec<Guard> = guards.into_iter().flatten().collect();
    if let Some(Err((date, e))) = unread.into_iter().min_by_key(|u| u.as_ref().err().map(|(d, _)| *d)) {
        for (o, _, _) in done.iter_mut().filter(|(o, _, _)| o.result.is_ok()) {
            o.result = Err(PartitionError::GuardUnread { date, reason: e.to_string(), exit: e.exit_code() });
        }
        return;
    }
    let computed: Vec<usize> = (0..n).filter(|&i| done[i].0.result.is_ok()).collect();
    if computed.is_empty() || computed.len() + guards.len() < 2 {
        return;
    }
    // Entries `0..n` are the computed dates, `n..` the guards.
    let types = |i: usize| if i < n { &done[i].2 } else { &guards[i - n].types };
    let plan = |i: usize| if i < n { &done[i].0.plan } else { &guards[i - n].plan };
    let mut ok: Vec<usize> = computed.iter().copied().chain(n..n + guards.len()).collect();
    ok.sort_by_key(|&i| plan(i).date);
    let mut groups: BTreeMap<&KeyTypes, (usize, usize)> = BTreeMap::new();
    for &i in &ok {
        groups.entry(types(i)).or_insert((0, i)).0 += 1;
    }
    let mut failed: Vec<(usize, PartitionError)> = Vec::new();
    if groups.len() > 1 {
        // No computed date can be shown free of the keys of a date typed otherwise: each
        // fails, named against the most common types if its own differ, else against the
        // earliest date typed otherwise.
        let (_, first) =
            groups.values().copied().max_by_key(|&(n, first)| (n, std::cmp::Reverse(first))).unwrap_or((0, 0));
        let main = types(first).clone();
        let apart = ok.iter().copied().find(|&i| types(i).differs(&main).is_some()).unwrap_or(first);
        for &i in ok.iter().filter(|&&i| i < n) {
            let other = if types(i).differs(&main).is_some() { first } else { apart };
            if let Some((column, here, there)) = types(i).differs(types(other)) {
                let others = groups[types(other)].0 - 1;
                failed
                    .push((i, PartitionError::KeyTypesDiffer { column, here, there, date: plan(other).date, others }));
            }
        }
        ok.clear();
    }
    if ok.iter().filter(|&&i| i < n).count() > 0 && ok.len() >= 2 {
        // Candidates: the hashes each partition shares with another.
        let lists: Vec<&Hashes> = ok.iter().map(|&i| if i < n { &done[i].1 } else { &guards[i - n].hashes }).collect();
        let candidates: BTreeMap<usize, Vec<u64>> = match shared_per_list(&lists) {
            Ok(shared) => shared.into_iter().map(|(j, h)| (ok[j], h)).collect(),
            Err(e) => {
                // A list read in part would pass a key under two dates unseen.
                for &i in ok.iter().filter(|&&i| i < n) {
                    failed.push((
                        i,
                        PartitionError::Other(format!(
                            "the key hashes kept for the check that no key is under two dates could not be read \
                             back: {e}. Nothing was written for this date; run it again"
                        )),
                    ));
                }
                BTreeMap::new()
            }
        };
        // Name the real keys (equal bytes), per partition.
        let mut found: Vec<(usize, Vec<NamedKey>)> = Vec::new();
        // A candidate that cannot be read again leaves its shared hashes unexplained: every
        // computed candidate fails rather than pass a key that may be under two dates.
        let mut unread: Option<(chrono::NaiveDate, String, crate::ExitCode)> = None;
        for (&idx, hashes) in &candidates {
            match cx.table(plan(idx)).await {
                Ok(table) => {
                    let id = cx.identity(&table);
                    let keys = prepare::keys_with_hashes(&table, &id, hashes);
                    found.push((idx, keys.into_iter().map(|(b, s, row)| (b, s, table.locate(row, None))).collect()));
                }
                Err(e) => {
                    unread.get_or_insert((plan(idx).date, e.to_string(), e.exit_code()));
                }
            }
        }
        if let Some((date, reason, exit)) = unread {
            for &idx in candidates.keys().filter(|&&i| i < n) {
                let (reason, exit) = (reason.clone(), exit);
                failed.push((idx, PartitionError::KeysUnread { date, reason, exit }));
            }
            found.clear();
        }
        let mut by_key: BTreeMap<Vec<u8>, Vec<(usize, String, Location)>> = BTreeMap::new();
        for (idx, keys) in &found {
            for (b, s, loc) in keys {
                by_key.entry(b.clone()).or_default().push((*idx, s.clone(), loc.clone()));
            }
        }
        let mut per_partition: BTreeMap<usize, Vec<ConflictKey>> = BTreeMap::new();
        // A key under two dates, at least one of them computed: guards alone were committed
        // by other runs.
        for places in by_key.values().filter(|v| v.len() > 1 && v.iter().any(|(i, _, _)| *i < n)) {
            let at: Vec<_> = places.iter().map(|(_, _, l)| l.clone()).collect();
            for (idx, key, _) in places.iter().filter(|(i, _, _)| *i < n) {
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
            failed.push((idx, PartitionError::KeyUnderTwoDates { keys, total }));
        }
    }
    for (i, e) in failed {
        done[i].0.result = Err(e);
    }
}

/// A sorted hash list handed out in ascending slices: from memory, or read in blocks from a
/// file [`keep`] wrote (a file that cannot be read gives no more hashes, and says why in
/// `error`: the check cannot stand on it).
struct Slices<'a> {
    memory: Option<&'a [u64]>,
    file: Option<std::fs::File>,
    /// Why the file could not be read, at once or part of the way.
    error: Option<String>,
    /// Read from the file and not handed out yet: `block[at..]`.
    block: Vec<u64>,
    at: usize,
    /// The index of the next hash to read from the file, or to hand out from memory.
    pos: usize,
    len: usize,
}

/// Hashes read from a file at a time.
const BLOCK: usize = 1 << 13;

impl<'a> Slices<'a> {
    /// The list of `hashes`, from its first hash not below `from`.
    fn new(hashes: &'a Hashes, from: u64) -> Self {
        let mut s = Slices { memory: None, file: None, error: None, block: Vec::new(), at: 0, pos: 0, len: 0 };
        match hashes {
            Hashes::Memory(v) => {
                s.memory = Some(v);
                s.pos = v.partition_point(|&h| h < from);
                s.len = v.len();
            }
            Hashes::File(path, written) => {
                let file = std::fs::File::open(path).and_then(|f| Ok((f.metadata()?.len(), f)));
                match file {
                    Ok((len, _)) if len != *written as u64 * 8 => {
                        s.error = Some(format!(
                            "{} holds {len} bytes, not the {} written (cut short or changed)",
                            path.display(),
                            *written as u64 * 8
                        ))
                    }
                    Ok((_, f)) => (s.file, s.len) = (Some(f), *written),
                    Err(e) => s.error = Some(format!("{}: {e}", path.display())),
                }
                // The first hash not below `from`, by binary search over the file.
                let (mut lo, mut hi) = (0, s.len);
                while lo < hi {
                    let mid = (lo + hi) / 2;
                    match s.read(mid, 1).first() {
                        Some(&h) if h < from => lo = mid + 1,
                        Some(_) => hi = mid,
                        None => (lo, hi) = (s.len, s.len),
                    }
                }
                s.pos = lo;
            }
        }
        s
    }

    /// Up to `n` hashes of the file from index `at` (none when it cannot be read).
    fn read(&mut self, at: usize, n: usize) -> Vec<u64> {
        use std::io::{Read, Seek, SeekFrom};
        let Some(f) = self.file.as_mut() else { return Vec::new() };
        let mut bytes = vec![0u8; n * 8];
        match f.seek(SeekFrom::Start(at as u64 * 8)).and_then(|_| f.read_exact(&mut bytes)) {
            Ok(()) => bytes.chunks_exact(8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default())).collect(),
            Err(e) => {
                self.error.get_or_insert_with(|| format!("reading a key hash file: {e}"));
                self.file = None;
                Vec::new()
            }
        }
    }

    /// Appends to `out` the next hashes below `upper`.
    fn below(&mut self, upper: u128, out: &mut Vec<u64>) {
        if let Some(m) = self.memory {
            let end = self.pos + m[self.pos..].partition_point(|&h| u128::from(h) < upper);
            out.extend_from_slice(&m[self.pos..end]);
            self.pos = end;
            return;
        }
        loop {
            let rest = &self.block[self.at..];
            let n = rest.partition_point(|&h| u128::from(h) < upper);
            out.extend_from_slice(&rest[..n]);
            self.at += n;
            if self.at < self.block.len() || self.pos >= self.len {
                return;
            }
            let n = (self.len - self.pos).min(BLOCK);
            self.block = self.read(self.pos, n);
            self.at = 0;
            self.pos = if self.block.is_empty() { self.len } else { self.pos + n };
        }
    }
}

/// For each of the sorted, duplicate-free `lists` (in memory or in files), the hashes it
/// shares with another, ascending. The hash space is cut into ranges of a few MiB of hashes
/// each; a range's slices are merged as in memory (`merged`), the ranges split between two
/// threads: memory stays that of a range, however long the run. A list kept in a file that
/// cannot be read to its end fails the whole (its reason).
pub fn shared_per_list(lists: &[&Hashes]) -> Result<BTreeMap<usize, Vec<u64>>, String> {
    let total: usize = lists
        .iter()
        .map(|h| match h {
            Hashes::Memory(v) => v.len(),
            Hashes::File(_, written) => *written,
        })
        .sum();
    in_ranges(lists, (total / (1 << 19)).next_power_of_two().clamp(RANGES, 1 << 16))
}

/// [`shared_per_list`] over `ranges` ranges (a power of two).
fn in_ranges(lists: &[&Hashes], ranges: usize) -> Result<BTreeMap<usize, Vec<u64>>, String> {
    let shift = 64 - ranges.trailing_zeros();
    let run = |from: usize, to: usize| {
        let mut slices: Vec<Slices<'_>> =
            lists.iter().map(|h| Slices::new(h, ((from as u128) << shift) as u64)).collect();
        let mut hits: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
        let mut parts: Vec<Vec<u64>> = vec![Vec::new(); lists.len()];
        for r in from..to {
            let upper = ((r + 1) as u128) << shift;
            for (s, part) in slices.iter_mut().zip(parts.iter_mut()) {
                part.clear();
                s.below(upper, part);
            }
            let mut shared = Vec::new();
            merged(&parts.iter().map(Vec::as_slice).collect::<Vec<_>>(), &mut shared);
            if shared.is_empty() {
                continue;
            }
            shared.sort_unstable();
            shared.dedup();
            for (j, part) in parts.iter().enumerate() {
                let mine = shared.iter().copied().filter(|h| part.binary_search(h).is_ok());
                let mine: Vec<u64> = mine.collect();
                if !mine.is_empty() {
                    hits.entry(j).or_default().extend(mine);
                }
            }
        }
        match slices.iter_mut().find_map(|s| s.error.take()) {
            Some(e) => Err(e),
            None => Ok(hits),
        }
    };
    let (low, high) = std::thread::scope(|s| {
        let low = s.spawn(|| run(0, ranges / 2));
        let high = run(ranges / 2, ranges);
        (low.join().unwrap_or_else(|e| std::panic::resume_unwind(e)), high)
    });
    let (mut low, high) = (low?, high?);
    for (j, h) in high {
        low.entry(j).or_default().extend(h);
    }
    Ok(low)
}

/// The fewest ranges the hash space is cut into.
const RANGES: usize = 256;

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

/// What a date's keys are made of: its input objects (and the lookups'), the config and the
/// rules. Two checks of a date with one fingerprint saw the same keys.
/// (`config`: the config's fingerprint, taken once.) The date is part of it: dates read from the
/// same objects (a flat input) hold other keys.
pub fn keys_fingerprint(job: &crate::run::Job, config: &str, plan: &crate::plan::Plan, p: &PartitionPlan) -> String {
    use sha2::{Digest, Sha256};
    let mut inputs = plan.lineage_inputs(p, &job.input);
    inputs.sort();
    let mut h = Sha256::new();
    h.update(crate::lineage::RULES.to_le_bytes());
    h.update(p.date.to_string().as_bytes());
    h.update([0]);
    h.update(config.as_bytes());
    h.update([0]);
    h.update(crate::lineage::input_fingerprint(&inputs).as_bytes());
    crate::config::hex(&h.finalize()[..16])
}

/// A committed date's last check against other dates: its keys' fingerprint then, and the
/// dates whose keys it was checked with (each with theirs). Kept in the table's state
/// (`STATE/checked/<col>=<date>.json`), outside the partition file, whose bytes depend on its
/// input alone.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Checked {
    pub keys: String,
    pub with: BTreeMap<chrono::NaiveDate, String>,
}

fn checked_path(state: &crate::store::StoreLocation, dir: &str) -> object_store::path::Path {
    state.child(&["checked", &format!("{dir}.json")])
}

/// Records that the keys of the committed date of folder `dir` (`checked.keys`) were checked
/// with those of `checked.with`, beside what its record already says of the same keys (runs of
/// other ranges, each checking some of its pairs). Written under the date's lease. A record not
/// written only makes a later `--skip-unchanged` run compute a date again.
pub async fn record_checked(state: &crate::store::StoreLocation, dir: &str, mut checked: Checked) {
    let path = checked_path(state, dir);
    let before = crate::commit::get(state, &path).await.ok().flatten();
    if let Some(was) = before.and_then(|b| serde_json::from_slice::<Checked>(&b).ok()) {
        if was.keys == checked.keys {
            for (date, keys) in was.with {
                checked.with.entry(date).or_insert(keys);
            }
        }
    }
    let body = serde_json::to_vec(&checked).unwrap_or_default();
    if let Err(e) = object_store::ObjectStoreExt::put(&state.store, &path, body.into()).await {
        tracing::warn!(error = %e, path = %state.display(&path), "cannot record the dates a partition's keys were checked with");
    }
}

/// Of the dates a `--skip-unchanged` run would skip (each with its keys' fingerprint), those to
/// compute after all: two skipped dates are checked against each other by nothing in the run,
/// so each pair must have been checked before, with the keys both hold now — else a key under
/// both (two daily runs, each of one date) would never be found. For each pair no record
/// covers, the later date is computed (the others guard it). Records are read a few at a time.
pub async fn unchecked(
    state: &crate::store::StoreLocation,
    skipped: &[(&PartitionPlan, String)],
) -> std::collections::BTreeSet<chrono::NaiveDate> {
    use futures::StreamExt;
    let keys: BTreeMap<chrono::NaiveDate, &str> = skipped.iter().map(|(p, k)| (p.date, k.as_str())).collect();
    let paths: Vec<(chrono::NaiveDate, object_store::path::Path)> =
        skipped.iter().map(|(p, _)| (p.date, checked_path(state, &p.dir))).collect();
    let read: Vec<(chrono::NaiveDate, Option<bytes::Bytes>)> = futures::stream::iter(paths)
        .map(|(date, path)| async move { (date, crate::commit::get(state, &path).await.ok().flatten()) })
        .buffer_unordered(16)
        .collect()
        .await;
    let records: BTreeMap<chrono::NaiveDate, Checked> = read
        .into_iter()
        .filter_map(|(date, bytes)| Some((date, serde_json::from_slice::<Checked>(&bytes?).ok()?)))
        .filter(|(date, c)| keys.get(date) == Some(&c.keys.as_str()))
        .collect();
    let saw = |a: &chrono::NaiveDate, b: &chrono::NaiveDate| {
        records.get(a).is_some_and(|r| r.with.get(b).map(String::as_str) == keys.get(b).copied())
    };
    let mut again = std::collections::BTreeSet::new();
    for a in keys.keys().rev() {
        if keys.keys().any(|b| b != a && !again.contains(b) && !saw(a, b) && !saw(b, a)) {
            again.insert(*a);
        }
    }
    again
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shared hashes of lists held in memory, per list.
    fn shared_in_memory(lists: &[Vec<u64>]) -> BTreeMap<usize, Vec<u64>> {
        let kept: Vec<Hashes> = lists.iter().map(|l| Hashes::Memory(l.clone())).collect();
        shared_per_list(&kept.iter().collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn finds_exactly_the_shared_hashes() {
        let lists: Vec<Vec<u64>> = vec![vec![1, 5, 9], vec![2, 5, 10], vec![3, 11], vec![4, 9, 12], vec![]];
        let want: BTreeMap<usize, Vec<u64>> = [(0, vec![5, 9]), (1, vec![5]), (3, vec![9])].into();
        assert_eq!(shared_in_memory(&lists), want);
        assert!(shared_in_memory(&lists[..1]).is_empty());
        assert!(shared_in_memory(&[vec![1, 2], vec![3, 4]]).is_empty());
    }

    /// A kept list that cannot be read to its end (removed, cut short) fails the check rather
    /// than hand out fewer hashes: a key under two dates would pass unseen.
    #[test]
    fn a_list_that_cannot_be_read_fails_the_check() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.u64");
        let bytes: Vec<u8> = [1u64, 5, 9].iter().flat_map(|h| h.to_le_bytes()).collect();
        let kept = [Hashes::Memory(vec![5, 9]), Hashes::File(path.clone(), 3)];
        let lists: Vec<&Hashes> = kept.iter().collect();
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(shared_per_list(&lists).unwrap(), [(0, vec![5, 9]), (1, vec![5, 9])].into());
        for cut in [0, 8, 20] {
            std::fs::write(&path, &bytes[..cut]).unwrap();
            assert!(shared_per_list(&lists).unwrap_err().contains("cut short"), "{cut}");
        }
        std::fs::remove_file(&path).unwrap();
        assert!(shared_per_list(&lists).unwrap_err().contains("1.u64"));
    }

    /// [`KeyTypes`] counts the text encodings as one type: their key bytes are the same,
    /// for a key of one column (its raw bytes) and of several (Arrow's row format).
    #[test]
    fn text_encodings_give_the_same_key_bytes() {
        use arrow::array::{ArrayRef, Int64Array, LargeStringArray, StringArray, StringViewArray};
        use std::sync::Arc;
        let n: ArrayRef = Arc::new(Int64Array::from(vec![1, 2]));
        let texts: [ArrayRef; 3] = [
            Arc::new(StringArray::from(vec!["abc", ""])),
            Arc::new(LargeStringArray::from(vec!["abc", ""])),
            Arc::new(StringViewArray::from(vec!["abc", ""])),
        ];
        let bytes = |cols: Vec<ArrayRef>| {
            let chunks = vec![cols];
            let keys = prepare::key_bytes(&chunks).unwrap();
            (0..2).map(|i| keys.get(i).to_vec()).collect::<Vec<_>>()
        };
        let one: Vec<_> = texts.iter().map(|t| bytes(vec![t.clone()])).collect();
        let two: Vec<_> = texts.iter().map(|t| bytes(vec![t.clone(), n.clone()])).collect();
        assert!(one.iter().all(|b| *b == one[0]) && two.iter().all(|b| *b == two[0]), "{one:?} {two:?}");
        let schema = |t: &ArrayRef| {
            arrow::datatypes::Schema::new(vec![arrow::datatypes::Field::new("k", t.data_type().clone(), false)])
        };
        let types: Vec<KeyTypes> = texts.iter().map(|t| KeyTypes::of(&schema(t), &["k".to_string()])).collect();
        assert!(types.iter().all(|t| *t == types[0]) && types[0] != KeyTypes::of(&schema(&n), &["k".to_string()]));

        // Decimals of one scale, timestamps of one unit: one type, the same bytes.
        use arrow::array::{Decimal128Array, TimestampMicrosecondArray};
        let same: [[ArrayRef; 2]; 2] = [
            [
                Arc::new(Decimal128Array::from(vec![100, 7]).with_precision_and_scale(10, 2).unwrap()),
                Arc::new(Decimal128Array::from(vec![100, 7]).with_precision_and_scale(12, 2).unwrap()),
            ],
            [
                Arc::new(TimestampMicrosecondArray::from(vec![5, 6]).with_timezone("UTC")),
                Arc::new(TimestampMicrosecondArray::from(vec![5, 6]).with_timezone("America/New_York")),
            ],
        ];
        for [a, b] in same {
            let key = ["k".to_string()];
            assert_eq!(KeyTypes::of(&schema(&a), &key), KeyTypes::of(&schema(&b), &key));
            assert_eq!(bytes(vec![a.clone(), n.clone()]), bytes(vec![b.clone(), n.clone()]));
            assert_eq!(bytes(vec![a]), bytes(vec![b]));
        }
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
        // Per list, all in memory, and from memory and files: the same hashes, each in the lists that hold it.
        let dir = tempfile::tempdir().unwrap();
        let kept: Vec<Hashes> = lists
            .iter()
            .enumerate()
            .map(|(j, l)| match j % 2 {
                0 => Hashes::Memory(l.clone()),
                _ => {
                    let path = dir.path().join(format!("{j}.u64"));
                    std::fs::write(&path, l.iter().flat_map(|h| h.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
                    Hashes::File(path, l.len())
                }
            })
            .collect();
        let kept: Vec<&Hashes> = kept.iter().collect();
        let all = [
            shared_in_memory(&lists),
            shared_per_list(&kept).unwrap(),
            in_ranges(&kept, 2).unwrap(),
            in_ranges(&kept, 1 << 12).unwrap(),
        ];
        for streamed in all {
            for (j, l) in lists.iter().enumerate() {
                let mine: Vec<u64> = want.iter().copied().filter(|h| l.binary_search(h).is_ok()).collect();
                assert_eq!(streamed.get(&j).cloned().unwrap_or_default(), mine, "list {j}");
            }
        }
    }
}
