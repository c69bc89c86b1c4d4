//! Which replica of bosun reconciles which objects when `--shards N` divides them
//! (issue 48): the plan only, pure. Every replica computes the same answers from the
//! same inputs, so they agree without talking to each other.
//!
//! ```text
//!  object ns/name ──sha256, first byte──▶ bucket 0..=255  (label bosun.dev/bucket, never changes)
//!  bucket b ──b mod N──▶ shard 0..N-1                       (changing N moves no label)
//!  shard i ──rendezvous over the live replicas──▶ the replica that should hold its lease
//!  replica ──watches bosun.dev/bucket in (its shards' buckets)──▶ caches and reconciles those only
//! ```
//!
//! A child carries its owner's bucket, so an owner and its children are always in the
//! same shard. The bucket is a hash anyone can recompute
//! (`printf 'ns/name' | sha256sum | cut -c1-2`, in hexadecimal), not a counter kept
//! somewhere: an object created while no replica runs gets the same one.

use sha2::{Digest, Sha256};

/// The label that holds an object's bucket (decimal, `0` to `255`).
pub const BUCKET_LABEL: &str = "bosun.dev/bucket";

/// How many buckets there are: the most shards there can be.
pub const BUCKETS: u16 = 256;

/// The bucket of the object `name` in `namespace` (`None`: cluster-scoped).
pub fn bucket(namespace: Option<&str>, name: &str) -> u8 {
    let mut digest = Sha256::new();
    digest.update(namespace.unwrap_or_default().as_bytes());
    digest.update(b"/");
    digest.update(name.as_bytes());
    digest.finalize()[0]
}

/// A bucket label's value, when it is one this release writes.
pub fn parse_bucket(value: &str) -> Option<u8> {
    // Decimal, no sign, no leading zero: one spelling per bucket, so a selector of
    // values matches every object of its buckets.
    if value.len() > 1 && value.starts_with('0') {
        return None;
    }
    value.parse().ok()
}

/// A number of shards, checked: 1 (every object in one shard, as without sharding) to
/// [`BUCKETS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shards(u16);

impl Shards {
    /// `count` shards; the error names `--shards`.
    pub fn new(count: u16) -> Result<Shards, String> {
        if count == 0 || count > BUCKETS {
            return Err(format!("--shards must be between 1 and {BUCKETS}, not {count}"));
        }
        Ok(Shards(count))
    }

    pub fn count(self) -> u16 {
        self.0
    }

    /// The shard a bucket belongs to.
    pub fn of_bucket(self, bucket: u8) -> u16 {
        u16::from(bucket) % self.0
    }

    /// The buckets of `shard`.
    pub fn buckets(self, shard: u16) -> impl Iterator<Item = u8> {
        (0..=u8::MAX).filter(move |b| self.of_bucket(*b) == shard)
    }

    /// The label selector of `shard`'s objects (`bosun.dev/bucket in (…)`): what its
    /// replica's watches ask the apiserver for.
    pub fn selector(self, shard: u16) -> String {
        let values: Vec<String> = self.buckets(shard).map(|b| b.to_string()).collect();
        format!("{BUCKET_LABEL} in ({})", values.join(","))
    }

    /// The Lease of `shard`, beside the leader Lease `base`:
    /// `<base>-shard-<i>-of-<N>`. The count is in the name, so replicas started with
    /// different counts never hold the same Lease for different buckets.
    pub fn lease(self, base: &str, shard: u16) -> String {
        format!("{base}-shard-{shard}-of-{}", self.0)
    }

    /// Which replica of `members` (their identities, in any order) should hold each
    /// shard, by rendezvous hashing with bounded load: shard by shard, each goes to the
    /// member whose hash with it is highest among those holding fewer than their share
    /// (`ceil(shards / members)`). Pure rendezvous leaves shares lumpy with few shards
    /// (three shards over three replicas: one gets none a third of the time); bounded,
    /// every member holds its share, and a member that leaves or joins still moves few
    /// shards besides its own. `None` for every shard when there is no member.
    pub fn owners<'a>(self, members: &[&'a str]) -> Vec<Option<&'a str>> {
        let mut members: Vec<&str> = members.to_vec();
        members.sort_unstable();
        members.dedup();
        if members.is_empty() {
            return vec![None; usize::from(self.0)];
        }
        let share = usize::from(self.0).div_ceil(members.len());
        let mut held = vec![0usize; members.len()];
        (0..self.0)
            .map(|shard| {
                let (i, member) = members
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| held[*i] < share)
                    .max_by_key(|(_, m)| (weight(m, shard, self.0), **m))?;
                held[i] += 1;
                Some(*member)
            })
            .collect()
    }
}

/// A Lease's shard and shard count, when `name` is a shard Lease of `base`.
pub fn parse_lease(base: &str, name: &str) -> Option<(u16, u16)> {
    let rest = name.strip_prefix(base)?.strip_prefix("-shard-")?;
    let (shard, count) = rest.split_once("-of-")?;
    let (shard, count): (u16, u16) = (shard.parse().ok()?, count.parse().ok()?);
    (shard < count).then_some((shard, count))
}

