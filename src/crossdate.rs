//! The run-wide check that no key appears under two partition dates (SPEC §1): each
//! partition's sorted key hashes are merged pairwise, as a tree on two threads, and a hash in
//! two lists makes both partitions candidates, whose real keys [`crate::run`] then names.

/// The hashes found in more than one of the sorted, duplicate-free `lists`.
pub fn shared_hashes(lists: &[&[u64]]) -> Vec<u64> {
    fn merge(a: &[u64], b: &[u64], shared: &mut Vec<u64>) -> Vec<u64> {
        let mut out = Vec::with_capacity(a.len() + b.len());
        let (mut i, mut j) = (0, 0);
        while i < a.len() && j < b.len() {
            match a[i].cmp(&b[j]) {
                std::cmp::Ordering::Less => {
                    out.push(a[i]);
                    i += 1;
                }
                std::cmp::Ordering::Greater => {
                    out.push(b[j]);
                    j += 1;
                }
                std::cmp::Ordering::Equal => {
                    shared.push(a[i]);
                    out.push(a[i]);
                    i += 1;
                    j += 1;
                }
            }
        }
        out.extend_from_slice(&a[i..]);
        out.extend_from_slice(&b[j..]);
        out
    }
    fn all(lists: &[&[u64]], shared: &mut Vec<u64>) -> Vec<u64> {
        match lists {
            [] => Vec::new(),
            [one] => one.to_vec(),
            _ => {
                let (l, r) = lists.split_at(lists.len() / 2);
                let (a, b) = (all(l, shared), all(r, shared));
                merge(&a, &b, shared)
            }
        }
    }
    if lists.len() < 2 {
        return Vec::new();
    }
    let (l, r) = lists.split_at(lists.len() / 2);
    let (mut left_shared, mut right_shared, mut shared) = (Vec::new(), Vec::new(), Vec::new());
    let (a, b) = std::thread::scope(|s| {
        let left = s.spawn(|| all(l, &mut left_shared));
        let b = all(r, &mut right_shared);
        (left.join().unwrap_or_default(), b)
    });
    // Only the shared hashes matter, not the merged list itself.
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                shared.push(a[i]);
                i += 1;
                j += 1;
            }
        }
    }
    shared.extend(left_shared);
    shared.extend(right_shared);
    shared
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
}
