//! The country of a client address (docs/spec.md §13), from a MaxMind-format database file the
//! operator configures: GeoLite2-Country and DB-IP's (`country.iso_code`) or ip-location-db's
//! country files (`country_code`). The file is read whole into memory, then looked up in place;
//! it is read again when it changes on disk ([`watch_country_db`]), and a file that does not
//! load is refused with a log line and a count while the database read last keeps answering,
//! as `rebound_edge::tls` does for certificates.
//!
//! A lookup walks the tree bit by bit (about 900 instructions, a tenth of a redirect), so
//! each redirect thread remembers the countries of the addresses it saw last, as
//! `crate::visitor` remembers agents: an address seen again costs a hash and a comparison.
//!
//! Read into memory rather than mapped: a lookup costs the same in both, mapping needs `unsafe`
//! (denied here), and a mapped file rewritten in place (not renamed over) would crash the
//! process on its next read. The price is the file's size in memory (8 MB for a country
//! database), twice for the moment of a reload.

use arc_swap::ArcSwap;
use maxminddb::{PathElement, Reader};
use rebound_core::dimensions::Country;
use std::cell::RefCell;
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::sync::watch;

/// Why a country database could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CountryDbError {
    #[error("{path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: not a MaxMind DB file: {source}")]
    Format {
        path: PathBuf,
        source: maxminddb::MaxMindDbError,
    },
}

