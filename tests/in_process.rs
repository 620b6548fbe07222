//! The planes assembled in process from the library, on the in-memory store and a manual
//! clock: what a black-box test could only reach by waiting in real time (expiry to the
//! millisecond, `max-age` shrinking towards it, pending clicks in the stats, the last
//! clicks shipped on shutdown) is checked here by moving the clock.

use rebound_test_support as common;

use rebound::all_in_one::{AllInOne, AllInOneListeners};
use rebound::data_plane::DataPlaneListeners;
use rebound::listen::RouterPort;
use rebound::process_metrics::ProcessRegistry;
use rebound::settings::Settings;
use rebound_core::{Clock, Day, ManualClock};
use rebound_proxy::clicks::LowPriority;
use rebound_proxy::server::{RedirectListener, Shutdown};
use rebound_store::{MemoryStore, RollupStore, Store};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::Arc;

const KEY: &str = "in-process-operator-key-0001";
const NOW: i64 = 1_790_000_000_000; // 2026-09-21T...Z

fn local(listener: &std::net::TcpListener) -> SocketAddr {
    listener.local_addr().unwrap()
}

/// The all-in-one `rebound::app::run_all_in_one` runs (`AllInOne`), on fakes.
struct InProcess {
    redirect: SocketAddr,
    api: SocketAddr,
    metrics: SocketAddr,
    clock: ManualClock,
    store: Arc<MemoryStore>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    serving: Option<std::thread::JoinHandle<anyhow::Result<()>>>,
    client: reqwest::Client,
    /// The runtime the test's requests run on (the planes have their own).
    requests: tokio::runtime::Runtime,
}

impl InProcess {
    fn start() -> InProcess {
        let dir = common::temp_dir();
        let any = SocketAddr::from(([127, 0, 0, 1], 0));
        let mut settings = Settings {
            redirect_addr: any,
            api_addr: any,
            metrics_addr: any,
            data_dir: dir.keep(),
            bootstrap_key: Some(KEY.into()),
            ..Settings::default()
        };
        settings.redirect.threads = 1;
        settings.redirect.cache_max_age_secs = 300;
        let clock = ManualClock::at(NOW);
        let shared_clock: Arc<dyn Clock> = Arc::new(clock.clone());
        let store = Arc::new(MemoryStore::new());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();

        let metrics = ProcessRegistry::new().unwrap();
        let listeners = DataPlaneListeners::bind(&settings, false).unwrap();
        let api_listener = std::net::TcpListener::bind(any).unwrap();
        api_listener.set_nonblocking(true).unwrap();
        let (redirect, metrics_addr, api) = match (&listeners.redirect, &listeners.metrics) {
            (RedirectListener::Bound(r), RouterPort::Bound(m)) => (local(r), local(m), local(&api_listener)),
            _ => unreachable!("bound, not inherited"),
        };
        let all_in_one = runtime
            .block_on(AllInOne::build(
                &settings,
                metrics,
                store.clone() as Arc<dyn Store>,
                shared_clock,
            ))
            .unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = std::thread::spawn(move || {
            let listeners = AllInOneListeners {
                data: listeners,
                api: RouterPort::Bound(api_listener),
            };
            let shutdown = async move {
                let _ = stopped.await;
                Shutdown::Drain
            };
            let click_writes = LowPriority {
                runtime: runtime.handle().clone(),
                cpu: None,
            };
            all_in_one.run(listeners, click_writes, shutdown, &runtime)
        });
        let rb = InProcess {
            redirect,
            api,
            metrics: metrics_addr,
            clock,
            store,
            stop: Some(stop),
            serving: Some(serving),
            client: common::http(),
            requests: tokio::runtime::Runtime::new().unwrap(),
        };
        rb.wait_until_ready();
        rb
    }

    /// Waits for `/readyz` (the listeners serve, the filter is loaded).
    fn wait_until_ready(&self) {
        let metrics = format!("http://{}", self.metrics);
        self.requests.block_on(common::wait_ready_at(&metrics));
    }

    fn create(&self, body: Value) -> Value {
        self.requests.block_on(async {
            let res = self
                .client
                .post(format!("http://{}/api/v1/links", self.api))
                .bearer_auth(KEY)
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(res.status(), 201);
            res.json().await.unwrap()
        })
    }

    /// The status, `Location` and `Cache-Control` of `GET /{code}`.
    fn redirect(&self, code: &str) -> (u16, Option<String>, Option<String>) {
        self.requests.block_on(async {
            let res = self
                .client
                .get(format!("http://{}/{code}", self.redirect))
                .send()
                .await
                .unwrap();
            let header = |name: &str| res.headers().get(name).map(|v| v.to_str().unwrap().to_owned());
            (res.status().as_u16(), header("location"), header("cache-control"))
        })
    }

    fn stats_total(&self, code: &str) -> u64 {
        self.requests.block_on(async {
            let res = self
                .client
                .get(format!("http://{}/api/v1/links/{code}/stats", self.api))
                .bearer_auth(KEY)
                .send()
                .await
                .unwrap();
            assert_eq!(res.status(), 200);
            res.json::<Value>().await.unwrap()["total"].as_u64().unwrap()
        })
    }

    /// Stops the planes as SIGTERM would, and waits until they have drained.
    fn shut_down(&mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.serving.take().unwrap().join().unwrap().unwrap();
    }
}

#[test]
fn assembled_in_process_expiry_is_exact_to_the_millisecond_and_the_last_clicks_ship_on_shutdown() {
    let mut rb = InProcess::start();
    let link = rb.create(json!({"long_url": "https://example.com/soon", "ttl_seconds": 10}));
    let code = link["code"].as_str().unwrap();
    let expires_at = rebound_core::time::parse_rfc3339(link["expires_at"].as_str().unwrap()).unwrap();
    assert_eq!(expires_at, NOW + 10_000, "the expiry comes from the manual clock");

    // max-age is never past the expiry (configured 300 s), and shrinks with it.
    let (status, location, cache) = rb.redirect(code);
    assert_eq!((status, location.as_deref()), (302, Some("https://example.com/soon")));
    assert_eq!(cache.as_deref(), Some("public, max-age=10"));
    rb.clock.set(expires_at - 2_500);
    assert_eq!(rb.redirect(code).2.as_deref(), Some("public, max-age=2"));

    // Served until the last millisecond, gone from the first one on (from L1: no store read).
    rb.clock.set(expires_at - 1);
    assert_eq!(rb.redirect(code).0, 302);
    let reads = rb.store.link_reads();
    rb.clock.set(expires_at);
    let (status, location, cache) = rb.redirect(code);
    assert_eq!((status, location, cache.as_deref()), (410, None, Some("no-store")));
    assert_eq!(rb.store.link_reads(), reads, "expiry is judged in L1");

    // Three redirects were clicks; the stats show them while they are still pending
    // (the day is the manual clock's), then the shutdown writes them to the rollups.
    assert_eq!(rb.stats_total(code), 3);
    rb.shut_down();
    let day = Day::of_millis(NOW);
    let rollups = rb.requests.block_on(rb.store.read_clicks(code, day, day)).unwrap();
    assert_eq!(
        rollups,
        vec![(day, rebound_store::Clicks::people(3))],
        "every click is in the rollups after the drain"
    );
}