/// The rendezvous weight of `member` for shard `shard` of `count`.
fn weight(member: &str, shard: u16, count: u16) -> [u8; 8] {
    let mut digest = Sha256::new();
    digest.update(member.as_bytes());
    digest.update(b"\0");
    digest.update(shard.to_be_bytes());
    digest.update(count.to_be_bytes());
    let mut weight = [0; 8];
    weight.copy_from_slice(&digest.finalize()[..8]);
    weight
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn a_bucket_is_the_first_byte_of_sha256_of_namespace_slash_name() {
        // printf 'default/web' | sha256sum → the first two hex digits.
        let first = |text: &str| Sha256::digest(text.as_bytes())[0];
        assert_eq!(bucket(Some("default"), "web"), first("default/web"));
        assert_eq!(bucket(None, "cluster-wide"), first("/cluster-wide"));
        assert_ne!(bucket(Some("a"), "bc"), bucket(Some("ab"), "c"), "the slash separates them");
    }

    #[test]
    fn buckets_spread_evenly_enough_over_ten_thousand_names() {
        let mut counts = [0u32; 256];
        for i in 0..10_000 {
            counts[usize::from(bucket(Some("bench"), &format!("webapp-{i}")))] += 1;
        }
        let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        // 39 on average; a uniform hash stays well inside this.
        assert!(*min >= 15 && *max <= 70, "{min}..{max}");
    }

    #[test]
    fn a_shard_count_out_of_range_names_the_flag() {
        assert!(Shards::new(0).unwrap_err().contains("--shards"));
        assert!(Shards::new(257).unwrap_err().contains("between 1 and 256"));
        assert_eq!(Shards::new(256).map(Shards::count), Ok(256));
    }

    #[test]
    fn every_bucket_is_in_exactly_one_shard_and_its_selector() {
        for count in [1, 2, 3, 7, 256] {
            let shards = Shards::new(count).unwrap();
            let mut seen = BTreeMap::new();
            for shard in 0..count {
                for b in shards.buckets(shard) {
                    assert!(seen.insert(b, shard).is_none(), "bucket {b} twice for {count} shards");
                    assert_eq!(shards.of_bucket(b), shard);
                }
            }
            assert_eq!(seen.len(), 256, "{count} shards");
        }
        let three = Shards::new(3).unwrap();
        let selector = three.selector(2);
        assert!(selector.starts_with("bosun.dev/bucket in (2,5,8,"), "{selector}");
        assert!(selector.ends_with(",254)"), "{selector}");
        assert_eq!(Shards::new(1).unwrap().selector(0).matches(',').count(), 255);
    }

    #[test]
    fn only_the_one_spelling_of_a_bucket_is_read() {
        assert_eq!(parse_bucket("0"), Some(0));
        assert_eq!(parse_bucket("255"), Some(255));
        for bad in ["256", "007", "-1", "", " 3", "a"] {
            assert_eq!(parse_bucket(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn shard_leases_carry_the_count_and_read_back() {
        let three = Shards::new(3).unwrap();
        assert_eq!(three.lease("bosun", 2), "bosun-shard-2-of-3");
        assert_eq!(parse_lease("bosun", "bosun-shard-2-of-3"), Some((2, 3)));
        for other in ["bosun", "bosun-shard-3-of-3", "other-shard-0-of-3", "bosun-shard-x-of-3", "bosun-shard-1-of-"] {
            assert_eq!(parse_lease("bosun", other), None, "{other}");
        }
    }

    fn per_member<'a>(owners: &[Option<&'a str>]) -> BTreeMap<&'a str, usize> {
        owners.iter().flatten().fold(BTreeMap::new(), |mut m, o| {
            *m.entry(*o).or_default() += 1;
            m
        })
    }

    #[test]
    fn rendezvous_gives_each_shard_one_owner_and_each_member_its_share() {
        let shards = Shards::new(16).unwrap();
        assert!(shards.owners(&[]).iter().all(Option::is_none));
        let three = shards.owners(&["bosun-a", "bosun-b", "bosun-c"]);
        assert_eq!(three, shards.owners(&["bosun-c", "bosun-a", "bosun-b"]), "the order of members does not matter");
        let per = per_member(&three);
        assert_eq!(per.values().sum::<usize>(), 16);
        // Each at most its share, ceil(16 / 3) = 6.
        assert!(per.len() == 3 && per.values().all(|n| (4..=6).contains(n)), "16 shards over 3: {per:?}");
        let two = shards.owners(&["bosun-a", "bosun-c"]);
        assert!(two.iter().all(|o| o.is_some_and(|o| o != "bosun-b")));
        assert_eq!(per_member(&two).values().copied().collect::<Vec<_>>(), [8, 8]);
        // Few shards move besides the leaver's (about a third of 16).
        let moved = three.iter().zip(&two).filter(|(b, a)| **b != Some("bosun-b") && b != a).count();
        assert!(moved <= 3, "{moved} shards of members that stayed moved");
        // As many shards as replicas, for any names: one each.
        for names in [["a", "b", "c"], ["shard-a", "shard-b", "shard-c"], ["bench-0", "bench-1", "bench-2"]] {
            let owners = Shards::new(3).unwrap().owners(&names);
            assert_eq!(per_member(&owners).len(), 3, "{names:?}: {owners:?}");
        }
    }
}