/// Where GeoIP2, GeoLite2 and DB-IP keep the country's code.
const ISO_CODE: [PathElement<'static>; 2] = [PathElement::Key("country"), PathElement::Key("iso_code")];
/// Where ip-location-db's country files keep it.
const COUNTRY_CODE: [PathElement<'static>; 1] = [PathElement::Key("country_code")];

/// The file's modification time and length, to notice a change.
type Seen = Option<(SystemTime, u64)>;

fn seen(path: &Path) -> Seen {
    std::fs::metadata(path)
        .ok()
        .and_then(|m| Some((m.modified().ok()?, m.len())))
}

/// A database as loaded, and which of the two layouts its entries answered in last: that
/// one is read first (the other one's miss costs a third of a lookup).
struct Loaded {
    reader: Reader<Vec<u8>>,
    country_code_first: AtomicBool,
    /// Unique among every database loaded by the process: what a remembered country was
    /// read from.
    generation: u64,
}

/// The next [`Loaded::generation`].
static GENERATIONS: AtomicU64 = AtomicU64::new(1);

/// Countries remembered per redirect thread (a direct-mapped table: an address's slot is
/// its hash's low bits); 1024 slots of 40 bytes.
const SLOTS: usize = 1024;

#[derive(Clone, Copy)]
struct Remembered {
    address: IpAddr,
    generation: u64,
    country: Country,
}

struct SeenAddresses {
    /// foldhash, as the agents' table (`crate::visitor`).
    hasher: hashbrown::DefaultHashBuilder,
    slots: Box<[Option<Remembered>]>,
}

thread_local! {
    static SEEN: RefCell<SeenAddresses> = RefCell::new(SeenAddresses {
        hasher: hashbrown::DefaultHashBuilder::default(),
        slots: vec![None; SLOTS].into_boxed_slice(),
    });
}

/// A country database, replaceable while it answers.
pub struct CountryDb {
    path: PathBuf,
    current: ArcSwap<Loaded>,
    /// `current`'s generation, read without loading it (what a remembered country is checked
    /// against; set after `current`, so a thread may answer from the old database a moment
    /// longer, never from one it did not read).
    generation: AtomicU64,
    seen: Mutex<Seen>,
    reloaded: AtomicU64,
    refused: AtomicU64,
}

impl CountryDb {
    /// Loads the file; start-up fails if it does not load.
    pub fn open(path: impl Into<PathBuf>) -> Result<CountryDb, CountryDbError> {
        let path = path.into();
        let before = seen(&path);
        let loaded = load(&path)?;
        Ok(CountryDb {
            path,
            generation: AtomicU64::new(loaded.generation),
            current: ArcSwap::from_pointee(loaded),
            seen: Mutex::new(before),
            reloaded: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        })
    }

    /// The country of `address`: unknown when the database has no entry for it, or an
    /// entry without a country code. Remembered per thread until the database is reloaded.
    #[inline]
    pub fn country_of(&self, address: IpAddr) -> Country {
        let generation = self.generation.load(Ordering::Acquire);
        SEEN.with(|seen| {
            let mut seen = seen.borrow_mut();
            let hash = seen.hasher.hash_one(address);
            let slot = &mut seen.slots[(hash as usize) % SLOTS];
            match slot {
                Some(s) if s.address == address && s.generation == generation => s.country,
                _ => {
                    let db = self.current.load();
                    let country = Self::look_up(&db, address);
                    *slot = Some(Remembered {
                        address,
                        generation: db.generation,
                        country,
                    });
                    country
                }
            }
        })
    }

    /// The country of `address`, read from the database now (not remembered).
    pub fn look_up_now(&self, address: IpAddr) -> Country {
        Self::look_up(&self.current.load(), address)
    }

    #[cold]
    fn look_up(db: &Loaded, address: IpAddr) -> Country {
        let Ok(found) = db.reader.lookup(address) else {
            return Country::UNKNOWN;
        };
        if !found.has_data() {
            return Country::UNKNOWN;
        }
        let country_code_first = db.country_code_first.load(Ordering::Relaxed);
        let (first, second): (&[PathElement], &[PathElement]) = match country_code_first {
            true => (&COUNTRY_CODE, &ISO_CODE),
            false => (&ISO_CODE, &COUNTRY_CODE),
        };
        let code = match found.decode_path::<&str>(first) {
            Ok(Some(code)) => Some(code),
            _ => {
                let code = found.decode_path::<&str>(second).ok().flatten();
                if code.is_some() {
                    db.country_code_first.store(!country_code_first, Ordering::Relaxed);
                }
                code
            }
        };
        code.map_or(Country::UNKNOWN, |code| Country::from_code(code.as_bytes()))
    }

    /// Loads the file again; on failure the database read last keeps answering. Counted
    /// either way ([`CountryDb::reloaded`], [`CountryDb::refused`]).
    pub fn reload(&self) -> Result<(), CountryDbError> {
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) = seen(&self.path);
        match load(&self.path) {
            Ok(loaded) => {
                let generation = loaded.generation;
                self.current.store(Arc::new(loaded));
                self.generation.store(generation, Ordering::Release);
                self.reloaded.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    /// Whether the file changed since the last load or attempt.
    pub fn changed_on_disk(&self) -> bool {
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) != seen(&self.path)
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The database's own name for its kind and its build time (seconds since the epoch),
    /// from its metadata: what a log line says was loaded.
    pub fn description(&self) -> (String, u64) {
        let db = self.current.load();
        let metadata = db.reader.metadata();
        (metadata.database_type.clone(), metadata.build_epoch)
    }

    /// Reloads that replaced the database.
    pub fn reloaded(&self) -> u64 {
        self.reloaded.load(Ordering::Relaxed)
    }

    /// Reloads refused (the file unreadable or not a MaxMind DB); the old one kept answering.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

fn load(path: &Path) -> Result<Loaded, CountryDbError> {
    let bytes = std::fs::read(path).map_err(|source| CountryDbError::Read {
        path: path.to_owned(),
        source,
    })?;
    let format = |source| CountryDbError::Format {
        path: path.to_owned(),
        source,
    };
    // The metadata (at the file's end, so a file cut short has none) found and read. Not
    // `Reader::verify`: it refuses real databases over conventions of the metadata (an empty
    // `description` in ip-location-db's files). A file damaged inside answers `unknown` for
    // the addresses whose entries are damaged.
    Ok(Loaded {
        reader: Reader::from_source(bytes).map_err(format)?,
        country_code_first: AtomicBool::new(false),
        generation: GENERATIONS.fetch_add(1, Ordering::Relaxed),
    })
}

/// Reloads `db` whenever its file changes (checked every `poll`), until `stop`; each reload
/// counted in `reloads` by outcome (`ok`, `refused`).
pub async fn watch_country_db(
    db: Arc<CountryDb>,
    poll: Duration,
    reloads: prometheus::IntCounterVec,
    mut stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(poll);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        if !db.changed_on_disk() {
            continue;
        }
        match db.reload() {
            Ok(()) => {
                reloads.with_label_values(&["ok"]).inc();
                let (kind, built) = db.description();
                tracing::info!(path = %db.path().display(), kind, built, "country database reloaded");
            }
            Err(e) => {
                reloads.with_label_values(&["refused"]).inc();
                tracing::error!(error = %e, "country database reload refused; the previous database keeps answering");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mmdb_writer::{Value, Writer};

    /// A database of a few networks, in either layout. The documentation ranges are reserved
    /// (the writer leaves them out, as real databases do), so these are public ranges with
    /// made-up countries.
    fn database(kind: &str, entries: &[(&str, Value)]) -> Vec<u8> {
        let mut writer = Writer::new(kind);
        for (net, value) in entries {
            writer
                .insert_value(net.parse::<ipnet::IpNet>().unwrap(), value.clone())
                .unwrap();
        }
        writer.to_bytes().unwrap()
    }

    fn geolite(code: &str) -> Value {
        Value::map([("country", Value::map([("iso_code", Value::from(code))]))])
    }

    fn ip_location_db(code: &str) -> Value {
        Value::map([("country_code", Value::from(code))])
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn write(path: &Path, bytes: &[u8]) {
        // Written beside, then renamed over, as an operator's download would be; and the
        // modification time moved on, in case the two writes share one clock tick.
        let beside = path.with_extension("new");
        std::fs::write(&beside, bytes).unwrap();
        let later = SystemTime::now() + Duration::from_secs(seen(path).map_or(0, |_| 10));
        std::fs::File::options()
            .write(true)
            .open(&beside)
            .unwrap()
            .set_modified(later)
            .unwrap();
        std::fs::rename(&beside, path).unwrap();
    }

    #[test]
    fn both_layouts_answer_and_an_address_without_an_entry_is_unknown() {
        let dir = tempfile::tempdir().unwrap();
        type Layout = fn(&str) -> Value;
        let cases: &[(&str, Layout)] = &[("GeoLite2-Country", geolite), ("ip-location-db", ip_location_db)];
        for &(kind, value) in cases {
            let path = dir.path().join(format!("{kind}.mmdb"));
            let bytes = database(
                kind,
                &[
                    ("11.0.2.0/24", value("de")),
                    ("12.51.100.0/24", value("JP")),
                    ("2a0b:db8::/32", value("BR")),
                    ("13.0.113.0/25", value("XX")),
                    ("13.0.113.128/25", Value::map([("continent", Value::from("EU"))])),
                ],
            );
            std::fs::write(&path, bytes).unwrap();
            let db = CountryDb::open(&path).unwrap();
            let cases: &[(&str, &str)] = &[
                ("11.0.2.1", "DE"),
                ("11.0.2.255", "DE"),
                ("12.51.100.7", "JP"),
                ("2a0b:db8::1", "BR"),
                // IPv4 through its IPv6-mapped form reaches the same entry.
                ("::ffff:12.51.100.7", "JP"),
                ("13.0.113.1", "unknown"),
                ("13.0.113.200", "unknown"),
                ("11.0.3.1", "unknown"),
                ("2a0b:db9::1", "unknown"),
            ];
            for &(address, want) in cases {
                assert_eq!(db.country_of(ip(address)).as_str(), want, "{kind} {address}");
            }
            assert_eq!(db.description().0, kind);
        }
    }

    #[test]
    fn a_changed_file_is_reloaded_and_a_broken_one_refused_keeping_the_old() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("country.mmdb");
        write(&path, &database("t", &[("11.0.2.0/24", geolite("FR"))]));
        let db = CountryDb::open(&path).unwrap();
        assert_eq!(db.country_of(ip("11.0.2.1")).as_str(), "FR");
        assert!(!db.changed_on_disk());

        write(&path, &database("t", &[("11.0.2.0/24", geolite("IT"))]));
        assert!(db.changed_on_disk());
        db.reload().unwrap();
        assert!(!db.changed_on_disk());
        assert_eq!(db.country_of(ip("11.0.2.1")).as_str(), "IT");
        assert_eq!((db.reloaded(), db.refused()), (1, 0));

        // Not a database; then one cut short: both refused, Italy still answers.
        for broken in [b"not a database".to_vec(), {
            let mut good = database("t", &[("11.0.2.0/24", geolite("ES"))]);
            good.truncate(good.len() / 2);
            good
        }] {
            write(&path, &broken);
            assert!(db.changed_on_disk());
            assert!(matches!(db.reload(), Err(CountryDbError::Format { .. })));
            assert!(
                !db.changed_on_disk(),
                "a refused file is not tried again until it changes"
            );
            assert_eq!(db.country_of(ip("11.0.2.1")).as_str(), "IT");
        }
        std::fs::remove_file(&path).unwrap();
        assert!(db.changed_on_disk());
        assert!(matches!(db.reload(), Err(CountryDbError::Read { .. })));
        assert_eq!((db.reloaded(), db.refused()), (1, 3));
        assert_eq!(db.country_of(ip("11.0.2.1")).as_str(), "IT");
        assert!(CountryDb::open(&path).is_err(), "start-up fails on a missing file");
    }

    #[test]
    fn a_remembered_country_is_the_databases_for_that_address_never_another_slots() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("country.mmdb");
        let entries = [("11.0.0.0/16", geolite("DE")), ("12.0.0.0/16", geolite("JP"))];
        std::fs::write(&path, database("t", &entries)).unwrap();
        let db = CountryDb::open(&path).unwrap();
        // More addresses than slots, twice over: every slot is overwritten.
        for round in 0..2 {
            for i in 0..(SLOTS * 2) as u32 {
                let [_, _, c, d] = i.to_be_bytes();
                for (a, want) in [(11, "DE"), (12, "JP"), (13, "unknown")] {
                    let address = IpAddr::from([a, 0, c, d]);
                    assert_eq!(db.country_of(address).as_str(), want, "{address}, round {round}");
                    assert_eq!(db.look_up_now(address).as_str(), want, "{address}");
                }
            }
        }
        // Another database at the same moment: its own answers, not the first one's.
        let other_path = dir.path().join("other.mmdb");
        std::fs::write(&other_path, database("t", &[("11.0.0.0/16", geolite("PT"))])).unwrap();
        let other = CountryDb::open(&other_path).unwrap();
        assert_eq!(db.country_of(ip("11.0.0.1")).as_str(), "DE");
        assert_eq!(other.country_of(ip("11.0.0.1")).as_str(), "PT");
        assert_eq!(db.country_of(ip("11.0.0.1")).as_str(), "DE");
    }

    #[tokio::test]
    async fn the_watch_reloads_a_changed_file_until_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("country.mmdb");
        write(&path, &database("t", &[("11.0.2.0/24", geolite("SE"))]));
        let db = Arc::new(CountryDb::open(&path).unwrap());
        let (stop_tx, stop) = watch::channel(false);
        let reloads = prometheus::IntCounterVec::new(prometheus::Opts::new("r", "r"), &["outcome"]).unwrap();
        let task = tokio::spawn(watch_country_db(
            db.clone(),
            Duration::from_millis(10),
            reloads.clone(),
            stop,
        ));
        write(&path, &database("t", &[("11.0.2.0/24", geolite("NO"))]));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while db.country_of(ip("11.0.2.1")).as_str() != "NO" {
            assert!(tokio::time::Instant::now() < deadline, "not reloaded");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(db.reloaded(), 1);
        assert_eq!(reloads.with_label_values(&["ok"]).get(), 1);
        // A file that is no database: refused, counted, the last one kept.
        write(&path, b"not a database at all");
        while reloads.with_label_values(&["refused"]).get() == 0 {
            assert!(tokio::time::Instant::now() < deadline, "not looked at");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(db.country_of(ip("11.0.2.1")).as_str(), "NO");
        stop_tx.send(true).unwrap();
        task.await.unwrap();
    }

    /// Against a real database (`scripts/fetch-country-db` prints the path to export):
    /// `REBOUND_TEST_COUNTRY_DB=… cargo test -p rebound-proxy --lib geoip -- --ignored`.
    /// The addresses are those of benches/results/2026-12-06d-user-agent-parsers.md.
    #[test]
    #[ignore = "needs REBOUND_TEST_COUNTRY_DB: a real country database"]
    fn a_real_database_places_well_known_addresses() {
        let path = std::env::var("REBOUND_TEST_COUNTRY_DB").expect("REBOUND_TEST_COUNTRY_DB: a country .mmdb");
        let db = CountryDb::open(path).unwrap();
        for &(address, want) in REAL {
            assert_eq!(db.country_of(ip(address)).as_str(), want, "{address}");
        }
    }

    /// What ip-location-db's geo-whois-asn-country 2.3.2026061719 says: registries' own and
    /// long-held ranges, and a private address.
    const REAL: &[(&str, &str)] = &[
        ("8.8.8.8", "US"),
        ("193.0.6.139", "NL"),
        ("202.12.27.33", "JP"),
        ("200.160.2.3", "BR"),
        ("212.58.244.20", "GB"),
        ("85.214.132.117", "DE"),
        ("10.0.0.1", "unknown"),
    ];
}
