//! The process's open-file limit, and the check that every port's connection cap fits
//! under it, so that a flood on one port cannot use the descriptors another port needs.

/// Descriptors kept for everything that is not a client connection: listeners, the store,
/// Redis and AWS connections, log files, the runtime.
pub const RESERVED_DESCRIPTORS: u64 = 512;

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and returns the limit now in force.
pub fn raise_open_file_limit() -> std::io::Result<u64> {
    let (soft, hard) = rlimit::Resource::NOFILE.get()?;
    if soft < hard {
        rlimit::Resource::NOFILE.set(hard, hard)?;
    }
    Ok(rlimit::Resource::NOFILE.get()?.0)
}

/// Whether caps adding up to `caps` connections fit under `limit` with the reserve.
pub fn caps_fit(caps: u64, limit: u64) -> bool {
    caps.saturating_add(RESERVED_DESCRIPTORS) <= limit
}
