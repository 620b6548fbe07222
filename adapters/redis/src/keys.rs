//! The names of the keys and channels, on one Redis and on a Redis Cluster.
//!
//! One Redis keeps the names it always had (`{prefix}url:{code}`, `{prefix}identity`, …):
//! processes of the previous version and of this one share them during a rolling upgrade.
//! On a cluster every script's keys must hash to one slot, so names carry a hash tag: the
//! fleet's keys and channels (the invalidation log and channel, the keepalive channels, the
//! acknowledgements, the registry, the creation feed and their epoch) all share `{fleet}`;
//! a record shares `{r<bucket>}` with the identity key of its bucket, the bucket derived
//! from the code, so records spread over every shard and each record script still checks
//! the epoch of the node that holds the record.

/// Record buckets on a cluster: each has its identity key (its epoch), on whichever shard
/// holds its slot; 1,024 spread evenly over any number of shards a cluster is likely to have.
pub const RECORD_BUCKETS: u32 = 1024;

/// The hash tag of the fleet's keys and channels on a cluster.
const FLEET_TAG: &str = "{fleet}";

/// The key and channel names of one prefix, on one Redis or on a cluster.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    prefix: String,
    cluster: bool,
}

/// Which epoch a key's scripts report: index 0 is the fleet's (and, on one Redis, every
/// record's too); on a cluster, 1 + the bucket for a record.
pub(crate) type EpochSlot = usize;

impl Keys {
    pub(crate) fn new(prefix: &str, cluster: bool) -> Keys {
        Keys {
            prefix: prefix.to_owned(),
            cluster,
        }
    }

    /// How many epochs are kept apart (see [`EpochSlot`]).
    pub(crate) fn epoch_slots(&self) -> usize {
        if self.cluster {
            1 + RECORD_BUCKETS as usize
        } else {
            1
        }
    }

    /// The bucket of a code: FNV-1a of its bytes, a hash that never changes between
    /// versions or processes (every process must name a record's key alike).
    pub(crate) fn bucket(code: &str) -> u32 {
        let mut h: u32 = 0x811c_9dc5;
        for b in code.bytes() {
            h ^= u32::from(b);
            h = h.wrapping_mul(0x0100_0193);
        }
        h % RECORD_BUCKETS
    }

    pub(crate) fn record_epoch_slot(&self, code: &str) -> EpochSlot {
        if self.cluster {
            1 + Keys::bucket(code) as usize
        } else {
            0
        }
    }

    /// The password attempts on the link `key` (one key per script call: any slot).
    pub(crate) fn attempts(&self, key: &str) -> String {
        format!("{}attempts:{}", self.prefix, key)
    }

    /// The record of `code`.
    pub(crate) fn record(&self, code: &str) -> String {
        if self.cluster {
            format!("{}{{r{}}}url:{}", self.prefix, Keys::bucket(code), code)
        } else {
            format!("{}url:{}", self.prefix, code)
        }
    }

    /// The identity key the record of `code` is checked against (its bucket's on a cluster).
    pub(crate) fn record_identity(&self, code: &str) -> String {
        if self.cluster {
            format!("{}{{r{}}}identity", self.prefix, Keys::bucket(code))
        } else {
            self.fleet("identity")
        }
    }

    /// A key or channel of the fleet: `{prefix}{name}`, with the fleet's tag on a cluster.
    pub(crate) fn fleet(&self, name: &str) -> String {
        let tag = if self.cluster { FLEET_TAG } else { "" };
        format!("{}{tag}{name}", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_redis_keeps_its_names_and_a_cluster_tags_them_by_slot() {
        let one = Keys::new("rebound:", false);
        assert_eq!(one.record("abc"), "rebound:url:abc");
        assert_eq!(one.record_identity("abc"), "rebound:identity");
        assert_eq!(one.fleet("invalidations"), "rebound:invalidations");
        assert_eq!(one.epoch_slots(), 1);
        let cluster = Keys::new("rebound:", true);
        let b = Keys::bucket("abc");
        assert_eq!(cluster.record("abc"), format!("rebound:{{r{b}}}url:abc"));
        assert_eq!(cluster.record_identity("abc"), format!("rebound:{{r{b}}}identity"));
        assert_eq!(cluster.fleet("invalidations"), "rebound:{fleet}invalidations");
        assert_eq!(cluster.record_epoch_slot("abc"), 1 + b as usize);
    }

    #[test]
    fn buckets_are_stable_and_spread() {
        // Fixed values: a change of the hash would move every record on a running cluster.
        assert_eq!(Keys::bucket(""), 0x811c_9dc5 % RECORD_BUCKETS);
        assert_eq!(Keys::bucket("abc"), 0x1a47_e90b % RECORD_BUCKETS);
        let mut seen = std::collections::HashSet::new();
        for i in 0..20_000 {
            seen.insert(Keys::bucket(&format!("c{i}")));
        }
        assert_eq!(seen.len(), RECORD_BUCKETS as usize, "every bucket is used");
    }
}
